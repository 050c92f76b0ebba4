package decide

import (
	"slices"
	"strings"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpud/gpud/pkg/allocator/jobs"
	"github.com/gpud/gpud/pkg/scheduler/plan"
)

func reqs(r ...resourceapi.DeviceRequest) []resourceapi.DeviceRequest { return r }

func TestPriorityOrder(t *testing.T) {
	e := newEnv(t)
	e.node("h100-a", "dgx-h100", nil)
	e.pod("old-low", reqs(gpus(4)), prio(0))
	e.pod("mid", reqs(gpus(4)), prio(5))
	e.pod("new-high", reqs(gpus(4)), prio(10))
	p := e.decide(Config{})
	got := bindsOf(p)
	if len(got) != 2 || got["new-high"] == "" || got["mid"] == "" {
		t.Fatalf("binds %v, want new-high and mid", got)
	}
	if p.Binds[0].Pod.Pod.Name != "new-high" {
		t.Errorf("first bind %s, want new-high", p.Binds[0].Pod.Pod.Name)
	}
	w, ok := pendingOf(p, "old-low")
	if !ok || w.Code != jobs.CodeCapacity || !strings.Contains(w.Message, "no node with 4 free GPUs") {
		t.Errorf("old-low pending %+v", w)
	}
	t.Logf("old-low: %s", w.Message)
}

func TestGangAllOrNothing(t *testing.T) {
	e := newEnv(t)
	for _, n := range []string{"n1", "n2", "n3"} {
		e.node(n, "dgx-h100", nil)
	}
	e.gang("train", 4)
	for _, n := range []string{"w0", "w1", "w2"} {
		e.pod(n, reqs(gpus(8)), group("train"))
	}
	p := e.decide(Config{})
	if len(p.Binds) != 0 {
		t.Fatalf("3 of minMember 4: binds %v", bindsOf(p))
	}
	if w, _ := pendingOf(p, "w0"); w.Code != plan.CodeGang || !strings.Contains(w.Message, "3 of minMember 4") {
		t.Errorf("w0 pending %+v", w)
	}
	e.pod("w3", reqs(gpus(8)), group("train"))
	p = e.decide(Config{})
	if len(p.Binds) != 0 {
		t.Fatalf("four 8-GPU pods on three 8-GPU nodes: binds %v", bindsOf(p))
	}
	for _, n := range []string{"w0", "w1", "w2", "w3"} {
		if w, ok := pendingOf(p, n); !ok || w.Code != plan.CodeGang {
			t.Errorf("%s pending %+v", n, w)
		}
	}
	w, _ := pendingOf(p, "w0")
	t.Logf("w0: %s", w.Message)
	e.node("n4", "dgx-h100", nil)
	p = e.decide(Config{})
	got := bindsOf(p)
	if len(got) != 4 {
		t.Fatalf("with a fourth node: binds %v", got)
	}
	nodes := map[string]bool{}
	for _, b := range p.Binds {
		if b.Gang != "default/train" {
			t.Errorf("bind %s gang %q", b.Pod.Key(), b.Gang)
		}
		nodes[b.Node] = true
	}
	if len(nodes) != 4 {
		t.Errorf("gang on %d nodes, want 4", len(nodes))
	}
}

func TestDefaultRackLabelIsTheSimulators(t *testing.T) {
	if got := New(Config{}).cfg.RackLabel; got != jobs.LabelRack {
		t.Fatalf("default rack label %q, want jobs.LabelRack %q (as gpud sim jobs)", got, jobs.LabelRack)
	}
	if got := New(Config{RackLabel: "example.com/rack"}).cfg.RackLabel; got != "example.com/rack" {
		t.Fatalf("rack label %q, want the configured one", got)
	}
}

