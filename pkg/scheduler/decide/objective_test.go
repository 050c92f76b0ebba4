package decide

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/pkg/allocator/jobs"
	"github.com/gpud/gpud/pkg/allocator/objective"
	"github.com/gpud/gpud/pkg/scheduler/plan"
)

// busyAndIdle is two 8-GPU, 224-CPU nodes: busy runs a pod holding one
// GPU and 200 CPUs, idle runs nothing. Today's policy keeps a 1-GPU,
// 12-CPU pod off busy (12 CPUs are more than a GPU's share there: busy's
// free GPUs would be left with less CPU to feed them, which gpud's policy
// counts as stranded GPUs), so it wakes idle.
func busyAndIdle(t *testing.T) *env {
	t.Helper()
	e := newEnv(t)
	e.node("busy", "dgx-h100", nil)
	e.node("idle", "dgx-h100", nil)
	e.pod("filler", reqs(gpus(1)), onNode("busy"), cpus("200"))
	e.apply(e.decide(Config{}))
	if len(e.bound) != 1 {
		t.Fatalf("filler not bound")
	}
	return e
}

// A queue with an energy weight puts a GPU pod on a node already running
// something rather than wake an empty one; without (no objective, or
// util=1,fair=1) the same pod goes where today's policy puts it.
func TestObjectiveEnergy(t *testing.T) {
	energy := &jobs.Objective{Energy: 1}
	for _, tc := range []struct {
		name   string
		cfg    Config
		queues []jobs.Queue
		queue  string
		want   string
	}{
		{name: "no objective", want: "idle"},
		{name: "default weights", cfg: Config{Objective: &jobs.Objective{Util: 1, Fair: 1}}, want: "idle"},
		{name: "energy by flag", cfg: Config{Objective: energy}, want: "busy"},
		{name: "energy queue", queues: []jobs.Queue{{Name: "green", Objective: energy}, {Name: "plain"}}, queue: "green", want: "busy"},
		{name: "default queue", queues: []jobs.Queue{{Name: "green", Objective: energy}, {Name: "plain"}}, queue: "plain", want: "idle"},
		{name: "child of an energy queue", queue: "leaf", want: "busy",
			queues: []jobs.Queue{{Name: "org", Objective: energy}, {Name: "leaf", Parent: "org"}}},
		{name: "queue's weights over the flag's", cfg: Config{Objective: energy}, queue: "plain", want: "idle",
			queues: []jobs.Queue{{Name: "plain", Objective: &jobs.Objective{Util: 1, Fair: 1}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := busyAndIdle(t)
			e.queues = tc.queues
			var opts []podOpt
			if tc.queue != "" {
				opts = append(opts, queue(tc.queue))
			}
			e.pod("p", reqs(gpus(1)), append(opts, cpus("12"))...)
			p := e.decide(tc.cfg)
			if got := bindsOf(p)["p"]; got != tc.want {
				t.Fatalf("p bound to %q, want %q (pending: %+v)", got, tc.want, p.Pending)
			}
		})
	}
}

// A fraction of an energy queue goes to a GPU already shared rather than
// open an idle node.
func TestObjectiveEnergyFraction(t *testing.T) {
	e := busyAndIdle(t)
	e.pod("f", reqs(fraction("10Gi")), cpus("12"))
	if got := bindsOf(e.decide(Config{Objective: &jobs.Objective{Energy: 1}}))["f"]; got != "busy" {
		t.Fatalf("fraction bound to %q, want busy", got)
	}
}

// A queue with a cost weight puts a GPU pod on the cheaper GPU model by
// the --gpu-models table, whichever model that is (so at least one of
// the two differs from today's choice).
func TestObjectiveCost(t *testing.T) {
	for _, tc := range []struct {
		table string
		want  string
	}{
		{"model,price_per_gpu_hour\nA100,1\nH100,4\n", "a"},
		{"model,price_per_gpu_hour\nA100,4\nH100,1\n", "h"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			models, err := objective.ParseModels([]byte(tc.table), "models.csv", objective.DefaultModels())
			if err != nil {
				t.Fatal(err)
			}
			e := newEnv(t)
			e.node("a", "dgx-a100", nil)
			e.node("h", "dgx-h100", nil)
			e.pod("p", reqs(gpus(2)))
			if got := bindsOf(e.decide(Config{Objective: &jobs.Objective{Cost: 1}, Models: models}))["p"]; got != tc.want {
				t.Fatalf("bound to %q, want %q", got, tc.want)
			}
		})
	}
}

