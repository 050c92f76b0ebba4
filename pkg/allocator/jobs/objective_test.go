package jobs

import (
	"errors"
	"strings"
	"testing"
)

func TestOptionsRejected(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{Order: 7}, "order 7 unknown"},
		{Options{Order: OrderLAS, LASThresholds: []int64{100, 50}}, "LAS thresholds [100 50]"},
		{Options{Objective: &Objective{}}, "every weight is 0"},
		{Options{Objective: &Objective{Util: -1}}, "util=-1"},
		{Options{Objective: &Objective{Energy: 1, Models: map[string]ModelPower{"T4": {BusyWatts: -5}}}}, `model "T4"`},
	} {
		_, err := New(mkNodes(1, 8, "A100", 0, false), oneQueue(), nil, tc.o)
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want %q", tc.o, err, tc.want)
		}
	}
}

// TestShortestFirst: with a full node, the shortest estimate starts first
// when it frees; a job without an estimate goes last.
func TestShortestFirst(t *testing.T) {
	s := mustNew(t, mkNodes(1, 8, "A100", 0, false), oneQueue(), nil, Options{Order: OrderShortest})
	whole := Pod{CPUMilli: 1000, MemoryMiB: 1024, NumGPU: 8}
	mustSubmit(t, s, Job{ID: "run", Queue: "q", Pod: whole, EstimateSeconds: 10})
	s.Schedule(0)
	mustSubmit(t, s, Job{ID: "none", Queue: "q", Pod: whole, Submit: 1},
		Job{ID: "long", Queue: "q", Pod: whole, Submit: 2, EstimateSeconds: 500},
		Job{ID: "short", Queue: "q", Pod: whole, Submit: 3, EstimateSeconds: 50})
	var order []string
	for now := int64(10); len(order) < 3; now++ {
		for _, id := range s.Running() {
			if err := s.Finish(id); err != nil {
				t.Fatal(err)
			}
		}
		for _, st := range s.Schedule(now).Started {
			order = append(order, st.JobID)
		}
	}
	if got := strings.Join(order, ","); got != "short,long,none" {
		t.Fatalf("start order %s, want short,long,none", got)
	}
}

// TestLASPreemptsOnlyMoreAttained: a job that has run past the first
// threshold is preempted for a fresh one; a fresh running job is not.
func TestLASPreemptsOnlyMoreAttained(t *testing.T) {
	whole := Pod{CPUMilli: 1000, MemoryMiB: 1024, NumGPU: 8}
	s := mustNew(t, mkNodes(1, 8, "A100", 0, false), oneQueue(), nil, Options{Order: OrderLAS, Preemption: true, LASThresholds: []int64{800}})
	mustSubmit(t, s, Job{ID: "old", Queue: "q", Pod: whole})
	s.Schedule(0)
	mustSubmit(t, s, Job{ID: "new", Queue: "q", Pod: whole, Submit: 50})
	if r := s.Schedule(50); len(r.Preempted) != 0 { // 8 GPUs × 50 s = 400 GPU-s: same queue
		t.Fatalf("preempted %v below the threshold", r.Preempted)
	}
	r := s.Schedule(100) // 800 GPU-s: a higher queue
	if len(r.Preempted) != 1 || r.Preempted[0].JobID != "old" || r.Preempted[0].Why != "attained-service" || !started(r)["new"] {
		t.Fatalf("at 800 GPU-s: preempted %v, started %v; want old preempted for new", r.Preempted, r.Started)
	}
	// "old" (attained 800) does not preempt "new" (attained 0, running).
	if r := s.Schedule(150); len(r.Preempted) != 0 {
		t.Fatalf("preempted %v for a job with more attained service", r.Preempted)
	}
}
