package deviceplugin

import (
	"fmt"
	"slices"
	"sort"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/timeslice"
	"github.com/gpud/gpud/pkg/topology"
)

// device is one device the kubelet sees.
type device struct {
	// ID is the kubelet device ID: a GPU UUID, a MIG UUID, or <uuid>::<n>
	// for a replica.
	ID string
	// Unit is the UUID of the whole GPU or MIG device behind ID: its CDI
	// name and NVIDIA_VISIBLE_DEVICES entry.
	Unit string
	// GPU is the UUID of the physical GPU.
	GPU string
	// Minor is the GPU's /dev/nvidia<minor>.
	Minor int
	// NUMA is the GPU's NUMA node, -1 when unknown.
	NUMA int
	// Health is the GPU's health; Reason says why it is not Healthy.
	Health gpu.Health
	Reason string
	// Replica is the share number, -1 for a device that is not shared.
	Replica int
	// Share is the replica's MPS share.
	Share timeslice.Share
	// MIG describes the unit when it is a MIG device.
	MIG *gpu.MIGDevice
}

func (d *device) healthy() bool { return d.Health == gpu.Healthy }

// group keys devices that preferred allocation keeps together: the replicas
// of one unit, or the MIG slices of one GPU.
func (d *device) group() string {
	if d.Replica >= 0 {
		return d.Unit
	}
	return d.GPU
}

// deviceSet is what one resource advertises at one moment. It is immutable
// once built.
type deviceSet struct {
	resource string
	devices  []*device
	byID     map[string]*device
	// grouped is true for MIG slices and replicas: preferred allocation
	// packs them by group instead of choosing GPUs by interconnect.
	grouped bool
	// groupSize is how many devices each group advertises in total.
	groupSize map[string]int
	matrix    *topology.Matrix
}

func newDeviceSet(resource string, devs []*device, grouped bool, m *topology.Matrix) *deviceSet {
	s := &deviceSet{resource: resource, devices: devs, byID: make(map[string]*device, len(devs)),
		grouped: grouped, groupSize: map[string]int{}, matrix: m}
	for _, d := range devs {
		s.byID[d.ID] = d
		s.groupSize[d.group()]++
	}
	return s
}

// list is the ListAndWatch payload, built fresh for each send.
func (s *deviceSet) list() []*pluginapi.Device {
	out := make([]*pluginapi.Device, 0, len(s.devices))
	for _, d := range s.devices {
		pd := &pluginapi.Device{ID: d.ID, Health: pluginapi.Healthy}
		if !d.healthy() {
			pd.Health = pluginapi.Unhealthy
		}
		if d.NUMA >= 0 {
			pd.Topology = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(d.NUMA)}}}
		}
		out = append(out, pd)
	}
	return out
}

// sameAdvertisement reports whether two sets would send the same list.
func (s *deviceSet) sameAdvertisement(o *deviceSet) bool {
	if s == nil || o == nil {
		return s == o
	}
	return slices.EqualFunc(s.devices, o.devices, func(a, b *device) bool {
		return a.ID == b.ID && a.healthy() == b.healthy() && a.NUMA == b.NUMA && a.Share == b.Share
	})
}

// buildResult is the set of resources an inventory advertises, and the
// configuration problems met on the way (logged by the manager).
type buildResult struct {
	sets     map[string]*deviceSet
	warnings []string
}

