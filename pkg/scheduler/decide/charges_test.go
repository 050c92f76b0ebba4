package decide

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpud/gpud/pkg/allocator/jobs"
	"github.com/gpud/gpud/pkg/scheduler/view"
)

// TestBoundChargesMatchFresh: a decider that keeps bound pods' queue
// charges across cycles reports the queues' usage a fresh one works out,
// while pods bind, finish and are replaced by updated objects (new
// requests) and nodes carry over from view to view.
func TestBoundChargesMatchFresh(t *testing.T) {
	e := newEnv(t)
	e.pools = view.NewPoolCache()
	for i := range 3 {
		e.node(fmt.Sprintf("n%d", i), "dgx-h100", nil)
	}
	for _, s := range e.slices {
		s.ResourceVersion = "1" // as the API server's: the pool cache keys on it
	}
	e.queues = []jobs.Queue{{Name: "team-a"}, {Name: "team-b"}}
	kept := New(Config{})
	rng := rand.New(rand.NewPCG(25, 3))
	ids := 0
	newID := func() types.UID { ids++; return types.UID(fmt.Sprintf("share-%d", ids)) }
	reqs := []func() []resourceapi.DeviceRequest{
		func() []resourceapi.DeviceRequest { return []resourceapi.DeviceRequest{gpus(1)} },
		func() []resourceapi.DeviceRequest { return []resourceapi.DeviceRequest{gpus(2)} },
		func() []resourceapi.DeviceRequest { return []resourceapi.DeviceRequest{fraction("10Gi")} },
		func() []resourceapi.DeviceRequest { return nil }, // CPU alone
	}
	next, hits := 0, 0
	for step := range 40 {
		for range rng.IntN(4) {
			next++
			e.pod(fmt.Sprintf("p%d", next), reqs[rng.IntN(len(reqs))](), queue([]string{"team-a", "team-b"}[rng.IntN(2)]))
		}
		if len(e.bound) > 0 && rng.IntN(3) == 0 {
			e.finish(e.bound[rng.IntN(len(e.bound))].Key())
		}
		if len(e.bound) > 0 && rng.IntN(3) == 0 { // an update: a new object asking more CPU
			b := e.bound[rng.IntN(len(e.bound))]
			b.Pod = b.Pod.DeepCopy()
			b.Pod.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = *resource.NewQuantity(int64(2+rng.IntN(4)), resource.DecimalSI)
		}
		if rng.IntN(3) == 0 { // the longest-bound share's claim replaced: its memory changed
			for _, b := range e.bound {
				if len(b.Claims) == 0 || b.Claims[0].Status.Allocation == nil {
					continue
				}
				c := b.Claims[0].DeepCopy()
				changed := false
				for i, r := range c.Status.Allocation.Devices.Results {
					if q, ok := r.ConsumedCapacity["memory"]; ok {
						q.Add(q)
						c.Status.Allocation.Devices.Results[i].ConsumedCapacity["memory"] = q
						changed = true
					}
				}
				if changed {
					b.Claims[0] = c
					break
				}
			}
		}
		if step == 20 { // a share's node's slices replaced: other GPUs under the same device names
			node := ""
			for _, b := range e.bound {
				if c := b.Claims; len(c) > 0 && c[0].Status.Allocation != nil && c[0].Spec.Devices.Requests[0].Exactly.Capacity != nil {
					node = c[0].Status.Allocation.Devices.Results[0].Pool
					break
				}
			}
			if node == "" {
				t.Fatal("no share bound by step 20")
			}
			e.slices = slices.DeleteFunc(e.slices, func(s *resourceapi.ResourceSlice) bool { return s.Spec.Pool.Name == node })
			for _, s := range toSlices(t, node, simState(t, "dgx-a100")) {
				s.ResourceVersion = "2"
				e.slices = append(e.slices, s)
			}
		}
		s := e.snapshot()
		before := map[*boundCharge]bool{}
		for _, c := range kept.charges.byPod {
			before[c] = true
		}
		ids = 0
		p := kept.Decide(s)
		for _, c := range kept.charges.byPod {
			if before[c] {
				hits++
			}
		}
		ids = 0
		want := New(Config{NewShareID: newID}).Decide(s)
		if !reflect.DeepEqual(p.QueueUsage, want.QueueUsage) {
			t.Fatalf("step %d: queue usage %+v, afresh %+v", step, p.QueueUsage, want.QueueUsage)
		}
		if len(kept.charges.byPod) != len(e.bound) {
			t.Fatalf("step %d: %d charges kept for %d bound pods", step, len(kept.charges.byPod), len(e.bound))
		}
		e.apply(p)
	}
	if hits < 50 {
		t.Fatalf("%d kept charges reused: the test does not test keeping", hits)
	}
}
