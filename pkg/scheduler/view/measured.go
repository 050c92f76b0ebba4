package view

import (
	"cmp"
	"slices"
	"strconv"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpud/gpud/pkg/gputel"
)

// MeasureConfig tunes how [View.Measure] weighs measured memory.
type MeasureConfig struct {
	// Overcommit lets a fraction take memory that a GPU's shares requested
	// but do not use: up to the measured free memory less the margin,
	// even beyond the requests. Off: a fraction gets the lesser of the
	// requested and the measured free memory.
	Overcommit bool
	// MarginPercent is the share of a GPU's memory that overcommit leaves
	// free of the measured use; 0 is [DefaultMarginPercent].
	MarginPercent int
	// Claims are the allocated claims of running pods, to find borrowers:
	// shares whose opaque GPUConfig memoryLimit is above the memory they
	// requested. On a GPU whose memoryLimitMode attribute is "driver",
	// what a borrower uses above its request (as measured per claim,
	// gputel.Device.ClaimMemoryBytes) is reclaimable (the driver evicts
	// borrowers first for a tenant within its request) and does not keep
	// a fraction out; see [Measured.Evicts]. Nil: no borrowers known.
	Claims []*resourceapi.ResourceClaim
}

// DefaultMarginPercent is overcommit's default safety margin: 10% of the
// GPU's memory (8 GB of an 80 GB H100). The measurement is up to one
// stream interval old, tenants' use moves between samples (caching
// allocators grow in bursts, a process starting takes a CUDA context of
// several hundred MiB before its first sample) and a tenant that runs out
// of memory fails, so overcommit keeps room for a burst of that size.
const DefaultMarginPercent = 10

// Measured is what nodes' agents measure on their devices, indexed for the
// view [View.Measure] made it from: devices reported unhealthy (a GPU's
// partitions and MIG devices with it) and, per shared GPU, how far the
// measured memory use is above (or, with overcommit, how much room it
// leaves below) the memory its shares requested. Pass it in
// [Options.Measured]: fractions are then placed only on healthy devices
// within the real free memory. It holds for the view's allocations when
// it was made (a decision cycle's start), less what [Measured.Release]
// takes out for what-ifs; like the view, it is not safe for concurrent
// use.
type Measured struct {
	v *View
	// id tells measurements apart (models remember the one they read).
	id uint64
	// down holds a reason by device id for devices reported unhealthy;
	// nil when none is.
	down []string
	// adjust is by device id the memory bytes added to what a whole
	// shareable device's shares requested: positive when tenants use
	// more, negative for overcommit's room; nil when none is measured.
	// devs holds the measurements behind it.
	adjust []int64
	devs   map[int32]*devMeasure
	nodes  map[string]bool
	// downOn are the nodes with a device down.
	downOn map[*Node]bool
	downs  []DownDevice
	over   []MemoryExcess
}

// DownDevice is a device telemetry reports unhealthy.
type DownDevice struct {
	Node, Device, Reason string
	// MIG: a MIG device reported alone (its GPU is healthy).
	MIG bool
}

// MemoryExcess is a GPU whose tenants use more memory than they
// requested.
type MemoryExcess struct {
	Node, Device                           string
	UsedBytes, RequestedBytes, MemoryBytes int64
}

// Measure indexes the nodes' telemetry (by node name; devices by uuid)
// for placements on v, with v's allocations as they are now. Nodes absent
// from it have no telemetry: their devices count by requests alone. A GPU whose
// uuid is reported unhealthy takes all its devices (whole, MIG) down; a
// MIG device reported unhealthy goes down alone.
func (v *View) Measure(tel map[string]*gputel.Node, cfg MeasureConfig) *Measured {
	m := &Measured{v: v, id: usageClock.Add(1), nodes: make(map[string]bool, len(tel))}
	borrow := v.borrowers(cfg.Claims)
	margin := cfg.MarginPercent
	if margin <= 0 {
		margin = DefaultMarginPercent
	}
	for _, n := range v.nodes {
		nt, ok := tel[n.Name]
		if !ok || nt == nil {
			continue
		}
		devs := nt.Devices
		m.nodes[n.Name] = true
		if len(devs) == 0 {
			continue
		}
		matched := 0
		for g := range n.GPUs {
			gp := &n.GPUs[g]
			if r, ok := devs[gp.UUID]; ok && gp.UUID != "" {
				matched++
				if r.Unhealthy {
					m.gpuDown(n, gp, r.HealthReason)
				} else if d := gp.wholeDev; d != nil && d.Shareable {
					m.measure(d, r, cfg.Overcommit, margin, borrow[d.id])
				}
			}
		}
		if matched == len(devs) {
			continue // GPUs only: no MIG device to look up
		}
		for g := range n.GPUs {
			gp := &n.GPUs[g]
			for _, d := range gp.migDevs {
				if u, ok := attrString(d, "uuid"); ok && u != gp.UUID {
					if r, ok := devs[u]; ok && r.Unhealthy {
						m.setDown(d, r.HealthReason, true)
					}
				}
			}
		}
	}
	slices.SortFunc(m.downs, func(a, b DownDevice) int { return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.Device, b.Device)) })
	return m
}