func TestGangTopology(t *testing.T) {
	e := newEnv(t)
	// Racks by the simulator's label, the default.
	e.node("a", "dgx-h100", map[string]string{jobs.LabelRack: "r1", jobs.LabelZone: "z1"})
	e.node("b", "dgx-h100", map[string]string{jobs.LabelRack: "r2", jobs.LabelZone: "z1"})
	e.node("c", "dgx-h100", map[string]string{jobs.LabelRack: "r2", jobs.LabelZone: "z1"})
	e.node("d", "dgx-h100", map[string]string{jobs.LabelRack: "r3", jobs.LabelZone: "z2"})
	e.gang("g", 2)
	e.pod("g0", reqs(gpus(8)), group("g"))
	e.pod("g1", reqs(gpus(8)), group("g"))
	p := e.decide(Config{})
	got := bindsOf(p)
	if got["g0"] == got["g1"] || !slices.Contains([]string{"b", "c"}, got["g0"]) || !slices.Contains([]string{"b", "c"}, got["g1"]) {
		t.Errorf("gang of two 8-GPU pods on %v, want rack r2 (b and c)", got)
	}
	// Two 4-GPU pods share one node (one NVLink domain).
	e = newEnv(t)
	e.node("a", "dgx-h100", nil)
	e.node("b", "dgx-h100", nil)
	e.gang("small", 2)
	e.pod("s0", reqs(gpus(4)), group("small"))
	e.pod("s1", reqs(gpus(4)), group("small"))
	got = bindsOf(e.decide(Config{}))
	if len(got) != 2 || got["s0"] != got["s1"] {
		t.Errorf("gang of two 4-GPU pods on %v, want one node", got)
	}
}

// fill binds pods with a first cycle and checks they all bound.
func (e *env) fill(t *testing.T) {
	t.Helper()
	want := len(e.pending)
	p := e.decide(Config{})
	if len(p.Binds) != want {
		t.Fatalf("fill: %d of %d bound: %+v", len(p.Binds), want, p.Pending)
	}
	e.apply(p)
}

func TestPreemptMinimalSet(t *testing.T) {
	t.Run("one 4-GPU pod rather than two 2-GPU pods", func(t *testing.T) {
		e := newEnv(t)
		e.node("a", "dgx-h100", nil)
		e.pod("two-1", reqs(gpus(2)), prio(1))
		e.pod("four", reqs(gpus(4)), prio(1))
		e.pod("two-2", reqs(gpus(2)), prio(1))
		e.fill(t)
		e.pod("high", reqs(gpus(4)), prio(100))
		p := e.decide(Config{})
		if got := evictedOf(p); !slices.Equal(got, []string{"four"}) {
			t.Fatalf("evicted %v, want [four]", got)
		}
		w, _ := pendingOf(p, "high")
		if w.NominatedNode != "a" || w.Code != CodePreempting || !strings.Contains(w.Message, "preempting 1 pod on a") {
			t.Errorf("high pending %+v", w)
		}
		if p.Evictions[0].Why != "priority" || p.Evictions[0].For.Pod.Name != "high" {
			t.Errorf("eviction %+v", p.Evictions[0])
		}
		t.Logf("high: %s", w.Message)
		// The victim terminates: the preemptor waits, no new victims.
		e.apply(p)
		p = e.decide(Config{})
		if len(p.Evictions) != 0 {
			t.Errorf("second cycle evicts %v", evictedOf(p))
		}
		if w, _ := pendingOf(p, "high"); w.NominatedNode != "a" || !strings.Contains(w.Message, "terminating") {
			t.Errorf("high while the victim terminates: %+v", w)
		}
		e.finish("default/four")
		if got := bindsOf(e.decide(Config{})); got["high"] != "a" {
			t.Errorf("after the victim is gone: binds %v", got)
		}
	})
	t.Run("checkpointable first", func(t *testing.T) {
		e := newEnv(t)
		e.node("a", "dgx-h100", nil)
		e.pod("plain", reqs(gpus(4)), prio(1))
		e.pod("ckpt", reqs(gpus(4)), prio(1), checkpointable())
		e.fill(t)
		e.pod("high", reqs(gpus(4)), prio(100))
		if got := evictedOf(e.decide(Config{})); !slices.Equal(got, []string{"ckpt"}) {
			t.Fatalf("evicted %v, want [ckpt]", got)
		}
	})
	t.Run("lowest priority first", func(t *testing.T) {
		e := newEnv(t)
		e.node("a", "dgx-h100", nil)
		e.pod("p1", reqs(gpus(4)), prio(1))
		e.fill(t)
		e.now = e.now.Add(time.Hour) // p5 loses less run time, yet p1 goes
		e.pod("p5", reqs(gpus(4)), prio(5))
		e.fill(t)
		e.pod("high", reqs(gpus(4)), prio(100))
		if got := evictedOf(e.decide(Config{})); !slices.Equal(got, []string{"p1"}) {
			t.Fatalf("evicted %v, want [p1]", got)
		}
	})
	t.Run("whole gang as a unit", func(t *testing.T) {
		e := newEnv(t)
		e.node("a", "dgx-h100", nil)
		e.gang("g", 2)
		e.pod("g0", reqs(gpus(4)), prio(1), group("g"))
		e.pod("g1", reqs(gpus(4)), prio(1), group("g"))
		e.fill(t)
		e.pod("high", reqs(gpus(2)), prio(100))
		if got := evictedOf(e.decide(Config{})); !slices.Equal(got, []string{"g0", "g1"}) {
			t.Fatalf("evicted %v, want the whole gang [g0 g1]", got)
		}
	})
	t.Run("no preemption when it would still not fit", func(t *testing.T) {
		e := newEnv(t)
		e.node("a", "dgx-h100", nil)
		e.pod("vip", reqs(gpus(4)), prio(1000))
		e.pod("low", reqs(gpus(4)), prio(1))
		e.fill(t)
		e.pod("high", reqs(gpus(8)), prio(100))
		p := e.decide(Config{})
		if len(p.Evictions) != 0 {
			t.Fatalf("evicted %v for a pod that would still not fit", evictedOf(p))
		}
		if w, _ := pendingOf(p, "high"); w.Code != jobs.CodeCapacity || w.NominatedNode != "" {
			t.Errorf("high pending %+v", w)
		}
	})
	t.Run("a gang preemptor", func(t *testing.T) {
		e := newEnv(t)
		e.node("a", "dgx-h100", nil)
		e.node("b", "dgx-h100", nil)
		e.pod("la", reqs(gpus(8)), prio(1))
		e.pod("lb", reqs(gpus(4)), prio(1))
		e.fill(t)
		e.gang("big", 2)
		e.pod("b0", reqs(gpus(8)), prio(100), group("big"))
		e.pod("b1", reqs(gpus(8)), prio(100), group("big"))
		p := e.decide(Config{})
		if got := evictedOf(p); !slices.Equal(got, []string{"la", "lb"}) {
			t.Fatalf("evicted %v, want [la lb]", got)
		}
		for _, n := range []string{"b0", "b1"} {
			if w, _ := pendingOf(p, n); w.NominatedNode == "" {
				t.Errorf("%s not nominated: %+v", n, w)
			}
		}
	})
}

