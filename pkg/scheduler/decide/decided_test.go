package decide

import (
	"fmt"
	"testing"

	"github.com/gpud/gpud/pkg/scheduler/plan"
)

// TestDecidedHandsOverEachUnit: with Snapshot.Decided set, the decider
// hands over each unit as it commits it (a gang's members together, a
// lone pod alone), before Decide returns, in the plan's order, and every
// bind of the plan exactly once; units that do not bind are not handed
// over.
func TestDecidedHandsOverEachUnit(t *testing.T) {
	e := newEnv(t)
	e.node("a", "dgx-h100", nil)
	e.node("b", "dgx-h100", nil)
	e.gang("train", 2)
	e.pod("w0", reqs(gpus(4)), group("train"))
	e.pod("w1", reqs(gpus(4)), group("train"))
	e.pod("solo", reqs(gpus(2)))
	e.pod("too-big", reqs(gpus(9)))
	s := e.snapshot()
	var units [][]string
	returned := false
	s.Decided = func(unit []plan.Bind) {
		if returned {
			t.Error("Decided called after Decide returned")
		}
		var names []string
		for _, b := range unit {
			names = append(names, b.Pod.Pod.Name)
		}
		units = append(units, names)
	}
	p := New(Config{}).Decide(s)
	returned = true
	checkPlan(t, s, p, Config{})

	var fromPlan [][]string
	for _, u := range plan.Units(p.Binds) {
		var names []string
		for _, b := range u {
			names = append(names, b.Pod.Pod.Name)
		}
		fromPlan = append(fromPlan, names)
	}
	if fmt.Sprint(units) != fmt.Sprint(fromPlan) {
		t.Fatalf("handed over %v, the plan's units are %v", units, fromPlan)
	}
	if len(units) != 2 || len(p.Binds) != 3 {
		t.Fatalf("units %v, binds %v: want the gang's two members as one unit and solo alone", units, bindsOf(p))
	}
	for _, u := range units {
		if len(u) == 2 && (u[0] == "solo" || u[1] == "solo") {
			t.Errorf("solo handed over with the gang: %v", u)
		}
	}
}