// gpuDown takes every device of gp down; the GPU is listed once, by its
// whole device's name, else "gpu-<index>".
func (m *Measured) gpuDown(n *Node, gp *GPU, reason string) {
	name := gp.Whole
	if name == "" {
		name = "gpu-" + strconv.Itoa(gp.Index)
	}
	m.downs = append(m.downs, DownDevice{Node: n.Name, Device: name, Reason: reason})
	if gp.wholeDev != nil {
		m.setDown(gp.wholeDev, reason, false)
	}
	for _, d := range gp.migDevs {
		m.setDown(d, reason, false)
	}
}

func (m *Measured) setDown(d *Device, reason string, list bool) {
	if m.down == nil {
		m.down = make([]string, len(m.v.devs))
	}
	if reason == "" {
		reason = "unhealthy"
	}
	if m.down[d.id] != "" {
		return
	}
	m.down[d.id] = reason
	if m.downOn == nil {
		m.downOn = map[*Node]bool{}
	}
	m.downOn[d.node] = true
	if list {
		m.downs = append(m.downs, DownDevice{Node: d.node.Name, Device: d.Name, Reason: reason, MIG: true})
	}
}

// measure records whole shareable device d's measurement and sets its
// memory adjustment (see devMeasure.adjust); borrow are the device's
// borrowers' requests by claim UID (nil: none).
func (m *Measured) measure(d *Device, r gputel.Device, overcommit bool, marginPct int, borrow map[string]int64) {
	c, ok := d.Capacity[CapacityMemory]
	if !ok || c.Value.Sign() <= 0 {
		return
	}
	total := c.Value.Value()
	dm := &devMeasure{used: int64(min(r.MemoryUsedBytes, uint64(maxMemoryBytes))), claims: r.ClaimMemoryBytes, overcommit: overcommit,
		total: total, borrow: borrow}
	if overcommit {
		dm.margin = total / 100 * int64(marginPct)
	}
	if u := m.v.usage.dev[d.id]; u != nil {
		if q, ok := u.consumed[CapacityMemory]; ok {
			dm.req = q.Value()
		}
		if u.exclusive > 0 || u.whole > 0 {
			return // taken whole: nothing to share
		}
	}
	if m.adjust == nil {
		m.adjust = make([]int64, len(m.v.devs))
		m.devs = map[int32]*devMeasure{}
	}
	m.devs[d.id] = dm
	m.adjust[d.id] = dm.adjust()
	if dm.used-dm.borrowed() > dm.req { // borrowed memory is the driver's to take back
		m.over = append(m.over, MemoryExcess{Node: d.node.Name, Device: d.Name, UsedBytes: dm.used, RequestedBytes: dm.req, MemoryBytes: total})
	}
}

// devMeasure is one shared GPU's measurement: memory used as measured
// (and per claim UID, where attributed), what its shares requested when
// the view was measured, and what what-ifs have released of both.
type devMeasure struct {
	used, req       int64
	claims          map[string]uint64
	overcommit      bool
	margin          int64
	relUsed, relReq int64
	// total is the GPU's memory; borrow the requests of its borrowers by
	// claim UID (a driver-mode GPU's; nil: none), released how many times
	// what-ifs released each.
	total    int64
	borrow   map[string]int64
	released map[string]int
}

