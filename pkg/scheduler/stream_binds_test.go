package scheduler

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpud/gpud/pkg/scheduler/plan"
)

// handOverFirst is placeAll that hands its first bind to Snapshot.Decided
// and then, before deciding the rest, waits for that pod's Binding: the
// write must be under way while the cycle still decides.
type handOverFirst struct {
	bl      *boundLog
	written bool
}

func (d *handOverFirst) Decide(s *plan.Snapshot) plan.Plan {
	p := placeAll{}.Decide(s)
	if len(p.Binds) == 0 || s.Decided == nil {
		return p
	}
	s.Decided(p.Binds[:1])
	select {
	case name := <-d.bl.added:
		d.written = name == p.Binds[0].Pod.Pod.Name
	case <-time.After(10 * time.Second):
	}
	return p
}

// TestCycleBindsAsItDecides: a unit the decider hands over while deciding
// is bound during the cycle, and bound once: execute does not dispatch it
// again with the rest of the plan.
func TestCycleBindsAsItDecides(t *testing.T) {
	base := l40sNode(t)
	c1, c2 := wholeClaim("ns", "c1", "gpu.gpud.io"), wholeClaim("ns", "c2", "gpu.gpud.io")
	p1, p2 := claimPod("ns", "p1", t0, "c1"), claimPod("ns", "p2", t0.Add(time.Second), "c2")
	d := &handOverFirst{}
	ts := newTestScheduler(t, d, append(base, c1, c2, p1, p2)...)
	d.bl = recordBindings(ts)
	ts.cycleOn(t.Context(), viewInputs(t, base, []*resourceapi.ResourceClaim{c1, c2}, []*corev1.Pod{p1, p2}), t0)

	if !d.written {
		t.Fatal("p1's Binding was not written while the cycle decided")
	}
	for _, pod := range []string{"p1", "p2"} {
		if n := d.bl.count(pod); n != 1 {
			t.Errorf("%s got %d Bindings, want 1", pod, n)
		}
	}
	if got := ts.claimFromAPI(t, "ns", "c1"); got.Status.Allocation == nil || len(got.Status.ReservedFor) != 1 {
		t.Errorf("c1 of p1, handed over early: %+v; want allocated and reserved once", got.Status)
	}
}
