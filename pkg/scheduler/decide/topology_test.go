package decide

import (
	"slices"
	"strings"
	"testing"

	"github.com/gpud/gpud/pkg/allocator/jobs"
	"github.com/gpud/gpud/pkg/scheduler/plan"
)

// topoGang adds PodGroup name (minMember) asking for level, required or
// preferred, as its annotations would.
func (e *env) topoGang(name string, minMember int32, level string, required bool) {
	e.gang(name, minMember)
	e.groups["default/"+name].Topology = plan.GangTopology{Level: level, Required: required,
		Source: "annotation gpud.io/gang-topology on PodGroup default/" + name}
}

func rack(r string) map[string]string { return map[string]string{jobs.LabelRack: r} }

// TestGangTopologyRequired: a gang that requires a level is placed within
// one domain of it or waits with a reason naming the level; it never
// spreads across domains as gpud's own order would when no domain has
// room.
func TestGangTopologyRequired(t *testing.T) {
	t.Run("waits rather than spread across racks", func(t *testing.T) {
		e := newEnv(t)
		e.node("a", "dgx-h100", rack("r1"))
		e.node("b", "dgx-h100", rack("r2"))
		e.topoGang("g", 2, "rack", true)
		e.pod("g0", reqs(gpus(8)), group("g"))
		e.pod("g1", reqs(gpus(8)), group("g"))
		p := e.decide(Config{})
		if len(p.Binds) != 0 {
			t.Fatalf("binds %v across racks r1 and r2", bindsOf(p))
		}
		w, _ := pendingOf(p, "g0")
		if w.Code != plan.CodeGang || !strings.Contains(w.Message, "within one rack") || !strings.Contains(w.Message, "annotation gpud.io/gang-topology") {
			t.Errorf("g0 pending %+v, want the gang's reason naming the required rack level", w)
		}
		t.Logf("g0: %s", w.Message)
		// Without the requirement the same gang spreads.
		e.groups["default/g"].Topology = plan.GangTopology{}
		if got := bindsOf(e.decide(Config{})); len(got) != 2 {
			t.Errorf("without a topology: binds %v, want both", got)
		}
	})
	t.Run("binds within the rack that holds it", func(t *testing.T) {
		e := newEnv(t)
		e.node("a", "dgx-h100", rack("r1"))
		e.node("b", "dgx-h100", rack("r2"))
		e.node("c", "dgx-h100", rack("r1"))
		e.topoGang("g", 2, "rack", true)
		e.pod("g0", reqs(gpus(8)), group("g"))
		e.pod("g1", reqs(gpus(8)), group("g"))
		got := bindsOf(e.decide(Config{}))
		if !slices.Equal([]string{got["g0"], got["g1"]}, []string{"a", "c"}) && !slices.Equal([]string{got["g0"], got["g1"]}, []string{"c", "a"}) {
			t.Errorf("binds %v, want a and c (rack r1)", got)
		}
	})
	t.Run("a listed node label, over gpud's own order", func(t *testing.T) {
		e := newEnv(t)
		const block = "example.com/block"
		e.node("a", "dgx-h100", map[string]string{jobs.LabelRack: "r1", block: "x"})
		e.node("b", "dgx-h100", map[string]string{jobs.LabelRack: "r2", block: "x"})
		e.node("c", "dgx-h100", map[string]string{jobs.LabelRack: "r1", block: "y"})
		e.topoGang("g", 2, block, true)
		e.pod("g0", reqs(gpus(8)), group("g"))
		e.pod("g1", reqs(gpus(8)), group("g"))
		cfg := Config{GangTopologyLabels: []string{block}}
		got := bindsOf(e.decide(cfg))
		if len(got) != 2 || got["g0"] == "c" || got["g1"] == "c" {
			t.Errorf("binds %v, want a and b (block x), not rack r1's a and c", got)
		}
		// Not listed: refused, naming the values allowed.
		p := e.decide(Config{})
		w, _ := pendingOf(p, "g0")
		if len(p.Binds) != 0 || w.Code != plan.CodeInvalid || !strings.Contains(w.Message, "--gang-topology-labels") ||
			!strings.Contains(w.Message, "nvlink, node, rack, zone") || !strings.Contains(w.Message, block) {
			t.Errorf("unlisted label: binds %v, g0 pending %+v", bindsOf(p), w)
		}
	})
	t.Run("node level", func(t *testing.T) {
		e := newEnv(t)
		e.node("a", "dgx-h100", nil)
		e.node("b", "dgx-h100", nil)
		e.topoGang("g", 2, "node", true)
		e.pod("g0", reqs(gpus(8)), group("g"))
		e.pod("g1", reqs(gpus(8)), group("g"))
		p := e.decide(Config{})
		if len(p.Binds) != 0 {
			t.Fatalf("binds %v on two nodes", bindsOf(p))
		}
		if w, _ := pendingOf(p, "g0"); !strings.Contains(w.Message, "within one node") {
			t.Errorf("g0 pending %+v", w)
		}
	})
	t.Run("new members join their running members' rack", func(t *testing.T) {
		e := newEnv(t)
		e.node("a", "dgx-h100", rack("r1"))
		e.node("b", "dgx-h100", rack("r1"))
		e.node("c", "dgx-h100", rack("r2"))
		e.topoGang("g", 2, "rack", true)
		for _, n := range []string{"g0", "g1", "g2"} {
			e.pod(n, reqs(gpus(8)), group("g"))
		}
		p := e.decide(Config{})
		got := bindsOf(p)
		if len(got) != 2 || slices.Contains([]string{got["g0"], got["g1"], got["g2"]}, "c") {
			t.Fatalf("binds %v, want two members in rack r1", got)
		}
		e.apply(p)
		// Node c (rack r2) is free, yet the third member waits for room
		// in r1.
		p = e.decide(Config{})
		var left string
		for _, n := range []string{"g0", "g1", "g2"} {
			if got[n] == "" {
				left = n
			}
		}
		if b := bindsOf(p); b[left] != "" {
			t.Fatalf("%s bound on %s, outside its running members' rack r1", left, b[left])
		}
		if w, _ := pendingOf(p, left); !strings.Contains(w.Message, "rack") {
			t.Errorf("%s pending %+v, want the rack named", left, w)
		}
		e.node("d", "dgx-h100", rack("r1"))
		if b := bindsOf(e.decide(Config{})); b[left] != "d" {
			t.Errorf("with node d in rack r1: binds %v, want %s on d", b, left)
		}
	})
}