func TestPreemptPDB(t *testing.T) {
	pdb := func(allowed int32) *policyv1.PodDisruptionBudget {
		return &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Name: "keep", Namespace: "default"},
			Spec:       policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "keep"}}},
			Status:     policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed},
		}
	}
	e := newEnv(t)
	e.node("a", "dgx-h100", nil)
	e.pod("kept", reqs(gpus(4)), prio(1), labelled("app", "keep"), checkpointable())
	e.pod("other", reqs(gpus(4)), prio(1))
	e.fill(t)
	e.pdbs = []*policyv1.PodDisruptionBudget{pdb(0)}
	e.pod("high", reqs(gpus(4)), prio(100))
	if got := evictedOf(e.decide(Config{})); !slices.Equal(got, []string{"other"}) {
		t.Fatalf("evicted %v, want [other] (kept's PDB allows none)", got)
	}
	e.pending = nil
	e.pod("huge", reqs(gpus(8)), prio(100))
	p := e.decide(Config{})
	if len(p.Evictions) != 0 {
		t.Fatalf("evicted %v past a PDB", evictedOf(p))
	}
	w, _ := pendingOf(p, "huge")
	if w.Code != CodePDB || !strings.Contains(w.Message, "default/keep") {
		t.Errorf("huge pending %+v", w)
	}
	e.pdbs = []*policyv1.PodDisruptionBudget{pdb(1)}
	if got := evictedOf(e.decide(Config{})); !slices.Equal(got, []string{"kept", "other"}) {
		t.Errorf("with one disruption allowed: evicted %v", got)
	}
}

