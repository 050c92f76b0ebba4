package decide

import (
	"iter"
	"sync"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpud/gpud/pkg/allocator/jobs"
	"github.com/gpud/gpud/pkg/scheduler/view"
)

// boundCharges keeps what each bound pod counts against its queue from
// one cycle to the next: every cycle charges every bound pod, and working
// a pod's use out again (its requests, each allocated device's GPU) was
// most of a cycle's queue accounting at thousands of nodes. Entries are
// kept by pod object and hold while its claims' allocations and the
// view's nodes they are on are the same objects (informers and the pool
// cache replace, never change, them).
type boundCharges struct {
	mu sync.Mutex
	// gen counts cycles; an entry not charged in the current one is
	// dropped once the map holds more than the cycle charged.
	gen     uint64
	byPod   map[*corev1.Pod]*boundCharge
	charged int
}

// boundCharge is one bound pod's use, with what it was worked out from.
type boundCharge struct {
	results []*resourceapi.AllocationResult
	nodes   []*view.Node
	use     jobs.Resources
	models  []jobs.ModelMilli
	gen     uint64
}

// start begins a cycle's charges.
func (b *boundCharges) start() {
	b.mu.Lock()
	if b.byPod == nil {
		b.byPod = map[*corev1.Pod]*boundCharge{}
	}
	b.gen++
	b.charged = 0
}

// end drops the pods not charged in the cycle, when there are any.
func (b *boundCharges) end() {
	defer b.mu.Unlock()
	if len(b.byPod) <= b.charged {
		return
	}
	for pod, e := range b.byPod {
		if e.gen != b.gen {
			delete(b.byPod, pod)
		}
	}
}

// get is the kept use of pod with results, when v's nodes under them are
// those it was worked out on.
func (b *boundCharges) get(v *view.View, pod *corev1.Pod, results []*resourceapi.AllocationResult) (*boundCharge, bool) {
	e := b.byPod[pod]
	if e == nil || len(e.results) != len(results) {
		return nil, false
	}
	for i, r := range results {
		if e.results[i] != r {
			return nil, false
		}
	}
	i := 0
	for n := range resultNodes(v, e.results) {
		if i >= len(e.nodes) || e.nodes[i] != n {
			return nil, false
		}
		i++
	}
	if i != len(e.nodes) {
		return nil, false
	}
	e.gen = b.gen
	b.charged++
	return e, true
}

// put keeps pod's use.
func (b *boundCharges) put(v *view.View, pod *corev1.Pod, results []*resourceapi.AllocationResult, use jobs.Resources, models []jobs.ModelMilli) *boundCharge {
	var nodes []*view.Node
	for n := range resultNodes(v, results) {
		nodes = append(nodes, n)
	}
	e := &boundCharge{results: results, nodes: nodes, use: use, models: models, gen: b.gen}
	b.byPod[pod] = e
	b.charged++
	return e
}

// resultNodes yields the view's node (nil when it has none) of each gpud
// device in results.
func resultNodes(v *view.View, results []*resourceapi.AllocationResult) iter.Seq[*view.Node] {
	return func(yield func(*view.Node) bool) {
		for _, r := range results {
			if r == nil {
				continue
			}
			for _, res := range r.Devices.Results {
				if res.Driver == view.DriverName && !yield(v.Node(res.Pool)) {
					return
				}
			}
		}
	}
}
