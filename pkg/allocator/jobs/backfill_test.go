package jobs

import (
	"strings"
	"testing"
)

// Gang g (4 x 8 GPUs) waits for job l (3 nodes, ends at 100). A short job
// backfills onto the free node; a long one would hold it past 100 and must
// wait; g then starts exactly at its reserved start.
func TestEASYBackfill(t *testing.T) {
	tests := []struct {
		name      string
		opts      Options
		wantShort bool
		longCode  string
	}{
		{name: "easy", opts: Gpud, wantShort: true, longCode: CodeBackfill},
		{name: "no backfill", opts: Options{FairShare: true, Preemption: true}, longCode: CodeBlocked},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := mustNew(t, mkNodes(4, 8, "H100", 0, false), oneQueue(), nil, tc.opts)
			run(t, s, Job{ID: "l", Queue: "q", Pods: 3, Pod: gpus(8), EstimateSeconds: 100})
			mustSubmit(t, s,
				Job{ID: "g", Queue: "q", Pods: 4, Pod: gpus(8), EstimateSeconds: 50, Submit: 1},
				Job{ID: "long", Queue: "q", Pod: gpus(8), EstimateSeconds: 500, Submit: 2},
				Job{ID: "short", Queue: "q", Pod: gpus(8), EstimateSeconds: 60, Submit: 3},
				Job{ID: "noest", Queue: "q", Pod: gpus(1), Submit: 2},
			)
			r := s.Schedule(10)
			checkInvariants(t, s)
			if tc.opts.Backfill && (r.Reserved != "g" || r.ReservedStart != 100) {
				t.Fatalf("reserved %q at %d, want g at 100", r.Reserved, r.ReservedStart)
			}
			if got := started(r)["short"]; got != tc.wantShort {
				t.Fatalf("short started = %v, want %v; %+v", got, tc.wantShort, r.Pending)
			}
			why, _ := pendingReason(r, "long")
			if why.Code != tc.longCode || !strings.Contains(why.Message, `"g"`) {
				t.Fatalf("long: %v, want %s naming g", why, tc.longCode)
			}
			if tc.opts.Backfill {
				if why, _ := pendingReason(r, "noest"); why.Code != CodeBackfill {
					t.Fatalf("job without estimate: %v, want backfill", why)
				}
				for _, st := range r.Started {
					if st.JobID == "short" && !st.Backfilled {
						t.Fatal("short not marked backfilled")
					}
				}
			}
			// Time moves on: short ends at 70, l at 100; g must start at 100.
			if tc.wantShort {
				if err := s.Finish("short"); err != nil {
					t.Fatal(err)
				}
				if st := started(s.Schedule(70)); st["g"] || st["long"] {
					t.Fatalf("at 70 started %v; long would delay g", st)
				}
			}
			if err := s.Finish("l"); err != nil {
				t.Fatal(err)
			}
			if st := started(s.Schedule(100)); !st["g"] {
				t.Fatal("g did not start at its reserved start 100")
			}
			checkInvariants(t, s)
		})
	}
}

// A fraction that still runs at the reserved start may backfill when the
// gang fits beside it.
func TestBackfillBesideReservedGang(t *testing.T) {
	s := mustNew(t, mkNodes(4, 8, "H100", 0, false), oneQueue(), nil, Gpud)
	run(t, s, Job{ID: "l", Queue: "q", Pods: 3, Pod: gpus(8), EstimateSeconds: 100})
	mustSubmit(t, s,
		Job{ID: "g", Queue: "q", Pods: 3, Pod: gpus(8), Topology: LevelNone, Submit: 1, EstimateSeconds: 10},
		Job{ID: "beside", Queue: "q", Pod: frac(500), EstimateSeconds: 1000, Submit: 2},
	)
	r := s.Schedule(5)
	if !started(r)["beside"] || r.Reserved != "g" {
		t.Fatalf("beside not backfilled next to g: %+v", r)
	}
	checkInvariants(t, s)
}

func TestReservation(t *testing.T) {
	nodes := mkNodes(2, 8, "H100", 0, false)
	rs := []Reservation{{Name: "train", Queue: "owner", Nodes: []string{"n001"}, Start: 100, End: 200}}
	qs := []Queue{{Name: "owner"}, {Name: "other"}}
	s := mustNew(t, nodes, qs, rs, Gpud)
	mustSubmit(t, s,
		Job{ID: "big", Queue: "other", Pod: gpus(8), EstimateSeconds: 500},
		Job{ID: "big2", Queue: "other", Pod: gpus(8), EstimateSeconds: 500, Submit: 1},
		Job{ID: "pre", Queue: "other", Pod: gpus(4), EstimateSeconds: 500, Preemptible: true, Submit: 2},
		Job{ID: "quick", Queue: "other", Pod: gpus(4), EstimateSeconds: 50, Submit: 3},
	)
	r := s.Schedule(0)
	checkInvariants(t, s)
	st := started(r)
	if !st["big"] || st["big2"] || !st["pre"] || !st["quick"] {
		t.Fatalf("started %v, want big, pre and quick (quick ends before the window)", st)
	}
	if why, _ := pendingReason(r, "big2"); !strings.Contains(why.Message, "reserved nodes excluded") {
		t.Fatalf("big2 reason %v does not mention the reservation", why)
	}
	if err := s.Finish("quick"); err != nil {
		t.Fatal(err)
	}
	mustSubmit(t, s, Job{ID: "own", Queue: "owner", Pod: gpus(8), Submit: 100})
	r = s.Schedule(100)
	checkInvariants(t, s)
	if got := preempted(r); len(got) != 1 || got["pre"] != "own" || r.Preempted[0].Why != "reservation" {
		t.Fatalf("preempted %+v, want pre for own (reservation)", r.Preempted)
	}
	if ps, ok := s.Placement("own"); !ok || ps[0].NodeName != "n001" {
		t.Fatalf("own placed %+v, want n001", ps)
	}
}