func TestQueueLimit(t *testing.T) {
	e := newEnv(t)
	e.node("a", "dgx-h100", nil)
	e.node("b", "dgx-h100", nil)
	e.queues = []jobs.Queue{
		{Name: "team-a", Quota: jobs.Quota{Limit: jobs.Resources{GPUMilli: 8000}}},
		{Name: "team-b", Quota: jobs.Quota{ModelLimit: map[string]int64{"NVIDIA H100 80GB HBM3": 2000}}},
	}
	e.pod("a8", reqs(gpus(8)), queue("team-a"))
	e.pod("b2", reqs(gpus(2)), queue("team-b"))
	e.fill(t)
	e.pod("a1", reqs(gpus(1)), queue("team-a"))
	e.pod("b1", reqs(gpus(1)), queue("team-b"))
	e.pod("nobody", reqs(gpus(1)), queue("team-z"))
	p := e.decide(Config{})
	if len(p.Binds) != 0 {
		t.Fatalf("binds %v past queue limits", bindsOf(p))
	}
	w, _ := pendingOf(p, "a1")
	if w.Code != jobs.CodeQuota || w.Message != "queue team-a: limit 8 GPUs, uses 8, pod asks 1" {
		t.Errorf("a1 pending %+v", w)
	}
	w, _ = pendingOf(p, "b1")
	if w.Code != jobs.CodeModelQuota || !strings.Contains(w.Message, "queue team-b: limit 2 NVIDIA H100 80GB HBM3 GPUs, uses 2, pod asks 1") {
		t.Errorf("b1 pending %+v", w)
	}
	if w, _ = pendingOf(p, "nobody"); w.Code != plan.CodeInvalid || !strings.Contains(w.Message, "team-z") {
		t.Errorf("nobody pending %+v", w)
	}
	// The plan reports each queue's usage for the scheduler's metrics.
	if got := p.QueueUsage["team-a"].GPUMilli; got != 8000 {
		t.Errorf("QueueUsage[team-a].GPUMilli = %d, want 8000", got)
	}
	if got := p.QueueUsage["team-b"].GPUMilli; got != 2000 {
		t.Errorf("QueueUsage[team-b].GPUMilli = %d, want 2000", got)
	}
}

func TestFairShare(t *testing.T) {
	e := newEnv(t)
	e.node("a", "dgx-h100", nil)
	e.queues = []jobs.Queue{{Name: "q1"}, {Name: "q2"}}
	e.pod("q1-run", reqs(gpus(4)), queue("q1"))
	e.fill(t)
	e.pod("q1-next", reqs(gpus(4)), queue("q1"))
	e.pod("q2-next", reqs(gpus(4)), queue("q2"))
	got := bindsOf(e.decide(Config{}))
	if len(got) != 1 || got["q2-next"] == "" {
		t.Errorf("binds %v, want q2-next (its queue's share is lower)", got)
	}
}

func TestBackfill(t *testing.T) {
	e := newEnv(t)
	e.node("a", "dgx-h100", nil)
	e.pod("running", reqs(gpus(4)), prio(10), estimate(time.Hour))
	e.fill(t)
	e.pod("head", reqs(gpus(8)), prio(10))
	e.pod("short", reqs(gpus(2)), estimate(30*time.Minute))
	e.pod("long", reqs(gpus(2)), estimate(2*time.Hour))
	e.pod("unknown", reqs(gpus(2)))
	p := e.decide(Config{})
	if len(p.Evictions) != 0 {
		t.Fatalf("evicted %v (equal priority)", evictedOf(p))
	}
	got := bindsOf(p)
	if len(got) != 1 || got["short"] != "a" {
		t.Fatalf("binds %v, want only short (ends before head's start)", got)
	}
	for _, n := range []string{"long", "unknown"} {
		w, _ := pendingOf(p, n)
		if w.Code != jobs.CodeBackfill || !strings.Contains(w.Message, "pod default/head") {
			t.Errorf("%s pending %+v", n, w)
		}
		t.Logf("%s: %s", n, w.Message)
	}
	// A CPU-only pod takes nothing the head needs.
	e.pod("cpu", nil)
	if got := bindsOf(e.decide(Config{})); got["cpu"] == "" {
		t.Errorf("cpu-only pod not backfilled: %v", got)
	}
}