// build turns an inventory into per-resource device sets. It is pure.
func build(inv gpu.Inventory, cfg Config) buildResult {
	m := topology.New(inv)
	gpuRes := cfg.ResourcePrefix + "/gpu"
	res := buildResult{sets: map[string]*deviceSet{}}
	devs := map[string][]*device{}
	grouped := map[string]bool{}
	add := func(resource string, d []*device, isGrouped bool) {
		if len(d) == 0 {
			return
		}
		devs[resource] = append(devs[resource], d...)
		grouped[resource] = grouped[resource] || isGrouped
	}
	single := cfg.MIGStrategy == MIGSingle && singleUsable(inv, &res.warnings)
	for i := range inv.GPUs {
		g := &inv.GPUs[i]
		if g.UUID == "" {
			continue // lost before its UUID was read: nothing to name
		}
		if g.MIGPending {
			// Its devices change at the next GPU reset; advertising either
			// the old or the new set would hand out devices that vanish.
			res.warnings = append(res.warnings, fmt.Sprintf("gpu %s withdrawn: its MIG mode change waits for a GPU reset", g.UUID))
			continue
		}
		useMIG := g.MIGEnabled && cfg.MIGStrategy != MIGNone
		if cfg.MIGStrategy == MIGSingle && !single {
			useMIG = false
			if g.MIGEnabled {
				continue // the warning says why
			}
		}
		if !useMIG {
			d := &device{ID: g.UUID, Unit: g.UUID, GPU: g.UUID, Minor: g.Minor, NUMA: g.NUMANode,
				Health: g.Health, Reason: g.HealthReason, Replica: -1}
			r, ds, isShared := shareOut(cfg, gpuRes, d, g.Index, g.MemoryBytes, &res.warnings)
			add(r, ds, isShared)
			continue
		}
		for j := range g.MIGDevices {
			mig := &g.MIGDevices[j]
			r := gpuRes
			if cfg.MIGStrategy == MIGMixed {
				r = cfg.ResourcePrefix + "/mig-" + mig.Profile
			}
			health, reason := mig.EffectiveHealth(g)
			d := &device{ID: mig.UUID, Unit: mig.UUID, GPU: g.UUID, Minor: g.Minor, NUMA: g.NUMANode,
				Health: health, Reason: reason, Replica: -1, MIG: mig}
			r, ds, isShared := shareOut(cfg, r, d, -1, mig.MemoryBytes, &res.warnings)
			add(r, ds, isShared || cfg.MIGStrategy != MIGNone)
		}
	}
	for r, ds := range devs {
		res.sets[r] = newDeviceSet(r, ds, grouped[r], m)
	}
	return res
}

// shareOut returns the devices one unit advertises: itself, or its
// replicas under the shared resource name when the sharing config splits it.
func shareOut(cfg Config, resource string, d *device, index int, memBytes uint64, warnings *[]string) (string, []*device, bool) {
	sh, ok := cfg.Sharing.For(d.Unit, index)
	if !ok {
		return resource, []*device{d}, false
	}
	memMiB := memBytes >> 20
	if err := sh.Validate(memMiB); err != nil {
		*warnings = append(*warnings, fmt.Sprintf("device %s advertised unshared: %v", d.Unit, err))
		return resource, []*device{d}, false
	}
	if cfg.RenameShared {
		resource += ".shared"
	}
	out := make([]*device, 0, sh.Count())
	for n := range sh.Count() {
		share, err := sh.ShareOf(n, memMiB)
		if err != nil {
			*warnings = append(*warnings, fmt.Sprintf("device %s share %d: %v", d.Unit, n, err))
			continue
		}
		r := *d
		r.ID, r.Replica, r.Share = timeslice.ReplicaID(d.Unit, n), n, share
		out = append(out, &r)
	}
	return resource, out, true
}

// singleUsable reports whether the single strategy can advertise MIG
// slices: every GPU MIG-enabled with slices of one profile. A node with no
// MIG-enabled GPU is usable too (it advertises whole GPUs).
func singleUsable(inv gpu.Inventory, warnings *[]string) bool {
	profiles := map[string]bool{}
	enabled, disabled := 0, 0
	for _, g := range inv.GPUs {
		if !g.MIGEnabled {
			disabled++
			continue
		}
		enabled++
		for _, m := range g.MIGDevices {
			profiles[m.Profile] = true
		}
	}
	if enabled == 0 {
		return true
	}
	if disabled > 0 || len(profiles) != 1 {
		names := make([]string, 0, len(profiles))
		for p := range profiles {
			names = append(names, p)
		}
		sort.Strings(names)
		*warnings = append(*warnings, fmt.Sprintf("mig strategy single needs every GPU MIG-enabled with one profile; found %d enabled, %d disabled, profiles %v: MIG GPUs not advertised (use --mig-strategy mixed)", enabled, disabled, names))
		return false
	}
	return true
}
