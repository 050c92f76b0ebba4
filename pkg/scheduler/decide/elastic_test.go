package decide

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/pkg/allocator/jobs"
)

// elasticGang binds an elastic gang g of minMember 2 on node a: g0 and
// g1 first, then g2 and g3 (each gpus GPUs), one minute apart, so g3 is
// the youngest and has done the least work.
func elasticGang(t *testing.T, e *env, gpusEach int64) {
	t.Helper()
	e.gang("g", 2)
	e.pod("g0", reqs(gpus(gpusEach)), prio(1), group("g"))
	e.pod("g1", reqs(gpus(gpusEach)), prio(1), group("g"))
	e.fill(t)
	for _, n := range []string{"g2", "g3"} {
		e.now = e.now.Add(time.Minute)
		e.pod(n, reqs(gpus(gpusEach)), prio(1), group("g"))
		e.fill(t)
	}
	e.now = e.now.Add(time.Hour)
}

// TestPreemptElasticGang: an elastic gang's members beyond its minMember
// are preempted first, alone, the least progressed (youngest) first,
// without the rest of the gang; the gang goes whole only when the room
// needed would take it below its minimum.
func TestPreemptElasticGang(t *testing.T) {
	t.Run("two surplus members, not the minimum", func(t *testing.T) {
		e := newEnv(t)
		e.node("a", "dgx-h100", nil)
		elasticGang(t, e, 2)
		e.pod("high", reqs(gpus(4)), prio(100))
		p := e.decide(Config{})
		if got := evictedOf(p); !slices.Equal(got, []string{"g2", "g3"}) {
			t.Fatalf("evicted %v, want the two members beyond minMember [g2 g3]", got)
		}
		w, _ := pendingOf(p, "high")
		if w.NominatedNode != "a" || !strings.Contains(w.Message, "preempting 2 pods on a") {
			t.Errorf("high pending %+v", w)
		}
		// The victims terminate and go: the preemptor binds, the gang's
		// minimum runs on, and nothing more is evicted.
		e.apply(p)
		if p = e.decide(Config{}); len(p.Evictions) != 0 {
			t.Fatalf("while the victims terminate: evicted %v", evictedOf(p))
		}
		e.finish("default/g2", "default/g3")
		p = e.decide(Config{})
		if got := bindsOf(p); got["high"] != "a" || len(p.Evictions) != 0 {
			t.Errorf("after the victims are gone: binds %v, evicted %v", got, evictedOf(p))
		}
	})
	t.Run("one member for one member's room: the youngest", func(t *testing.T) {
		e := newEnv(t)
		e.node("a", "dgx-h100", nil)
		elasticGang(t, e, 2)
		e.pod("high", reqs(gpus(2)), prio(100))
		if got := evictedOf(e.decide(Config{})); !slices.Equal(got, []string{"g3"}) {
			t.Fatalf("evicted %v, want the youngest member [g3]", got)
		}
	})
	t.Run("below the minimum the whole gang goes", func(t *testing.T) {
		e := newEnv(t)
		e.node("a", "dgx-h100", nil)
		elasticGang(t, e, 2)
		e.pod("high", reqs(gpus(6)), prio(100))
		if got := evictedOf(e.decide(Config{})); !slices.Equal(got, []string{"g0", "g1", "g2", "g3"}) {
			t.Fatalf("evicted %v, want the whole gang (three members' room takes it below minMember 2)", got)
		}
	})
	t.Run("spare members counted across one cycle", func(t *testing.T) {
		e := newEnv(t)
		for _, n := range []string{"a", "b", "c", "d"} {
			e.node(n, "dgx-h100", nil)
		}
		elasticGang(t, e, 8)
		for i := range 3 {
			e.pod(fmt.Sprint("high", i), reqs(gpus(8)), prio(100))
		}
		p := e.decide(Config{})
		if got := evictedOf(p); !slices.Equal(got, []string{"g2", "g3"}) {
			t.Fatalf("evicted %v, want only the two members beyond minMember [g2 g3]", got)
		}
		nominated := 0
		for i := range 3 {
			w, _ := pendingOf(p, fmt.Sprint("high", i))
			switch {
			case w.NominatedNode != "":
				nominated++
			case w.Code != jobs.CodeCapacity:
				t.Errorf("high%d pending %+v, want %s (the gang is at its minimum)", i, w, jobs.CodeCapacity)
			}
		}
		if nominated != 2 {
			t.Errorf("%d preemptors nominated, want 2 (the third waits: the gang is at its minimum)", nominated)
		}
	})
	t.Run("optional members before a lone pod of the same priority", func(t *testing.T) {
		e := newEnv(t)
		e.node("a", "dgx-h100", nil)
		e.gang("g", 2)
		for _, n := range []string{"g0", "g1", "g2"} {
			e.pod(n, reqs(gpus(2)), prio(1), group("g"))
		}
		e.fill(t)
		e.now = e.now.Add(time.Hour)
		e.pod("solo", reqs(gpus(2)), prio(1)) // younger: less work lost
		e.fill(t)
		e.pod("high", reqs(gpus(2)), prio(100))
		got := evictedOf(e.decide(Config{}))
		if len(got) != 1 || !strings.HasPrefix(got[0], "g") {
			t.Fatalf("evicted %v, want one member of the elastic gang (it runs on without it), not solo", got)
		}
	})
	t.Run("a gang at its minimum goes whole", func(t *testing.T) {
		e := newEnv(t)
		e.node("a", "dgx-h100", nil)
		e.gang("g", 3)
		for _, n := range []string{"g0", "g1", "g2"} {
			e.pod(n, reqs(gpus(2)), prio(1), group("g"))
		}
		e.pod("solo", reqs(gpus(2)), prio(1))
		e.fill(t)
		e.pod("high", reqs(gpus(4)), prio(100))
		if got := evictedOf(e.decide(Config{})); !slices.Equal(got, []string{"g0", "g1", "g2"}) {
			t.Fatalf("evicted %v, want the whole gang [g0 g1 g2] (none to spare; solo alone is not enough)", got)
		}
	})
}