func TestReservation(t *testing.T) {
	e := newEnv(t)
	e.node("a", "dgx-h100", nil)
	e.node("b", "dgx-h100", nil)
	e.queues = []jobs.Queue{{Name: "owner"}, {Name: "other"}}
	now := e.now.Unix()
	e.res = []jobs.Reservation{{Name: "demo", Queue: "owner", Nodes: []string{"b"}, Start: now + 3600, End: now + 7200}}
	e.pod("fill-a", reqs(gpus(8)), queue("other"))
	e.fill(t)
	e.pod("short", reqs(gpus(8)), queue("other"), estimate(30*time.Minute))
	e.pod("long", reqs(gpus(8)), queue("other"), estimate(2*time.Hour))
	p := e.decide(Config{})
	if got := bindsOf(p); got["short"] != "b" || got["long"] != "" {
		t.Fatalf("binds %v, want short on b (ends before the reservation)", got)
	}
	w, _ := pendingOf(p, "long")
	if w.Code != CodeReserved || !strings.Contains(w.Message, "reserved for queue owner") {
		t.Errorf("long pending %+v", w)
	}
}

func TestFractionsAndMIGNeverOverAllocated(t *testing.T) {
	e := newEnv(t)
	e.node("h100", "dgx-h100", nil)
	e.node("a100", "dgx-a100", nil, 0, 1, 2, 3)
	for i := range 60 {
		switch i % 4 {
		case 0:
			e.pod(name("frac", i), reqs(fraction("20Gi")))
		case 1:
			e.pod(name("mig1", i), reqs(migReq("1g.10gb")))
		case 2:
			e.pod(name("mig3", i), reqs(migReq("3g.40gb")))
		default:
			e.pod(name("frac", i), reqs(fraction("7Gi")))
		}
	}
	total := 0
	for range 3 {
		p := e.decide(Config{})
		total += len(p.Binds)
		e.apply(p)
	}
	if total == 0 {
		t.Fatal("nothing bound")
	}
	t.Logf("%d of 60 bound over 3 cycles", total)
}

func name(p string, i int) string {
	return p + "-" + strings.Repeat("0", 2-len(itoa(int64(i)))) + itoa(int64(i))
}

func TestDeterministic(t *testing.T) {
	build := func() *env {
		e := newEnv(t)
		e.node("a", "dgx-h100", nil)
		e.node("b", "dgx-a100", nil, 0, 1)
		e.gang("g", 2)
		e.pod("g0", reqs(gpus(2)), group("g"))
		e.pod("g1", reqs(gpus(2)), group("g"))
		for i := range 10 {
			e.pod(name("f", i), reqs(fraction("10Gi")), prio(int32(i%3)))
			e.pod(name("m", i), reqs(migReq("1g.10gb")))
		}
		return e
	}
	sig := func(p plan.Plan) string {
		var b strings.Builder
		for _, x := range p.Binds {
			b.WriteString(x.Pod.Key() + "@" + x.Node)
			for _, a := range x.Allocations {
				for _, r := range a.Result.Devices.Results {
					b.WriteString("," + r.Device)
				}
			}
			b.WriteString(";")
		}
		for _, x := range p.Pending {
			b.WriteString(x.Pod.Key() + ":" + x.Code + ":" + x.Message + ";")
		}
		return b.String()
	}
	first := sig(build().decide(Config{}))
	for range 3 {
		if got := sig(build().decide(Config{})); got != first {
			t.Fatalf("plans differ:\n%s\n%s", first, got)
		}
	}
}

func TestReclaim(t *testing.T) {
	e := newEnv(t)
	e.node("a", "dgx-h100", nil)
	e.queues = []jobs.Queue{
		{Name: "owner", Quota: jobs.Quota{Guaranteed: jobs.Resources{GPUMilli: 8000}}},
		{Name: "borrower"},
	}
	e.pod("borrowed-1", reqs(gpus(4)), queue("borrower"), prio(5))
	e.pod("borrowed-2", reqs(gpus(4)), queue("borrower"), prio(5), checkpointable())
	e.fill(t)
	e.pod("mine", reqs(gpus(4)), queue("owner"))
	p := e.decide(Config{})
	if got := evictedOf(p); !slices.Equal(got, []string{"borrowed-2"}) || p.Evictions[0].Why != "reclaim" {
		t.Fatalf("evictions %+v, want borrowed-2 reclaimed", p.Evictions)
	}
	// Within its guarantee no one reclaims from the borrower's own share.
	e = newEnv(t)
	e.node("a", "dgx-h100", nil)
	e.queues = []jobs.Queue{
		{Name: "owner", Quota: jobs.Quota{Guaranteed: jobs.Resources{GPUMilli: 8000}}},
		{Name: "borrower", Quota: jobs.Quota{Guaranteed: jobs.Resources{GPUMilli: 8000}}},
	}
	e.pod("held", reqs(gpus(8)), queue("borrower"), prio(5))
	e.fill(t)
	e.pod("mine", reqs(gpus(4)), queue("owner"))
	if p := e.decide(Config{}); len(p.Evictions) != 0 {
		t.Errorf("evicted %v from a queue within its guarantee", evictedOf(p))
	}
}

