package kubectlgpud

import (
	"cmp"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpud/gpud/pkg/allocator/jobs"
	"github.com/gpud/gpud/pkg/scheduler/plan"
	"github.com/gpud/gpud/pkg/scheduler/queues"
)

// QueueUse is what the pods of one queue hold and wait for. A pod's queue
// is its label gpud.io/queue or the queue its namespace is bound to, by a
// Queue's spec.namespaces (when Queue objects were read) or by the
// namespace's gpud.io/queue label (when namespaces were read), as the
// scheduler places it: [queues.Set.QueueOf].
type QueueUse struct {
	Name    string `json:"name"`
	Running int    `json:"running"`
	Pending int    `json:"pending"`
	// GPUs counts whole GPUs held (DRA devices and the device plugin's
	// GPU resource).
	GPUs int `json:"gpus"`
	// MIG counts MIG slices held.
	MIG int `json:"mig"`
	// FractionBytes sums the memory of fractions held.
	FractionBytes int64 `json:"fractionBytes"`
}

// RefusedQueue is the queue name [Queues] gives the pods the scheduler
// refuses to place (a label naming a queue their namespace is not bound
// to, a namespace bound to a refused queue).
const RefusedQueue = "(refused)"

// Queues adds up [Pods] by queue; unqueued pods are under "". Sorted by
// name.
func Queues(s *Snapshot, prefix string) []QueueUse {
	by := map[string]*QueueUse{}
	var set *queues.Set
	if s.QueuesRead || len(s.NamespaceQueues) > 0 {
		// A namespace label may name a queue of gpud scheduler's
		// --queues file, which kubectl cannot read: such names count as
		// defined.
		var file []jobs.Queue
		objs := map[string]bool{}
		for _, q := range s.Queues {
			objs[q.Name] = true
		}
		for _, q := range slices.Sorted(maps.Values(s.NamespaceQueues)) {
			if !objs[q] && !slices.ContainsFunc(file, func(f jobs.Queue) bool { return f.Name == q }) {
				file = append(file, jobs.Queue{Name: q})
			}
		}
		set = queues.Resolve(s.Queues, file, nil)
	}
	for _, p := range Pods(s, prefix) {
		if p.Phase == "Succeeded" || p.Phase == "Failed" {
			continue
		}
		if set != nil {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Labels: map[string]string{plan.QueueLabel: p.Queue}}}
			q, err := set.QueueOf(pod, s.NamespaceQueues[p.Namespace])
			if err != nil {
				q = RefusedQueue
			}
			p.Queue = q
		}
		q := by[p.Queue]
		if q == nil {
			q = &QueueUse{Name: p.Queue}
			by[p.Queue] = q
		}
		switch {
		case p.Node == "":
			q.Pending++
		default:
			q.Running++
		}
		for _, d := range p.Devices {
			switch d.Kind {
			case KindGPU:
				q.GPUs++
			case KindMIG:
				q.MIG++
			case KindFraction:
				q.FractionBytes += d.MemoryBytes
			case KindResource:
				switch {
				case d.Profile != "":
					q.MIG += d.Count
				case d.Device == prefix+"/gpu":
					q.GPUs += d.Count
				}
			}
		}
	}
	out := make([]QueueUse, 0, len(by))
	for _, q := range by {
		out = append(out, *q)
	}
	slices.SortFunc(out, func(a, b QueueUse) int { return cmp.Compare(a.Name, b.Name) })
	return out
}