// TestGangTopologyPreferred: a preferred level is tried first, and the
// gang is placed anyway when no domain of it has room.
func TestGangTopologyPreferred(t *testing.T) {
	const block = "example.com/block"
	e := newEnv(t)
	e.node("a", "dgx-h100", map[string]string{jobs.LabelRack: "r1", block: "x"})
	e.node("b", "dgx-h100", map[string]string{jobs.LabelRack: "r2", block: "x"})
	e.node("c", "dgx-h100", map[string]string{jobs.LabelRack: "r1", block: "y"})
	e.topoGang("g", 2, block, false)
	e.pod("g0", reqs(gpus(8)), group("g"))
	e.pod("g1", reqs(gpus(8)), group("g"))
	cfg := Config{GangTopologyLabels: []string{block}}
	got := bindsOf(e.decide(cfg))
	if len(got) != 2 || got["g0"] == "c" || got["g1"] == "c" {
		t.Errorf("binds %v, want block x (a and b) first", got)
	}
	// Three members: no block holds them; preferred places them anyway.
	e = newEnv(t)
	e.node("a", "dgx-h100", map[string]string{block: "x"})
	e.node("b", "dgx-h100", map[string]string{block: "x"})
	e.node("c", "dgx-h100", map[string]string{block: "y"})
	e.topoGang("g", 3, block, false)
	for _, n := range []string{"g0", "g1", "g2"} {
		e.pod(n, reqs(gpus(8)), group("g"))
	}
	if got := bindsOf(e.decide(cfg)); len(got) != 3 {
		t.Errorf("preferred with no block big enough: binds %v, want all three", got)
	}
	e.groups["default/g"].Topology.Required = true
	if got := bindsOf(e.decide(cfg)); len(got) != 0 {
		t.Errorf("required with no block big enough: binds %v, want none", got)
	}
}

