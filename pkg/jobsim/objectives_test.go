package jobsim

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/gpud/gpud/pkg/allocator"
	"github.com/gpud/gpud/pkg/allocator/jobs"
	"github.com/gpud/gpud/pkg/allocator/objective"
)

func replayPolicy(t testing.TB, nodes []allocator.Node, tr []TraceJob, qs []jobs.Queue, policy string, obj *jobs.Objective, models map[string]jobs.ModelPower) *Report {
	t.Helper()
	o := Policies[policy]
	o.Objective = obj
	r, err := Replay(t.Context(), nodes, tr, ReplayOptions{Policy: policy, Options: o, Queues: qs, CheckpointSeconds: 1800, Models: models})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestDefaultWeightsAreTodaysPolicy: util=1,fair=1 (the documented
// default) replays exactly as no objective at all.
func TestDefaultWeightsAreTodaysPolicy(t *testing.T) {
	nodes, tr := mixedNodes(t), mixedTrace(11, 600)
	qs := DefaultQueues(tr, 52*1000)
	for _, p := range []string{"gpud", "no-backfill"} {
		a := replayPolicy(t, nodes, tr, qs, p, nil, nil)
		b := replayPolicy(t, nodes, tr, qs, p, &jobs.Objective{Util: 1, Fair: 1, Models: objective.DefaultModels()}, nil)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%s: util=1,fair=1 differs from today's policy:\n%+v\n%+v", p, a, b)
		}
	}
}

// lowLoadNodes: two 4×V100 nodes (300 W busy) and one 8×T4 node (70 W).
func lowLoadNodes(t testing.TB) []allocator.Node {
	t.Helper()
	nodes, err := ReadNodes(strings.NewReader("sn,cpu_milli,memory_mib,gpu,model\nv0,96000,786432,4,V100M32\nv1,96000,786432,4,V100M32\nt0,96000,786432,8,T4\n"), "nodes.csv", NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return nodes
}

// oneGPUJobs are n single-GPU jobs of any model, one every gap seconds,
// each running run seconds.
func oneGPUJobs(n int, gap, run int64) []TraceJob {
	out := make([]TraceJob, n)
	for i := range out {
		out[i] = TraceJob{Job: jobs.Job{ID: fmt.Sprintf("g%03d", i), Submit: int64(i) * gap, Queue: "q", Pods: 1,
			Pod: jobs.Pod{CPUMilli: 1000, MemoryMiB: 1024, NumGPU: 1}, EstimateSeconds: run}, RuntimeSeconds: run}
	}
	return out
}

// TestEnergyWeightLowersKWh: at low load, packing for fragmentation
// fills the 4-GPU V100 nodes first; the energy weight puts the same jobs
// on the T4 node, which draws less busy and wakes cheaper.
func TestEnergyWeightLowersKWh(t *testing.T) {
	nodes, tr := lowLoadNodes(t), oneGPUJobs(60, 600, 1800)
	qs := []jobs.Queue{{Name: "q"}}
	def := replayPolicy(t, nodes, tr, qs, "gpud", nil, nil)
	en := replayPolicy(t, nodes, tr, qs, "gpud", &jobs.Objective{Energy: 1, Models: objective.DefaultModels()}, nil)
	if def.Completed != 60 || en.Completed != 60 {
		t.Fatalf("completed %d, %d", def.Completed, en.Completed)
	}
	if !(en.Objectives.KWh < 0.7*def.Objectives.KWh) {
		t.Fatalf("energy weight: %.2f kWh, default %.2f kWh: want at least 30%% less", en.Objectives.KWh, def.Objectives.KWh)
	}
	if en.AvgWait != def.AvgWait {
		t.Fatalf("energy weight changed waits at low load: %v vs %v", en.AvgWait, def.AvgWait)
	}
}

// TestCostWeightLowersCost: with V100 priced above T4, the cost weight
// puts jobs on T4s.
func TestCostWeightLowersCost(t *testing.T) {
	models, err := objective.ParseModels([]byte("model,price_per_gpu_hour\nV100M32,2.5\nT4,0.5\n"), "prices.csv", objective.DefaultModels())
	if err != nil {
		t.Fatal(err)
	}
	nodes, tr := lowLoadNodes(t), oneGPUJobs(60, 600, 1800)
	qs := []jobs.Queue{{Name: "q"}}
	def := replayPolicy(t, nodes, tr, qs, "gpud", nil, models)
	c := replayPolicy(t, nodes, tr, qs, "gpud", &jobs.Objective{Cost: 1, Models: models}, models)
	// 60 jobs × 0.5 h: all on T4 costs 15.
	if c.Objectives.Cost > 15.01 || !(c.Objectives.Cost < def.Objectives.Cost) {
		t.Fatalf("cost weight: %.2f, default %.2f: want 15 (all on T4) and less than the default", c.Objectives.Cost, def.Objectives.Cost)
	}
}

// mixedLengths is a burst of jobs of very different lengths on one 8-GPU
// node, all submitted at once: each takes the whole node, so order decides
// every wait.
func mixedLengths() []TraceJob {
	runs := []int64{36000, 600, 18000, 300, 7200, 900, 3600, 600, 24000, 1200}
	out := make([]TraceJob, len(runs))
	for i, r := range runs {
		out[i] = job(fmt.Sprintf("x%02d", i), 0, 0, r, true)
	}
	return out
}

// TestSJFLowersMeanWait: shortest predicted job first beats arrival order
// on mean wait when lengths are mixed.
func TestSJFLowersMeanWait(t *testing.T) {
	qs := []jobs.Queue{{Name: "q"}}
	fifo := replayPolicy(t, oneNode(), mixedLengths(), qs, "fifo", nil, nil)
	sjf := replayPolicy(t, oneNode(), mixedLengths(), qs, "sjf", nil, nil)
	if fifo.Completed != 10 || sjf.Completed != 10 {
		t.Fatalf("completed %d, %d", fifo.Completed, sjf.Completed)
	}
	if !(sjf.AvgWait < 0.5*fifo.AvgWait) {
		t.Fatalf("sjf mean wait %.0f s, fifo %.0f s: want less than half", sjf.AvgWait, fifo.AvgWait)
	}
	// The Wait weight orders the same way under gpud's policy.
	gw := replayPolicy(t, oneNode(), mixedLengths(), qs, "gpud", &jobs.Objective{Wait: 1}, nil)
	gd := replayPolicy(t, oneNode(), mixedLengths(), qs, "gpud", nil, nil)
	if !(gw.AvgWait < gd.AvgWait) {
		t.Fatalf("gpud wait=1 mean wait %.0f s, default %.0f s: want less", gw.AvgWait, gd.AvgWait)
	}
}

// TestLASFavoursShortJobs: a 10-hour job holds the node; short jobs that
// arrive after it has received an hour of the node's GPU-time preempt it
// under least attained service and wait minutes, not hours, and the long
// job still finishes.
func TestLASFavoursShortJobs(t *testing.T) {
	tr := []TraceJob{job("long", 0, 0, 36000, true)}
	for i := range 5 {
		tr = append(tr, job(fmt.Sprintf("short%d", i), int64(1000+i*100), 0, 600, true))
	}
	qs := []jobs.Queue{{Name: "q"}}
	fifo := replayPolicy(t, oneNode(), tr, qs, "fifo", nil, nil)
	las := replayPolicy(t, oneNode(), tr, qs, "las", nil, nil)
	if las.Completed != len(tr) {
		t.Fatalf("las completed %d of %d", las.Completed, len(tr))
	}
	shortWait := func(r *Report) float64 { return (r.AvgWait*float64(len(tr)) - 0) / float64(len(tr)-1) } // the long job waits 0
	if fifo.Preemptions != 0 || las.Preemptions == 0 {
		t.Fatalf("preemptions fifo %d, las %d", fifo.Preemptions, las.Preemptions)
	}
	if !(shortWait(las) < 3600 && shortWait(fifo) > 30000) {
		t.Fatalf("short jobs' mean wait: las %.0f s, fifo %.0f s: want under an hour and over 8 h", shortWait(las), shortWait(fifo))
	}
}

// TestJainFairness: two queues entitled to half each, both offering more
// than the cluster: when arrival order lets one queue's burst hold the
// cluster, the other's jobs are slowed down far more and the index falls
// below fair share's.
func TestJainFairness(t *testing.T) {
	qs := []jobs.Queue{{Name: "a", Quota: jobs.Quota{Guaranteed: jobs.Resources{GPUMilli: 4000}}},
		{Name: "b", Quota: jobs.Quota{Guaranteed: jobs.Resources{GPUMilli: 4000}}}}
	var tr []TraceJob
	for i := range 20 { // a's burst first, then b's
		j := job(fmt.Sprintf("a%02d", i), 0, 0, 3600, true)
		j.Queue, j.Pod.NumGPU = "a", 4
		tr = append(tr, j)
	}
	for i := range 20 {
		j := job(fmt.Sprintf("b%02d", i), 1, 0, 3600, true)
		j.Queue, j.Pod.NumGPU = "b", 4
		tr = append(tr, j)
	}
	fifo := replayPolicy(t, oneNode(), tr, qs, "fifo", nil, nil)
	fair := replayPolicy(t, oneNode(), tr, qs, "no-backfill", nil, nil)
	if !(fair.Objectives.Jain > 0.99 && fifo.Objectives.Jain < fair.Objectives.Jain) {
		t.Fatalf("Jain: fair share %.3f, fifo %.3f: want fair share about 1 and fifo below", fair.Objectives.Jain, fifo.Objectives.Jain)
	}
}
