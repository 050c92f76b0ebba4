package decide

import (
	"errors"
	"fmt"
	"slices"
	"strings"
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

// cycle is one Decide call in progress.
type cycle struct {
	cfg   Config
	s     *plan.Snapshot
	v     *view.View
	nodes *nodeUse
	q     *jobs.QueueTree
	// capacity is the cluster's total for DRF shares.
	capacity jobs.Resources
	// gpuModels are the cluster's GPU models in node order.
	gpuModels []string
	out       plan.Plan
	// journal undoes what-ifs and assumed binds on the view at the end.
	journal []journalEntry
	items   map[*plan.Pod][]*view.Item
	// others are each pod's claims gpud does not model (view.Other).
	others map[*plan.Pod][]view.Other
	// never caches neverFits by pod.
	never   map[*plan.Pod]string
	typical []allocator.Request
	// victims are the running pods (gangs as one) preemption may pick,
	// built on first use.
	victims     []*victim
	victimsOK   bool
	preemptions int
	pdbUsed     map[string]int
	// head is the first unit that did not fit; bf protects it.
	head      *unit
	bf        *shadow
	headTries int
	// memo holds lone pods' failures by shape (shapeKey).
	memo map[string]*failure
	// nominated are the nodes a preemptor holds room on this cycle.
	nominated map[string]bool
	// anyDomain: gangs skip the topology levels (what-ifs ask only
	// whether they fit).
	anyDomain bool
	// measured is the snapshot's telemetry on the view; nil without a
	// telemetry listener. strict is it without overcommit (nil when
	// overcommit is off), for what-ifs that release running pods: their
	// measured use is not known per pod, so overcommit's room is not
	// credited there.
	measured, strict *view.Measured
	// releasing counts the running pods (or victims) what-ifs under way
	// have released.
	releasing int
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

func newCycle(cfg Config, s *plan.Snapshot) *cycle {
	c := &cycle{cfg: cfg, s: s, v: s.View, nodes: newNodeUse(s), items: map[*plan.Pod][]*view.Item{},
		others: map[*plan.Pod][]view.Other{}, never: map[*plan.Pod]string{}, pdbUsed: map[string]int{},
		memo: map[string]*failure{}, nominated: map[string]bool{}, devices: s.Devices}
	if c.devices == nil {
		c.devices = noDevices{}
	}
	c.measured = measure(cfg, s)
	if cfg.Overcommit && c.measured != nil {
		strict := cfg
		strict.Overcommit = false
		c.strict = measure(strict, s)
	}
	c.buildQueues()
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

// buildQueues builds the queue tree (plus the unqueued queue), the
// cluster capacity, and charges bound pods' usage.
func (c *cycle) buildQueues() {
	var models []string
	seen := map[string]bool{}
	for _, n := range c.v.Nodes() {
		c.capacity.CPUMilli += n.CPUMilli
		c.capacity.MemoryMiB += n.MemoryMiB
		for _, g := range n.GPUs {
			if !seen[g.Model] {
				seen[g.Model] = true
				models = append(models, g.Model)
			}
			c.capacity.GPUMemoryMiB += g.MemoryBytes >> 20
			if g.Whole != "" {
				c.capacity.GPUMilli += allocator.MilliPerGPU
			} else {
				c.capacity.MIGSlices += jobs.MIGSlicesPerGPU
			}
		}
	}
	qs := append(slices.Clone(c.s.Queues), jobs.Queue{Name: unqueued})
	t, err := jobs.NewQueueTree(qs, models)
	if err != nil {
		// Malformed queues (the runtime validates --queues): one queue.
		t, _ = jobs.NewQueueTree([]jobs.Queue{{Name: unqueued}}, models)
	}
	c.q = t
	c.gpuModels = models
	charged := map[string]bool{}
	for _, p := range c.s.Bound {
		q, err := c.queueOf(p)
		if err != nil {
			q = unqueued
		}
		var results []*resourceapi.AllocationResult
		for _, cl := range p.Claims {
			if cl == nil || cl.Status.Allocation == nil || charged[view.ClaimID(cl)] {
				continue
			}
			charged[view.ClaimID(cl)] = true
			results = append(results, cl.Status.Allocation)
		}
		use, models := c.usageOf(p, p.Pod.Spec.NodeName, results)
		c.q.Charge(q, use, models, 1)
	}
}

// queueOf is the queue a pod is accounted in: its label's leaf queue, or
// the unqueued queue for no label or when no queues are defined.
func (c *cycle) queueOf(p *plan.Pod) (string, error) {
	if p.Queue == "" || len(c.s.Queues) == 0 {
		return unqueued, nil
	}
	if !c.q.Leaf(p.Queue) {
		return "", fmt.Errorf("label %s=%s names no leaf queue of --queues", plan.QueueLabel, p.Queue)
	}
	return p.Queue, nil
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
			add(c.gfdModel(n.Labels[gfdProductLabel]), milli)
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

// gfdModel is the cluster's GPU model (the ResourceSlices' productName)
// that GPU Feature Discovery's product label names (spaces as dashes),
// else the label as it is.
func (c *cycle) gfdModel(label string) string {
	for _, m := range c.gpuModels {
		if strings.ReplaceAll(m, " ", "-") == label {
			return m
		}
	}
	return label
}

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