// wait orders a queue's pods shortest predicted runtime first (unknown
// last); without it, oldest first.
func TestObjectiveWait(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"today", Config{}, "long"},
		{"default weights", Config{Objective: &jobs.Objective{Util: 1, Fair: 1}}, "long"},
		{"wait", Config{Objective: &jobs.Objective{Wait: 1, Fair: 1}}, "short"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.node("n", "dgx-h100", nil)
			e.pod("filler", reqs(gpus(7)))
			e.apply(e.decide(Config{}))
			e.pod("long", reqs(gpus(1)), estimate(10*time.Hour)) // the oldest
			e.pod("short", reqs(gpus(1)), estimate(time.Hour))
			e.pod("unknown", reqs(gpus(1)))
			p := e.decide(tc.cfg)
			var bound []string
			for name := range bindsOf(p) {
				bound = append(bound, name)
			}
			if len(bound) != 1 || bound[0] != tc.want {
				t.Fatalf("bound %v, want [%s]", bound, tc.want)
			}
		})
	}
}

// fair weighs a queue's DRF share against its siblings': a queue with a
// low fair weight goes first though its share is higher, while with fair
// at 1 (today), or weights that leave fair and wait out, the queue with
// the lower share does.
func TestObjectiveFair(t *testing.T) {
	for _, tc := range []struct {
		name string
		a    *jobs.Objective
		want string
	}{
		{"today", nil, "b-pod"},
		{"fair", &jobs.Objective{Util: 1, Fair: 1}, "b-pod"},
		{"low fair", &jobs.Objective{Util: 1, Fair: 0.1}, "a-pod"},
		{"energy alone keeps fair share", &jobs.Objective{Energy: 1}, "b-pod"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.node("n", "dgx-h100", nil)
			e.queues = []jobs.Queue{{Name: "a", Objective: tc.a}, {Name: "b"}}
			e.pod("a-run", reqs(gpus(5)), queue("a"))
			e.pod("b-run", reqs(gpus(2)), queue("b"))
			e.apply(e.decide(Config{}))
			e.pod("a-pod", reqs(gpus(1)), queue("a"))
			e.pod("b-pod", reqs(gpus(1)), queue("b"))
			p := e.decide(Config{})
			got := bindsOf(p)
			if len(got) != 1 || got[tc.want] == "" {
				t.Fatalf("bound %v, want only %s", got, tc.want)
			}
		})
	}
}

// planSummary is a plan as comparable text: binds with devices, pending
// codes, evictions.
func planSummary(p plan.Plan) string {
	var lines []string
	for _, b := range p.Binds {
		lines = append(lines, fmt.Sprintf("bind %s %s %v", b.Pod.Key(), b.Node, devicesOf(b)))
	}
	for _, x := range p.Pending {
		lines = append(lines, fmt.Sprintf("pending %s %s %s", x.Pod.Key(), x.Code, x.NominatedNode))
	}
	for _, ev := range p.Evictions {
		lines = append(lines, fmt.Sprintf("evict %s for %s", ev.Victim.Key(), ev.For.Key()))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// The default weights (util=1,fair=1, gpud scheduler's --objectives
// default) decide exactly as no objective does, cycle after cycle, on
// random clusters with queues, estimates and every kind of request.
func TestObjectiveDefaultsAreToday(t *testing.T) {
	seeds := 6
	if testing.Short() {
		seeds = 2
	}
	for seed := range seeds {
		t.Run(fmt.Sprint("seed-", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(seed), 28))
			e := newEnv(t)
			for i := range 2 + r.IntN(3) {
				if r.IntN(2) == 0 {
					e.node(fmt.Sprint("h", i), "dgx-h100", nil)
				} else {
					e.node(fmt.Sprint("a", i), "dgx-a100", nil, r.Perm(8)[:r.IntN(4)]...)
				}
			}
			def := &jobs.Objective{Util: 1, Fair: 1}
			plain := []jobs.Queue{{Name: "org"}, {Name: "q0", Parent: "org", Weight: 2}, {Name: "q1", Parent: "org"}, {Name: "q2"}}
			weighed := slices.Clone(plain) // q2 by its own weights, the others by the flag's
			weighed[3].Objective = def
			id := 0
			for cycle := range 4 {
				for range 4 + r.IntN(10) {
					id++
					opts := []podOpt{prio(int32(r.IntN(3))), queue(fmt.Sprint("q", r.IntN(3)))}
					if r.IntN(2) == 0 {
						opts = append(opts, estimate(time.Duration(1+r.IntN(120))*time.Minute))
					}
					e.pod(fmt.Sprint("p", id), reqs(randomRequest(r)), opts...)
				}
				e.queues = plain
				today := e.decide(Config{})
				e.queues = weighed
				withDefaults := e.decide(Config{Objective: def})
				if a, b := planSummary(today), planSummary(withDefaults); a != b {
					t.Fatalf("cycle %d: the default weights decide differently:\n%s\n--- today:\n%s", cycle, b, a)
				}
				var gone []string
				for _, b := range e.bound {
					if r.IntN(4) == 0 {
						gone = append(gone, b.Key())
					}
				}
				e.finish(gone...)
				e.apply(today)
				e.now = e.now.Add(10 * time.Minute)
			}
		})
	}
}