func TestModelLimitMessage(t *testing.T) {
	e := newEnv(t)
	e.node("h", "dgx-h100", nil)
	e.node("a", "dgx-a100", nil)
	h100 := "NVIDIA H100 80GB HBM3"
	e.queues = []jobs.Queue{{Name: "team-a", Quota: jobs.Quota{ModelLimit: map[string]int64{h100: 1000}}}}
	e.pod("one", reqs(gpus(1)), queue("team-a"))
	p := e.decide(Config{})
	if got := bindsOf(p); got["one"] == "" {
		t.Fatalf("binds %v", got)
	}
	e.apply(p)
	// Only an H100 holds 60Gi, and team-a's H100 limit is spent.
	e.pod("big-frac", reqs(fraction("60Gi")), queue("team-a"))
	p = e.decide(Config{})
	w, _ := pendingOf(p, "big-frac")
	if w.Code != jobs.CodeCapacity || !strings.HasPrefix(w.Message, "no GPU with 60Gi free on a ") || !strings.Contains(w.Message, "in queue team-a's limit") || strings.Contains(w.Message, h100+" in") {
		t.Errorf("big-frac pending %+v", w)
	}
	t.Logf("big-frac: %s", w.Message)
}

func TestGangBindsWhenANodeFrees(t *testing.T) {
	e := newEnv(t)
	for _, n := range []string{"n1", "n2", "n3", "n4"} {
		e.node(n, "dgx-h100", nil)
	}
	e.pod("busy", reqs(gpus(1)), prio(5))
	e.fill(t)
	e.gang("train", 4)
	for _, n := range []string{"w0", "w1", "w2", "w3"} {
		e.pod(n, reqs(gpus(8)), group("train"))
	}
	e.pod("small", reqs(gpus(1)))
	p := e.decide(Config{})
	if len(p.Binds) != 0 || len(p.Evictions) != 0 {
		t.Fatalf("binds %v evictions %v while one GPU is busy", bindsOf(p), evictedOf(p))
	}
	if w, _ := pendingOf(p, "small"); w.Code != jobs.CodeBackfill {
		t.Errorf("small pending %+v (it would take room the blocked gang needs)", w)
	}
	e.finish("default/busy")
	p = e.decide(Config{})
	if got := bindsOf(p); len(got) != 4 || got["small"] != "" {
		t.Fatalf("after the node frees: binds %v", got)
	}
}

func TestInvalidClaims(t *testing.T) {
	e := newEnv(t)
	e.node("a", "dgx-h100", nil)
	e.pod("bad-class", reqs(exact("gpu", "no-such-class", 1)))
	e.pod("no-device", reqs(exact("gpu", "gpu.gpud.io", 1, `device.attributes["gpu.gpud.io"].productName == "B300"`)))
	e.pod("ok", reqs(gpus(1)))
	p := e.decide(Config{})
	if got := bindsOf(p); len(got) != 1 || got["ok"] == "" {
		t.Errorf("binds %v", got)
	}
	if w, _ := pendingOf(p, "bad-class"); w.Code != plan.CodeInvalid || !strings.Contains(w.Message, "no-such-class") {
		t.Errorf("bad-class pending %+v", w)
	}
	if w, _ := pendingOf(p, "no-device"); w.Code != jobs.CodeNeverFits {
		t.Errorf("no-device pending %+v", w)
	}
}

func TestReservationReclaimsItsNodes(t *testing.T) {
	e := newEnv(t)
	e.node("a", "dgx-h100", nil)
	e.queues = []jobs.Queue{{Name: "owner"}, {Name: "other"}}
	e.pod("squatter", reqs(gpus(8)), queue("other"), prio(50))
	e.fill(t)
	now := e.now.Unix()
	e.res = []jobs.Reservation{{Name: "demo", Queue: "owner", Nodes: []string{"a"}, Start: now - 60, End: now + 3600}}
	e.pod("owner-pod", reqs(gpus(4)), queue("owner"))
	p := e.decide(Config{})
	if len(p.Evictions) != 1 || p.Evictions[0].Why != "reservation" || p.Evictions[0].Victim.Pod.Name != "squatter" {
		t.Fatalf("evictions %+v, want squatter for the reservation", p.Evictions)
	}
}

