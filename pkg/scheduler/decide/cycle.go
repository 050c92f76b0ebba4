package decide

import (
	"errors"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpud/gpud/pkg/allocator"
	"github.com/gpud/gpud/pkg/allocator/jobs"
	"github.com/gpud/gpud/pkg/scheduler/plan"
	"github.com/gpud/gpud/pkg/scheduler/view"
)

// unqueued is the queue of pods without a queue label, and of every pod
// when no queues are defined; it has no limits.
const unqueued = "(unqueued)"

// cycle is one Decide call in progress. It composes one state per
// concern (queues, fit caches, preemption, backfill, measured telemetry),
// each with the methods that read it alone, as kube-scheduler's plugins
// keep their own cycle state; what needs several concerns is on cycle.
type cycle struct {
	cfg   Config
	s     *plan.Snapshot
	v     *view.View
	nodes *nodeUse
	// fair is the queue tree and capacity DRF shares are taken of.
	fair fairShare
	// fit caches what the cycle learns about pods that do not fit.
	fit fitCache
	// pre is preemption's state: victims, budgets, nominated nodes.
	pre preemptState
	// back is the backfill head and its shadow.
	back backfillState
	// tel is the snapshot's telemetry as placements and what-ifs use it.
	tel measuredState
	out plan.Plan
	// journal undoes what-ifs and assumed binds on the view at the end.
	journal []journalEntry
	items   map[*plan.Pod][]*view.Item
	// others are each pod's claims gpud does not model (view.Other).
	others map[*plan.Pod][]view.Other
	// anyDomain: gangs skip the topology levels (what-ifs ask only
	// whether they fit).
	anyDomain bool
	// devices is s.Devices, or noDevices when the snapshot has none, so
	// assumes and releases need no nil check.
	devices plan.Devices
	// obj are the queues' objectives (objective.go).
	obj *objectives
}

// noDevices is the structured allocator of a snapshot without one: it
// tracks nothing, and place refuses claims that need it before asking.
type noDevices struct{}

func (noDevices) Allocate(string, []*resourceapi.ResourceClaim) ([]resourceapi.AllocationResult, error) {
	return nil, errors.New("no structured allocator in this snapshot")
}
func (noDevices) AllocatedFits(string, []*resourceapi.ResourceClaim) string { return "" }
func (noDevices) Assume(*resourceapi.AllocationResult)                      {}
func (noDevices) Release(*resourceapi.AllocationResult)                     {}

type journalEntry struct {
	alloc   view.Allocation
	assumed bool
}

func newCycle(cfg Config, s *plan.Snapshot, charges *boundCharges) *cycle {
	c := &cycle{cfg: cfg, s: s, v: s.View, nodes: newNodeUse(s), items: map[*plan.Pod][]*view.Item{},
		others: map[*plan.Pod][]view.Other{}, fit: newFitCache(), pre: newPreemptState(cfg.MaxPreemptionsPerCycle),
		devices: s.Devices}
	if c.devices == nil {
		c.devices = noDevices{}
	}
	c.tel = newMeasuredState(cfg, s)
	c.fair = newFairShare(c.v.Nodes(), s.Queues)
	c.chargeBound(charges)
	c.obj = newObjectives(cfg, s.Queues)
	return c
}

// assume adds allocations to the view (and the structured allocator's
// state), journalled.
func (c *cycle) assume(allocs ...view.Allocation) error {
	for _, a := range allocs {
		if a.Result == nil {
			continue
		}
		c.devices.Assume(a.Result)
		if err := c.v.Assume(a); err != nil {
			// Assume added what it could; undo that too at the end.
			c.journal = append(c.journal, journalEntry{alloc: a, assumed: true})
			return err
		}
		c.journal = append(c.journal, journalEntry{alloc: a, assumed: true})
	}
	return nil
}

// release removes allocations from the view, journalled.
func (c *cycle) release(allocs ...view.Allocation) {
	for _, a := range allocs {
		if a.Result == nil {
			continue
		}
		c.v.Release(a.Result)
		c.devices.Release(a.Result)
		c.journal = append(c.journal, journalEntry{alloc: a})
	}
}

// restore undoes every assume and release of the cycle.
func (c *cycle) restore() {
	for i := len(c.journal) - 1; i >= 0; i-- {
		e := c.journal[i]
		if e.assumed {
			c.v.Release(e.alloc.Result)
			c.devices.Release(e.alloc.Result)
		} else {
			c.devices.Assume(e.alloc.Result)
			_ = c.v.Assume(e.alloc)
		}
	}
	c.journal = nil
}

// chargeBound charges bound pods' usage to their queues (a claim shared
// by several pods once, with the first).
func (c *cycle) chargeBound(kept *boundCharges) {
	kept.start()
	defer kept.end()
	// Claims reserved for one consumer are that pod's own; only the
	// others (shared, or not reserved yet) need remembering.
	charged := map[string]bool{}
	for _, p := range c.s.Bound {
		q, err := c.fair.queueOf(p)
		if err != nil {
			q = unqueued
		}
		var results []*resourceapi.AllocationResult
		for _, cl := range p.Claims {
			if cl == nil || cl.Status.Allocation == nil {
				continue
			}
			if len(cl.Status.ReservedFor) != 1 || cl.Status.ReservedFor[0].UID != p.Pod.UID {
				if charged[view.ClaimID(cl)] {
					continue
				}
				charged[view.ClaimID(cl)] = true
			}
			results = append(results, cl.Status.Allocation)
		}
		if p.PluginDevices > 0 { // the node's model label counts, with the cluster's models
			use, models := c.usageOf(p, p.Pod.Spec.NodeName, results)
			c.fair.tree.Charge(q, use, models, 1)
			continue
		}
		e, ok := kept.get(c.v, p.Pod, results)
		if !ok {
			use, models := c.usageOf(p, p.Pod.Spec.NodeName, results)
			e = kept.put(c.v, p.Pod, results, use, models)
		}
		c.fair.tree.Charge(q, e.use, e.models, 1)
	}
}

