package jobsim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/gpud/gpud/pkg/allocator"
	"github.com/gpud/gpud/pkg/allocator/jobs"
)

func fourNodes(t testing.TB) []allocator.Node {
	t.Helper()
	nodes, err := ReadNodes(strings.NewReader("sn,cpu_milli,memory_mib,gpu,model\nn0,96000,786432,8,A100\nn1,96000,786432,8,A100\nn2,96000,786432,8,A100\nn3,96000,786432,8,A100\n"), "nodes.csv", NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return nodes
}

// shapedTrace is a seeded trace whose runtimes depend on the request, as
// recurring jobs' do: 2×8-GPU gangs of about 3 h, 4-GPU jobs of about 1 h,
// 1-GPU jobs of about 10 min (±30 %), offering about 98 % of 32 GPUs. No
// job carries an estimate.
func shapedTrace(seed uint64, n int, ckpt bool) []TraceJob {
	rng := rand.New(rand.NewPCG(seed, 1))
	out := make([]TraceJob, n)
	var t float64
	for i := range out {
		j := &out[i]
		j.ID, j.Queue, j.Pods, j.Checkpointable = fmt.Sprintf("j%04d", i), "q", 1, ckpt
		var mean float64
		switch k := rng.IntN(10); {
		case k == 0:
			j.Pods, j.Pod, mean = 2, jobs.Pod{CPUMilli: 8000, MemoryMiB: 65536, NumGPU: 8}, 3*3600
		case k < 4:
			j.Pod, mean = jobs.Pod{CPUMilli: 4000, MemoryMiB: 32768, NumGPU: 4}, 3600
		default:
			j.Pod, mean = jobs.Pod{CPUMilli: 1000, MemoryMiB: 8192, NumGPU: 1}, 600
		}
		j.RuntimeSeconds = int64(mean * (0.7 + 0.6*rng.Float64()))
		t += rng.ExpFloat64() * 700 // 0.1×16×3h + 0.3×4×1h + 0.6×1×10min ≈ 21,960 GPU-s per job: 98 % of 32 GPUs
		j.Submit = int64(t)
	}
	return out
}

func replayWith(t testing.TB, nodes []allocator.Node, tr []TraceJob, policy, est string, f FailureOptions) *Report {
	t.Helper()
	r, err := Replay(t.Context(), nodes, tr, ReplayOptions{Policy: policy, Options: Policies[policy], Queues: []jobs.Queue{{Name: "q"}},
		Estimates: est, Failures: f, CheckpointSeconds: 1800})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestLearnedEstimates: on a trace whose runtimes follow the request,
// learned estimates are far closer to the runtime than none, and recover at
// least half of backfill's wait gap between no estimates and the oracle.
func TestLearnedEstimates(t *testing.T) {
	nodes := fourNodes(t)
	tr := shapedTrace(5, 1500, false)
	none := replayWith(t, nodes, tr, "gpud", EstimateNone, FailureOptions{})
	learned := replayWith(t, nodes, tr, "gpud", EstimateLearned, FailureOptions{})
	oracle := replayWith(t, nodes, tr, "gpud", EstimateOracle, FailureOptions{})
	t.Logf("avg wait h: none %.3f learned %.3f oracle %.3f; p95 %.3f %.3f %.3f; error median/p90: none %.2f/%.2f learned %.2f/%.2f (coverage %.3f, under %.3f)",
		none.AvgWait/3600, learned.AvgWait/3600, oracle.AvgWait/3600, none.P95Wait/3600, learned.P95Wait/3600, oracle.P95Wait/3600,
		none.Estimates.MedianError, none.Estimates.P90Error, learned.Estimates.MedianError, learned.Estimates.P90Error,
		learned.Estimates.Coverage, learned.Estimates.Under)
	if none.Estimates.MedianError != 1 || none.Estimates.Coverage != 0 {
		t.Errorf("none: median error %v coverage %v, want 1 and 0", none.Estimates.MedianError, none.Estimates.Coverage)
	}
	if oracle.Estimates.P90Error != 0 || oracle.Estimates.Coverage != 1 {
		t.Errorf("oracle: p90 error %v coverage %v, want 0 and 1", oracle.Estimates.P90Error, oracle.Estimates.Coverage)
	}
	if learned.Estimates.MedianError > 0.5 || learned.Estimates.P90Error >= none.Estimates.P90Error {
		t.Errorf("learned error median %.2f p90 %.2f: want median below 0.5 and p90 below none's %.2f",
			learned.Estimates.MedianError, learned.Estimates.P90Error, none.Estimates.P90Error)
	}
	if learned.Estimates.Coverage < 0.98 {
		t.Errorf("learned coverage %.3f: only the first jobs of each shape should lack an estimate", learned.Estimates.Coverage)
	}
	if oracle.AvgWait > none.AvgWait {
		t.Errorf("oracle avg wait %.0f s above none's %.0f s", oracle.AvgWait, none.AvgWait)
	}
	gap := none.AvgWait - oracle.AvgWait
	if gap < 600 {
		t.Fatalf("none-oracle wait gap only %.0f s: the trace no longer exercises backfill", gap)
	}
	if rec := (none.AvgWait - learned.AvgWait) / gap; rec < 0.5 {
		t.Errorf("learned recovers %.0f%% of the wait gap, want at least half", 100*rec)
	}
	for _, r := range []*Report{none, learned, oracle} {
		if r.Completed != len(tr) {
			t.Errorf("%s: %d of %d jobs completed", r.Estimates.Source, r.Completed, len(tr))
		}
	}
}

// TestUserLearnedKeepsGivenEstimates: user+learned keeps every estimate the
// trace gives and fills in the rest.
func TestUserLearnedKeepsGivenEstimates(t *testing.T) {
	tr := shapedTrace(2, 300, false)
	for i := range tr {
		if i%2 == 0 {
			tr[i].EstimateSeconds = tr[i].RuntimeSeconds
		}
	}
	l, err := newLearner(EstimateUserLearned, LearnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var filled int
	for i := range tr {
		est, err := l.estimate(&tr[i])
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 && est != tr[i].RuntimeSeconds {
			t.Fatalf("job %d: estimate %d replaced the given %d", i, est, tr[i].RuntimeSeconds)
		}
		if i%2 == 1 && est > 0 {
			filled++
		}
		if err := l.finished(&tr[i]); err != nil {
			t.Fatal(err)
		}
	}
	if filled < 140 {
		t.Fatalf("%d of 150 jobs without an estimate got a learned one", filled)
	}
	if _, err := newLearner("guess", LearnOptions{}); err == nil || !strings.Contains(err.Error(), "want one of user, none") {
		t.Fatalf("unknown source: err = %v", err)
	}
	if _, err := newLearner(EstimateLearned, LearnOptions{Quantile: 1}); err == nil {
		t.Fatal("quantile 1 accepted")
	}
}

// TestGPUFailures: with seeded failures, healing loses fewer GPU-hours than
// waiting for a person; a job's hang costs exactly its GPUs × the delay; the
// same seed gives the same replay; no rate, no failures.
func TestGPUFailures(t *testing.T) {
	nodes := fourNodes(t)
	tr := shapedTrace(9, 600, true)
	f := FailureOptions{RatePerGPUDay: 0.1, BurstFraction: 0.2, Seed: 3, RepairSeconds: 8 * 3600}
	heal, manual := f, f
	heal.Heal = true
	h := replayWith(t, nodes, tr, "fifo", EstimateOracle, heal)
	m := replayWith(t, nodes, tr, "fifo", EstimateOracle, manual)
	t.Logf("heal: %+v, JCT %.2f h; manual: %+v, JCT %.2f h", *h.Failures, h.AvgJCT/3600, *m.Failures, m.AvgJCT/3600)
	if h.Failures.JobsHit < 5 || m.Failures.JobsHit < 5 {
		t.Fatalf("jobs hit: heal %d, manual %d: too few failures to compare", h.Failures.JobsHit, m.Failures.JobsHit)
	}
	if h.Failures.LostGPUHours >= m.Failures.LostGPUHours {
		t.Errorf("healing lost %.1f GPU-h, no more than manual's %.1f", h.Failures.LostGPUHours, m.Failures.LostGPUHours)
	}
	if h.AvgJCT >= m.AvgJCT {
		t.Errorf("healing avg JCT %.0f s not below manual's %.0f s", h.AvgJCT, m.AvgJCT)
	}
	// fifo never preempts, so every hang lasts the full delay.
	for _, c := range []struct {
		r     *Report
		delay float64
	}{{h, DefaultDetectSeconds}, {m, DefaultManualSeconds}} {
		if c.r.Failures.Restarts != c.r.Failures.JobsHit {
			t.Errorf("%d restarts for %d jobs hit", c.r.Failures.Restarts, c.r.Failures.JobsHit)
		}
		// Every job of this trace holds 1, 4 or 16 GPUs: the hang is a
		// whole number of GPU×delay units.
		units := c.r.Failures.HangGPUHours * 3600 / c.delay
		if math.Abs(units-math.Round(units)) > 1e-6 || units < float64(c.r.Failures.JobsHit) || units > 16*float64(c.r.Failures.JobsHit) {
			t.Errorf("hang %.3f GPU-h is not GPUs × %v s for %d jobs", c.r.Failures.HangGPUHours, c.delay, c.r.Failures.JobsHit)
		}
		// Checkpointed every 1800 s, a job loses less than that per hit.
		if lost := (c.r.Failures.LostGPUHours - c.r.Failures.HangGPUHours) * 3600; lost > 16*1800*float64(c.r.Failures.JobsHit) {
			t.Errorf("%.0f GPU-s of work lost in %d hits of checkpointable jobs", lost, c.r.Failures.JobsHit)
		}
		if c.r.Completed != len(tr) {
			t.Errorf("%d of %d jobs completed", c.r.Completed, len(tr))
		}
	}
	if again := replayWith(t, nodes, tr, "fifo", EstimateOracle, heal); !reflect.DeepEqual(again, h) {
		t.Error("the same seed gave a different replay")
	}
	other := heal
	other.Seed = 4
	if o := replayWith(t, nodes, tr, "fifo", EstimateOracle, other); reflect.DeepEqual(o.Failures, h.Failures) {
		t.Error("another seed gave the same failures")
	}
	base := replayWith(t, nodes, tr, "fifo", EstimateOracle, FailureOptions{})
	if base.Failures != nil {
		t.Errorf("no failure rate, but failures %+v", *base.Failures)
	}
	if base.AvgJCT > h.AvgJCT {
		t.Errorf("avg JCT without failures %.0f s above with them %.0f s", base.AvgJCT, h.AvgJCT)
	}
}

func TestFailureOptionsRejected(t *testing.T) {
	for _, f := range []FailureOptions{{RatePerGPUDay: -1}, {RatePerGPUDay: math.NaN()}, {RatePerGPUDay: MaxFailureRate + 1},
		{BurstFraction: 2}, {DetectSeconds: -1}, {ManualSeconds: MaxDelaySeconds + 1}, {RepairSeconds: -5}} {
		_, err := Replay(t.Context(), oneNode(), shapedTrace(1, 3, false), ReplayOptions{Policy: "gpud", Options: jobs.Gpud, Queues: []jobs.Queue{{Name: "q"}}, Failures: f})
		if err == nil {
			t.Errorf("failure options %+v accepted", f)
		}
	}
}