func TestPodsPerCycleCap(t *testing.T) {
	e := newEnv(t)
	e.node("a", "dgx-h100", nil)
	for i := range 5 {
		// The cap bounds retried pods (new ones are always considered:
		// TestNoHeadOfLineBlocking).
		e.pod(name("p", i), reqs(gpus(1)), prio(int32(i)), retry)
	}
	p := e.decide(Config{MaxPodsPerCycle: 3})
	got := bindsOf(p)
	if len(got) != 3 || got["p-04"] == "" || got["p-00"] != "" {
		t.Errorf("binds %v, want the three highest priorities", got)
	}
	if w, _ := pendingOf(p, "p-00"); w.Code != jobs.CodeBlocked {
		t.Errorf("p-00 pending %+v", w)
	}
}

// TestPreemptorKeepsItsRoom: the free GPUs a preemptor counts on next to
// its victims' are not given to a later pod, in the preempting cycle nor
// while the victims terminate.
func TestPreemptorKeepsItsRoom(t *testing.T) {
	e := newEnv(t)
	e.node("a", "dgx-h100", nil)
	e.pod("six", reqs(gpus(6)), prio(50))
	e.pod("victim", reqs(gpus(2)), prio(1))
	e.fill(t)
	e.finish("default/six")
	e.pod("six-again", reqs(gpus(4)), prio(50)) // leaves 2 free next to the victim
	e.fill(t)
	e.pod("high", reqs(gpus(4)), prio(100))
	e.pod("later", reqs(gpus(2)))
	p := e.decide(Config{})
	if got := evictedOf(p); !slices.Equal(got, []string{"victim"}) {
		t.Fatalf("evicted %v, want [victim]", got)
	}
	if got := bindsOf(p); len(got) != 0 {
		t.Fatalf("binds %v: later took the preemptor's room", got)
	}
	e.apply(p)
	p = e.decide(Config{})
	if got := bindsOf(p); len(got) != 0 || len(p.Evictions) != 0 {
		t.Fatalf("while the victim terminates: binds %v evictions %v", got, evictedOf(p))
	}
	e.finish("default/victim")
	if got := bindsOf(e.decide(Config{})); got["high"] != "a" || got["later"] != "" {
		t.Errorf("after the victim is gone: binds %v", got)
	}
}

func TestGangNVLinkDomainAndTimeout(t *testing.T) {
	e := newEnv(t)
	clique := func(c string) map[string]string { return map[string]string{jobs.LabelNVLinkDomain: c} }
	e.node("a", "dgx-h100", clique("c1"))
	e.node("b", "dgx-h100", clique("c2"))
	e.node("c", "dgx-h100", clique("c1"))
	e.node("d", "dgx-h100", clique("c2"))
	e.pod("busy", reqs(gpus(1)), prio(9), onNode("a"))
	e.fill(t) // clique c1 has one whole free node left
	e.gang("g", 2)
	e.pod("g0", reqs(gpus(8)), group("g"))
	e.pod("g1", reqs(gpus(8)), group("g"))
	got := bindsOf(e.decide(Config{}))
	if len(got) != 2 || !(got["g0"] == "b" && got["g1"] == "d" || got["g0"] == "d" && got["g1"] == "b") {
		t.Errorf("gang on %v, want NVLink domain c2 (b and d)", got)
	}
	// A gang past its scheduleTimeout says so.
	e = newEnv(t)
	e.node("a", "dgx-h100", nil)
	e.gang("late", 3)
	e.groups["default/late"].ScheduleTimeout = time.Minute
	e.pod("l0", reqs(gpus(1)), group("late"))
	e.now = e.now.Add(time.Hour)
	w, _ := pendingOf(e.decide(Config{}), "l0")
	if w.Code != plan.CodeGang || !strings.Contains(w.Message, "scheduleTimeout of 1m0s has passed") {
		t.Errorf("l0 pending %+v", w)
	}
}