// TestHealedGangGoesHome: a gang that self-healing evicted
// (Snapshot.Healed) is placed in the rack, and the NVLink domain, it ran
// in when that has room, though gpud's own order would try another
// first; without room there it is placed as usual (a preference).
func TestHealedGangGoesHome(t *testing.T) {
	twoRacks := func(t *testing.T, withD bool) *env {
		e := newEnv(t)
		e.node("a", "dgx-h100", rack("r1"))
		e.node("b", "dgx-h100", rack("r1"))
		e.node("c", "dgx-h100", rack("r2"))
		if withD {
			e.node("d", "dgx-h100", rack("r2"))
		}
		e.gang("g", 2)
		e.pod("g0", reqs(gpus(8)), group("g"))
		e.pod("g1", reqs(gpus(8)), group("g"))
		return e
	}
	pair := func(got map[string]string) string {
		n := []string{got["g0"], got["g1"]}
		slices.Sort(n)
		return strings.Join(n, ",")
	}
	t.Run("back to its old rack", func(t *testing.T) {
		e := twoRacks(t, true)
		if got := pair(bindsOf(e.decide(Config{}))); got != "a,b" {
			t.Fatalf("not healed: binds %s, want gpud's order a,b (rack r1)", got)
		}
		e.healed = map[string][]string{"default/g": {"c", "d"}}
		if got := pair(bindsOf(e.decide(Config{}))); got != "c,d" {
			t.Errorf("healed from c,d: binds %s, want c,d (its rack r2)", got)
		}
	})
	t.Run("old rack without room: placed as usual", func(t *testing.T) {
		e := twoRacks(t, false)
		e.healed = map[string][]string{"default/g": {"c", "d"}}
		if got := pair(bindsOf(e.decide(Config{}))); got != "a,b" {
			t.Errorf("binds %s, want a,b: rack r2 has one node left", got)
		}
	})
	t.Run("a required rack: its old rack among those allowed", func(t *testing.T) {
		e := twoRacks(t, true)
		e.groups["default/g"].Topology = plan.GangTopology{Level: "rack", Required: true, Source: "annotation gpud.io/gang-topology on PodGroup default/g"}
		e.healed = map[string][]string{"default/g": {"c", "d"}}
		if got := pair(bindsOf(e.decide(Config{}))); got != "c,d" {
			t.Errorf("binds %s, want c,d (its rack r2)", got)
		}
		// Healed across racks: neither old rack holds it alone, the
		// requirement holds (one rack).
		e.healed = map[string][]string{"default/g": {"b", "c"}}
		if got := pair(bindsOf(e.decide(Config{}))); got != "a,b" && got != "c,d" {
			t.Errorf("binds %s, want one rack", got)
		}
	})
	t.Run("a replacement member goes to its old NVLink domain", func(t *testing.T) {
		e := newEnv(t)
		for _, n := range []string{"a", "b", "c"} {
			e.node(n, "dgx-h100", rack("r1"))
		}
		e.gang("g", 1)
		e.pod("g0", reqs(gpus(4)), group("g"))
		first := bindsOf(e.decide(Config{}))["g0"]
		home := "c"
		if first == home {
			home = "b"
		}
		e.healed = map[string][]string{"default/g": {home}}
		if got := bindsOf(e.decide(Config{}))["g0"]; got != home {
			t.Errorf("healed from %s: bound on %q, want %s (gpud's order picks %s)", home, got, home, first)
		}
	})
}
