package jobs

import (
	"slices"
	"testing"

	"github.com/gpud/gpud/pkg/allocator"
)

// run submits and starts jobs one at a time at increasing times, so their
// start times follow the list.
func run(t *testing.T, s *Scheduler, js ...Job) {
	t.Helper()
	for _, j := range js {
		mustSubmit(t, s, j)
		if r := s.Schedule(j.Submit); !started(r)[j.ID] {
			t.Fatalf("setup job %s did not start: %+v", j.ID, r.Pending)
		}
	}
}

func migNodes(n int) []allocator.Node {
	nodes := mkNodes(n, 1, "A100", 0, false)
	for i := range nodes {
		nodes[i].GPUs[0].Labels = map[string]string{LabelMIG: "true"}
	}
	return nodes
}

func TestPreemptMinimalVictims(t *testing.T) {
	low := func(id string, p Pod, at int64) Job { return Job{ID: id, Queue: "q", Priority: 0, Pod: p, Submit: at} }
	mig := func(profile string) Pod { return Pod{MIG: profile} }
	tests := []struct {
		name   string
		nodes  []allocator.Node
		setup  []Job
		finish []string // finished after setup, then more run
		more   []Job
		job    Job
		victim []string // exact set expected; nil = no preemption
	}{
		{
			name:  "one 400 milli fraction instead of two 300s",
			nodes: mkNodes(1, 1, "H100", 0, false),
			setup: []Job{low("f300a", frac(300), 1), low("f300b", frac(300), 2), low("f400", frac(400), 3)},
			job:   Job{ID: "hi", Queue: "q", Priority: 5, Pod: frac(400)},
			// a 300 + 300 pair would also do; one 400 is the smallest set.
			victim: []string{"f400"},
		},
		{
			name:   "most recent of equal fractions",
			nodes:  mkNodes(1, 1, "H100", 0, false),
			setup:  []Job{low("old", frac(500), 1), low("new", frac(500), 2)},
			job:    Job{ID: "hi", Queue: "q", Priority: 5, Pod: frac(500)},
			victim: []string{"new"},
		},
		{
			name:  "checkpointable before most recent",
			nodes: mkNodes(1, 1, "H100", 0, false),
			setup: []Job{{ID: "ck", Queue: "q", Pod: frac(500), Submit: 1, Checkpointable: true},
				low("new", frac(500), 2)},
			job:    Job{ID: "hi", Queue: "q", Priority: 5, Pod: frac(500)},
			victim: []string{"ck"},
		},
		{
			name:  "MIG 3g needs the slot with three 1g instances, not four",
			nodes: migNodes(1),
			setup: []Job{low("s0", mig("1g.10gb"), 1), low("s1", mig("1g.10gb"), 2), low("s2", mig("1g.10gb"), 3),
				low("s3", mig("1g.10gb"), 4), low("s4", mig("1g.10gb"), 5), low("s5", mig("1g.10gb"), 6), low("s6", mig("1g.10gb"), 7)},
			job:    Job{ID: "hi", Queue: "q", Priority: 5, Pod: mig("3g.40gb")},
			victim: []string{"s4", "s5", "s6"},
		},
		{
			name:  "MIG: the recent instances sit in the 4-slice slot",
			nodes: migNodes(1),
			setup: []Job{low("x0", mig("1g.10gb"), 1), low("x1", mig("1g.10gb"), 2), low("x2", mig("1g.10gb"), 3),
				low("x3", mig("1g.10gb"), 4), low("s4", mig("1g.10gb"), 5), low("s5", mig("1g.10gb"), 6), low("s6", mig("1g.10gb"), 7)},
			finish: []string{"x0", "x1", "x2", "x3"},
			more:   []Job{low("t0", mig("1g.10gb"), 8), low("t1", mig("1g.10gb"), 9), low("t2", mig("1g.10gb"), 10), low("t3", mig("1g.10gb"), 11)},
			job:    Job{ID: "hi", Queue: "q", Priority: 5, Pod: mig("3g.40gb")},
			victim: []string{"s4", "s5", "s6"},
		},
		{
			name:  "whole GPUs: the node whose GPUs hold fewest jobs",
			nodes: mkNodes(2, 2, "H100", 0, false),
			setup: []Job{low("a", frac(200), 1), low("b", frac(200), 2), low("c", frac(200), 3), low("d", gpus(2), 4)},
			job:   Job{ID: "hi", Queue: "q", Priority: 5, Pod: gpus(2)},
			// a, b, c pack onto node 0; d holds node 1 alone.
			victim: []string{"d"},
		},
		{
			name:  "gang victim goes whole",
			nodes: mkNodes(2, 8, "H100", 0, false),
			setup: []Job{{ID: "gang", Queue: "q", Pods: 2, Pod: gpus(4), Submit: 1},
				{ID: "keep0", Queue: "q", Priority: 9, Pod: gpus(4), Submit: 2}, {ID: "keep1", Queue: "q", Priority: 9, Pod: gpus(4), Submit: 3}},
			job:    Job{ID: "hi", Queue: "q", Priority: 5, Pod: gpus(4)},
			victim: []string{"gang"},
		},
		{
			name:  "never preempt when the job still would not fit",
			nodes: mkNodes(2, 8, "H100", 0, false),
			setup: []Job{low("lo", gpus(8), 1), {ID: "top", Queue: "q", Priority: 9, Pod: gpus(8), Submit: 2}},
			job:   Job{ID: "hi", Queue: "q", Priority: 5, Pods: 2, Pod: gpus(8)},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := mustNew(t, tc.nodes, oneQueue(), nil, Gpud)
			run(t, s, tc.setup...)
			for _, id := range tc.finish {
				if err := s.Finish(id); err != nil {
					t.Fatal(err)
				}
			}
			run(t, s, tc.more...)
			tc.job.Submit = 100
			mustSubmit(t, s, tc.job)
			r := s.Schedule(100)
			checkInvariants(t, s)
			var got []string
			for _, p := range r.Preempted {
				if p.Beneficiary != tc.job.ID || p.Why != "priority" {
					t.Errorf("preemption %+v: want beneficiary %s for priority", p, tc.job.ID)
				}
				got = append(got, p.JobID)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.victim) {
				t.Fatalf("victims %v, want %v", got, tc.victim)
			}
			if st := started(r)[tc.job.ID]; st != (tc.victim != nil) {
				t.Fatalf("started %v, want %v; pending %+v", st, tc.victim != nil, r.Pending)
			}
			for _, v := range tc.victim {
				if _, running := s.Placement(v); running {
					t.Errorf("victim %s still placed", v)
				}
			}
		})
	}
}