// adjust is the bytes added to the requested memory (R) of the device's
// shares for its measured use (M), both less what is released, and M less
// what borrowers use above their requests on a driver-mode GPU (the
// driver takes that back): max(R, M) counts without overcommit; with it,
// max(M, min(R, M+margin)) (requests count until the measurement plus the
// margin leaves room).
func (dm *devMeasure) adjust() int64 {
	used, req := max(dm.used-dm.relUsed-dm.borrowed(), 0), max(dm.req-dm.relReq, 0)
	if dm.overcommit && used < req {
		return max(used, min(req, used+dm.margin)) - req
	}
	return max(used-req, 0)
}

// Release takes what allocs (running pods' claims, counted when m was
// made) use out of the measurement, for a what-if without them: a claim's
// attributed use ([gputel.Device.ClaimMemoryBytes]), else as much as it
// requested. [Measured.Hold] puts it back; a cycle pairs them.
func (m *Measured) Release(allocs ...Allocation) { m.release(allocs, 1) }

// Hold undoes [Measured.Release].
func (m *Measured) Hold(allocs ...Allocation) { m.release(allocs, -1) }

func (m *Measured) release(allocs []Allocation, sign int64) {
	if m == nil || m.devs == nil {
		return
	}
	for _, a := range allocs {
		if a.Result == nil {
			continue
		}
		for _, r := range a.Result.Devices.Results {
			if r.ShareID == nil || r.Driver != DriverName {
				continue
			}
			d := m.v.device(r.Pool, r.Device)
			if d == nil || m.devs[d.id] == nil {
				continue
			}
			dm := m.devs[d.id]
			q := r.ConsumedCapacity[CapacityMemory]
			req := q.Value()
			used := req
			if a.Claim != nil {
				if b, ok := dm.claims[string(a.Claim.UID)]; ok {
					used = int64(min(b, uint64(maxMemoryBytes)))
				}
			}
			dm.relUsed += sign * used
			dm.relReq += sign * req
			if a.Claim != nil && dm.borrow != nil {
				if _, ok := dm.borrow[string(a.Claim.UID)]; ok {
					if dm.released == nil {
						dm.released = map[string]int{}
					}
					dm.released[string(a.Claim.UID)] += int(sign)
				}
			}
			m.adjust[d.id] = dm.adjust()
			touch(d.node)
		}
	}
}

// of returns m if it was made for v, else nil.
func (m *Measured) of(v *View) *Measured {
	if m == nil || m.v != v {
		return nil
	}
	return m
}

// isDown reports why device d is reported unhealthy ("" if it is not).
func (m *Measured) isDown(d *Device) string {
	if m == nil || m.down == nil || d == nil {
		return ""
	}
	return m.down[d.id]
}

// anyDown reports whether a device of n is reported down.
func (m *Measured) anyDown(n *Node) bool { return m != nil && m.downOn[n] }

// memAdjust is device d's memory adjustment in bytes.
func (m *Measured) memAdjust(d *Device) int64 {
	if m == nil || m.adjust == nil || d == nil {
		return 0
	}
	return m.adjust[d.id]
}

// Reported reports whether node's agent streams telemetry.
func (m *Measured) Reported(node string) bool { return m != nil && m.nodes[node] }

// Down lists the devices reported unhealthy, by node and device name (a
// GPU once, not each of its MIG devices).
func (m *Measured) Down() []DownDevice {
	if m == nil {
		return nil
	}
	return m.downs
}

// Excess lists the shared GPUs whose measured memory use is above what
// their shares requested, by node and device name.
func (m *Measured) Excess() []MemoryExcess {
	if m == nil {
		return nil
	}
	return m.over
}

// Check is [Check] of the devices allocs take, with overcommit's room: a
// shared device's memory may be consumed beyond its capacity by as much
// room as the measurement left. Devices allocs do not take are not
// checked: earlier overcommit may exceed what a newer measurement leaves.
func (m *Measured) Check(allocs ...*resourceapi.AllocationResult) error {
	return check(m.v, m.credit, allocs, true)
}

// credit is how far device d's memory may be consumed beyond its
// capacity (overcommit's room), 0 for none.
func (m *Measured) credit(d *Device) int64 { return max(-m.memAdjust(d), 0) }
