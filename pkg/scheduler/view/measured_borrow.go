package view

import (
	"cmp"
	"encoding/json"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Borrowers. A fraction's claim may set a memory limit above its request
// in its opaque device configuration (driver gpu.gpud.io, GPUConfig
// memoryLimit): its container may use memory up to the limit, and what it
// uses above its request is borrowed. Where the agent holds fractions with
// the driver's per-cgroup limits (the whole GPU's memoryLimitMode
// attribute is "driver"), the request is the soft limit, guaranteed: when
// a tenant within its request needs memory the GPU does not have free,
// the driver evicts borrowers first. So on such a GPU borrowed memory is
// reclaimable, and a new fraction whose request fits under the GPU's
// memory by requests is placeable there even when the measured use fills
// the GPU; placing it may evict a borrower, which [Measured.Evicts] tells.
// Elsewhere (MPS or watchdog mode) nothing takes borrowed memory back, and
// the measured use counts as it is.

// The attribute and value pkg/dra publishes on a whole GPU whose fractions
// have driver-enforced memory limits (dra.AttrMemoryLimitMode; the view
// does not import the driver).
const (
	attrMemoryLimitMode = "memoryLimitMode"
	memoryLimitDriver   = "driver"
)

// The opaque configuration a borrower's limit comes from (pkg/dra's
// GPUConfig).
const (
	gpuConfigAPIVersion = DriverName + "/v1alpha1"
	gpuConfigKind       = "GPUConfig"
)

// BorrowedGPU is a shared GPU in driver mode whose tenants use memory
// above their requests that the driver would take back.
type BorrowedGPU struct {
	Node, Device string
	// BorrowedBytes is what borrowers use above their requests, as
	// measured; FreeBytes what the GPU has free by the measurement.
	BorrowedBytes, FreeBytes int64
}

// borrowers indexes, by device id, the claims that may borrow on whole
// shared GPUs in driver mode: a share whose allocation's opaque GPUConfig
// sets a memoryLimit above the memory it consumed. The value is the
// request in bytes by claim UID.
func (v *View) borrowers(claims []*resourceapi.ResourceClaim) map[int32]map[string]int64 {
	var out map[int32]map[string]int64
	for _, c := range claims {
		if c == nil || c.Status.Allocation == nil || c.UID == "" {
			continue
		}
		a := c.Status.Allocation
		for _, r := range a.Devices.Results {
			if r.Driver != DriverName || r.ShareID == nil {
				continue
			}
			d := v.device(r.Pool, r.Device)
			if d == nil || d.MIG || !d.Shareable {
				continue
			}
			if mode, _ := attrString(d, attrMemoryLimitMode); mode != memoryLimitDriver {
				continue
			}
			q, ok := r.ConsumedCapacity[CapacityMemory]
			if !ok {
				continue
			}
			req := q.Value()
			if limit := memoryLimitOf(a, r.Request); limit <= req {
				continue
			}
			if out == nil {
				out = map[int32]map[string]int64{}
			}
			if out[d.id] == nil {
				out[d.id] = map[string]int64{}
			}
			out[d.id][string(c.UID)] += req
		}
	}
	return out
}

// memoryLimitOf is the memoryLimit in bytes the allocation's opaque
// GPUConfigs give request: the last configuration of this driver that
// applies to it (the claim's over its class's, as the driver reads them);
// 0 when none sets one or it cannot be read (the driver refuses such a
// claim at prepare, so it never runs).
func memoryLimitOf(a *resourceapi.AllocationResult, request string) int64 {
	var limit int64
	for _, ac := range a.Devices.Config {
		if ac.Opaque == nil || ac.Opaque.Driver != DriverName || !configApplies(ac.Requests, request) {
			continue
		}
		raw := ac.Opaque.Parameters.Raw
		if len(raw) > resourceapi.OpaqueParametersMaxLength {
			limit = 0
			continue
		}
		var cfg struct {
			APIVersion  string             `json:"apiVersion"`
			Kind        string             `json:"kind"`
			MemoryLimit *resource.Quantity `json:"memoryLimit"`
		}
		if err := json.Unmarshal(raw, &cfg); err != nil || cfg.APIVersion != gpuConfigAPIVersion || cfg.Kind != gpuConfigKind {
			limit = 0
			continue
		}
		limit = 0
		if cfg.MemoryLimit != nil {
			if v, ok := cfg.MemoryLimit.AsInt64(); ok && v > 0 {
				limit = v
			}
		}
	}
	return limit
}

// configApplies reports whether a configuration for requests applies to
// request: all when it names none; a main request covers its subrequests
// (<main>/<sub>).
func configApplies(requests []string, request string) bool {
	if len(requests) == 0 {
		return true
	}
	for _, r := range requests {
		if r == request || strings.HasPrefix(request, r+"/") {
			return true
		}
	}
	return false
}

// borrowed is what dm's borrowers use above their requests, as measured
// and attributed, less what what-ifs released.
func (dm *devMeasure) borrowed() int64 {
	var b int64
	for uid, req := range dm.borrow {
		if dm.released[uid] > 0 {
			continue
		}
		if used, ok := dm.claims[uid]; ok {
			b += max(int64(min(used, uint64(maxMemoryBytes)))-req, 0)
		}
	}
	return b
}

// Borrowing lists the driver-mode GPUs whose borrowers use memory above
// their requests, by node and device name.
func (m *Measured) Borrowing() []BorrowedGPU {
	if m == nil {
		return nil
	}
	var out []BorrowedGPU
	for id, dm := range m.devs {
		if b := dm.borrowed(); b > 0 {
			d := m.v.devs[id]
			out = append(out, BorrowedGPU{Node: d.node.Name, Device: d.Name, BorrowedBytes: b, FreeBytes: max(dm.total-dm.used, 0)})
		}
	}
	slices.SortFunc(out, func(a, b BorrowedGPU) int {
		return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.Device, b.Device))
	})
	return out
}

// Evicts is how much borrowed memory the driver would evict if a new
// share of bytes on device (of node) used its whole request: what the
// measured free memory lacks for it, up to what borrowers hold above
// their requests; 0 where nothing would be evicted (room is free, the GPU
// is not in driver mode, or nothing is measured).
func (m *Measured) Evicts(node, device string, bytes int64) int64 {
	if m == nil || m.devs == nil {
		return 0
	}
	d := m.v.device(node, device)
	if d == nil || m.devs[d.id] == nil {
		return 0
	}
	return m.devs[d.id].evicts(bytes)
}

// evicts is [Measured.Evicts] on dm.
func (dm *devMeasure) evicts(bytes int64) int64 {
	if len(dm.borrow) == 0 {
		return 0
	}
	short := max(dm.used-dm.relUsed, 0) + bytes - dm.total
	if short <= 0 {
		return 0
	}
	return min(short, dm.borrowed())
}

// evicting lists the GPUs where a fraction item would make the driver
// evict borrowers ([Measured.Evicts] of its memory); nil for other items
// and when there is none. A placement avoids them while it fits elsewhere.
func (m *Measured) evicting(it *Item) map[gpuRef]bool {
	if m == nil || m.devs == nil || it == nil || it.Kind != Fraction {
		return nil
	}
	q, ok := it.Capacity[CapacityMemory]
	if !ok {
		return nil
	}
	bytes := q.Value()
	var out map[gpuRef]bool
	for id, dm := range m.devs {
		if dm.evicts(bytes) > 0 {
			if out == nil {
				out = map[gpuRef]bool{}
			}
			d := m.v.devs[id]
			out[gpuRef{d.node.Name, d.GPU}] = true
		}
	}
	return out
}