// usageOf is what a pod's allocations count against its queue: CPU and
// memory requests, milli-GPU (whole GPUs 1000, a fraction the larger of its
// memory and cores shares), GPU memory, MIG compute slices, and milli-GPU
// per model; GPUs held through a device plugin on node count whole.
func (c *cycle) usageOf(p *plan.Pod, node string, results []*resourceapi.AllocationResult) (jobs.Resources, []jobs.ModelMilli) {
	cpu, mem := requests(p.Pod)
	r := jobs.Resources{CPUMilli: cpu, MemoryMiB: mem >> 20}
	var models []jobs.ModelMilli
	add := func(model string, milli int64) {
		for i := range models {
			if models[i].Model == model {
				models[i].Milli += milli
				return
			}
		}
		models = append(models, jobs.ModelMilli{Model: model, Milli: milli})
	}
	if p.PluginDevices > 0 {
		// Whole GPUs through a device plugin: the model is the node's
		// GPU Feature Discovery label, when it has one.
		milli := p.PluginDevices * allocator.MilliPerGPU
		r.GPUMilli += milli
		if n := c.v.Node(node); n != nil && n.Labels[gfdProductLabel] != "" {
			add(c.fair.gfdModel(n.Labels[gfdProductLabel]), milli)
		}
	}
	for _, a := range results {
		if a == nil {
			continue
		}
		for _, res := range a.Devices.Results {
			if res.Driver != view.DriverName {
				continue
			}
			n := c.v.Node(res.Pool)
			if n == nil || n.Devices[res.Device] == nil {
				continue
			}
			d := n.Devices[res.Device]
			gp := &n.GPUs[d.GPU]
			gpuMiB := gp.MemoryBytes >> 20
			switch {
			case d.MIG:
				r.MIGSlices += int64(d.ComputeSlices)
				if gpuMiB > 0 {
					r.GPUMemoryMiB += gpuMiB * int64(d.Size) / int64(view.MaxMIGSlices)
				}
				add(gp.Model, jobs.MIGModelMilli(d.ComputeSlices))
			case res.ShareID != nil:
				milli := int64(0)
				if q, ok := res.ConsumedCapacity[view.CapacityMemory]; ok {
					r.GPUMemoryMiB += (q.Value() + 1<<20 - 1) >> 20
					if capQ, ok := d.Capacity[view.CapacityMemory]; ok && capQ.Value.Value() > 0 {
						milli = max(milli, ceilDiv(q.Value(), capQ.Value.Value(), allocator.MilliPerGPU))
					}
				}
				if q, ok := res.ConsumedCapacity[view.CapacityCores]; ok {
					if capQ, ok := d.Capacity[view.CapacityCores]; ok && capQ.Value.MilliValue() > 0 {
						milli = max(milli, ceilDiv(q.MilliValue(), capQ.Value.MilliValue(), allocator.MilliPerGPU))
					}
				}
				milli = min(max(milli, 1), allocator.MilliPerGPU)
				r.GPUMilli += milli
				add(gp.Model, milli)
			default:
				r.GPUMilli += allocator.MilliPerGPU
				r.GPUMemoryMiB += gpuMiB
				add(gp.Model, allocator.MilliPerGPU)
			}
		}
	}
	return r, models
}

// ceilDiv is ceil(a/b × scale) without overflow for realistic values.
func ceilDiv(a, b, scale int64) int64 {
	if b <= 0 {
		return 0
	}
	// a/b ≤ 1 for consumed capacity; split to keep a×scale in range.
	q, rem := a/b, a%b
	return q*scale + (rem*scale+b-1)/b
}

// resultsOf lists allocations' results.
func resultsOf(allocs []view.Allocation) []*resourceapi.AllocationResult {
	out := make([]*resourceapi.AllocationResult, 0, len(allocs))
	for _, a := range allocs {
		out = append(out, a.Result)
	}
	return out
}

// gfdProductLabel is GPU Feature Discovery's node label naming the GPU
// model (the model of GPUs a device plugin serves).
const gfdProductLabel = "nvidia.com/gpu.product"

// devicesOf is the pod whose devices stand for p where no node is chosen
// yet (typical requests, preemption's estimate): the first entry of
// p.PerNode (a claim's, when any has one), else p.
func (c *cycle) devicesOf(p *plan.Pod) *plan.Pod {
	if len(p.PerNode) > 0 {
		return p.PerNode[0].Pod
	}
	return p
}

// demand returns a pod's items on this cycle's view (cached); its other
// claims are in c.others[p].
func (c *cycle) demand(p *plan.Pod) ([]*view.Item, error) {
	if it, ok := c.items[p]; ok {
		return it, nil
	}
	it, others, err := c.v.Demand(p.Claims)
	if err != nil {
		return nil, err
	}
	c.items[p], c.others[p] = it, others
	return it, nil
}

// startOf is when a bound pod started: status.startTime, else creation.
func startOf(p *plan.Pod) time.Time {
	if p.Pod.Status.StartTime != nil {
		return p.Pod.Status.StartTime.Time
	}
	return p.Created
}