func TestBackfillAwayFromTheHead(t *testing.T) {
	e := newEnv(t)
	e.node("a", "dgx-h100", nil)
	e.node("b", "dgx-h100", nil)
	e.pod("run-a", reqs(gpus(4)), prio(10), estimate(time.Hour), onNode("a"))
	e.pod("run-b", reqs(gpus(6)), prio(10), onNode("b"))
	e.fill(t)
	e.pod("head", reqs(gpus(8)), prio(10))
	e.pod("fits-b", reqs(gpus(2)))
	e.pod("fits-a", reqs(gpus(2)), onNode("a"))
	p := e.decide(Config{})
	got := bindsOf(p)
	if got["fits-b"] != "b" || got["fits-a"] != "" {
		t.Fatalf("binds %v, want fits-b on b only", got)
	}
	if w, _ := pendingOf(p, "fits-a"); w.Code != jobs.CodeBackfill {
		t.Errorf("fits-a pending %+v", w)
	}
}

// TestOddInputs: odd but possible snapshots never panic and answer every
// pod.
func TestOddInputs(t *testing.T) {
	e := newEnv(t)
	e.node("a", "dgx-h100", nil)
	e.queues = []jobs.Queue{{Name: "parent"}, {Name: "leaf", Parent: "parent"}}
	now := e.now.Unix()
	e.res = []jobs.Reservation{{Name: "ghost", Queue: "nobody", Nodes: []string{"a", "zz"}, Start: now - 10, End: now + 10}}
	e.pdbs = []*policyv1.PodDisruptionBudget{{ObjectMeta: metav1.ObjectMeta{Name: "nosel", Namespace: "default"}}, nil}
	e.pod("to-parent", reqs(gpus(1)), queue("parent"))
	e.pod("no-label", reqs(gpus(1)))
	e.pod("cpu-only", nil)
	e.pod("orphan", reqs(gpus(1)), group("missing"))
	e.gang("zero", 0)
	e.pod("z0", reqs(gpus(1)), group("zero"))
	x := e.pod("nil-claim", reqs(gpus(1)))
	x.Claims = append(x.Claims, nil)
	e.groups["default/huge"] = &plan.Group{Namespace: "default", Name: "huge", Invalid: "PodGroup default/huge: spec.minMember 1000000000 is outside 1..10000"}
	e.pod("h0", reqs(gpus(1)), group("huge"))
	p := e.decide(Config{})
	if w, _ := pendingOf(p, "h0"); w.Code != plan.CodeInvalid || !strings.Contains(w.Message, "spec.minMember 1000000000") {
		t.Errorf("h0 (invalid PodGroup) pending %+v, want invalid naming spec.minMember", w)
	}
	if w, _ := pendingOf(p, "to-parent"); w.Code != plan.CodeInvalid {
		t.Errorf("to-parent pending %+v", w)
	}
	if w, _ := pendingOf(p, "orphan"); w.Code != plan.CodeGang || !strings.Contains(w.Message, "not found") {
		t.Errorf("orphan pending %+v", w)
	}
	got := bindsOf(p)
	for _, n := range []string{"no-label", "cpu-only", "z0", "nil-claim"} {
		if got[n] != "a" {
			t.Errorf("%s not bound: %v", n, got)
		}
	}
}

// TestNeverFitsBlocksNobody: a pod that fits nowhere even on an empty
// cluster neither stops preemption nor holds back later pods.
func TestNeverFitsBlocksNobody(t *testing.T) {
	e := newEnv(t)
	e.node("a", "dgx-h100", nil)
	e.pod("low", reqs(gpus(4)), prio(1))
	e.fill(t)
	e.pod("too-big", reqs(gpus(9)), prio(1000))
	e.pod("high", reqs(gpus(8)), prio(100))
	e.pod("cpu", nil)
	p := e.decide(Config{})
	if got := evictedOf(p); !slices.Equal(got, []string{"low"}) {
		t.Errorf("evicted %v, want [low] for high", got)
	}
	if got := bindsOf(p); got["cpu"] == "" {
		t.Errorf("binds %v, want cpu", got)
	}
	if w, _ := pendingOf(p, "too-big"); w.Code != jobs.CodeNeverFits || !strings.Contains(w.Message, "asks 9 GPUs") {
		t.Errorf("too-big pending %+v", w)
	}
}
