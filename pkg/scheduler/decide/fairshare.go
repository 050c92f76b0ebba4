package decide

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gpud/gpud/pkg/allocator"
	"github.com/gpud/gpud/pkg/allocator/jobs"
	"github.com/gpud/gpud/pkg/scheduler/plan"
	"github.com/gpud/gpud/pkg/scheduler/view"
)

// fairShare is the cycle's queue state: the queue tree (usage, limits,
// guarantees) that orders units by dominant resource share and that
// binds, nominations and preemption what-ifs charge, the cluster capacity
// shares are taken of, and the GPU models per-model limits apply to. It
// reads nothing else of the cycle, so queue rules are testable on a few
// nodes alone.
type fairShare struct {
	tree *jobs.QueueTree
	// capacity is the cluster's total for DRF shares.
	capacity jobs.Resources
	// models are the cluster's GPU models in node order.
	models []string
	// defined: queues were configured; without them every pod is in the
	// unqueued queue.
	defined bool
}

// newFairShare builds the queue tree of queues (plus the unqueued queue)
// over nodes, with no usage charged yet.
func newFairShare(nodes []*view.Node, queues []jobs.Queue) fairShare {
	var f fairShare
	seen := map[string]bool{}
	last := "" // a node's GPUs are mostly of one model: look each up once
	for _, n := range nodes {
		f.capacity.CPUMilli += n.CPUMilli
		f.capacity.MemoryMiB += n.MemoryMiB
		for _, g := range n.GPUs {
			if g.Model != last && !seen[g.Model] {
				seen[g.Model] = true
				f.models = append(f.models, g.Model)
			}
			last = g.Model
			f.capacity.GPUMemoryMiB += g.MemoryBytes >> 20
			if g.Whole != "" {
				f.capacity.GPUMilli += allocator.MilliPerGPU
			} else {
				f.capacity.MIGSlices += jobs.MIGSlicesPerGPU
			}
		}
	}
	qs := append(slices.Clone(queues), jobs.Queue{Name: unqueued})
	t, err := jobs.NewQueueTree(qs, f.models)
	if err != nil {
		// Malformed queues (the runtime validates --queues): one queue.
		t, _ = jobs.NewQueueTree([]jobs.Queue{{Name: unqueued}}, f.models)
	}
	f.tree = t
	f.defined = len(queues) > 0
	return f
}

// queueOf is the queue a pod is accounted in: its label's leaf queue, or
// the unqueued queue for no label or when no queues are defined.
func (f *fairShare) queueOf(p *plan.Pod) (string, error) {
	if p.Queue == "" || !f.defined {
		return unqueued, nil
	}
	if !f.tree.Leaf(p.Queue) {
		return "", fmt.Errorf("label %s=%s names no leaf queue of --queues", plan.QueueLabel, p.Queue)
	}
	return p.Queue, nil
}

// gfdModel is the cluster's GPU model (the ResourceSlices' productName)
// that GPU Feature Discovery's product label names (spaces as dashes),
// else the label as it is.
func (f *fairShare) gfdModel(label string) string {
	for _, m := range f.models {
		if strings.ReplaceAll(m, " ", "-") == label {
			return m
		}
	}
	return label
}

// blockedModels are the GPU models on which queue q has no room left for
// items (per-model limits), with the limit each breaks.
func (f *fairShare) blockedModels(q string, items []*view.Item) map[string]jobs.QueueExcess {
	milli := int64(0)
	for _, it := range items {
		switch it.Kind {
		case view.Whole:
			milli += int64(it.Count) * allocator.MilliPerGPU
		case view.Fraction:
			milli++
		case view.MIG:
			if i := allocator.MIGProfileIndex(it.Alloc.MIGProfile); i >= 0 {
				milli += jobs.MIGModelMilli(allocator.MIGProfiles[i].Compute)
			}
		}
	}
	if milli == 0 {
		return nil
	}
	var out map[string]jobs.QueueExcess
	for _, m := range f.models {
		if e, over := f.tree.ModelRoom(q, m, milli); over {
			if out == nil {
				out = map[string]jobs.QueueExcess{}
			}
			out[m] = e
		}
	}
	return out
}
