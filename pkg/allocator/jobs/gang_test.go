package jobs

import (
	"fmt"
	"strings"
	"testing"
)

func TestGangAllOrNothing(t *testing.T) {
	tests := []struct {
		name      string
		nodes     int
		pods      int
		wantStart bool
		wantCode  string
		wantMsg   string
	}{
		{name: "fits exactly", nodes: 4, pods: 4, wantStart: true},
		{name: "one pod short stays whole", nodes: 4, pods: 5, wantCode: CodeNeverFits},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := mustNew(t, mkNodes(tc.nodes, 8, "H100", 0, false), oneQueue(), nil, Gpud)
			mustSubmit(t, s, Job{ID: "g", Queue: "q", Pods: tc.pods, Pod: gpus(8)})
			r := s.Schedule(0)
			checkInvariants(t, s)
			if got := started(r)["g"]; got != tc.wantStart {
				t.Fatalf("started = %v, want %v (%+v)", got, tc.wantStart, r)
			}
			if !tc.wantStart {
				why, _ := pendingReason(r, "g")
				if why.Code != tc.wantCode {
					t.Fatalf("reason %v, want code %s", why, tc.wantCode)
				}
				if s.c.free[0].wholeFree != 8 {
					t.Fatalf("a pending gang holds GPUs: node 0 has %d free", s.c.free[0].wholeFree)
				}
			}
		})
	}
}

// Two gangs that each need 6 of 8 nodes: one runs whole, the other holds
// nothing and starts when the first ends.
func TestGangNoPartialHoldDeadlock(t *testing.T) {
	for _, o := range []struct {
		name string
		opts Options
	}{{"gpud", Gpud}, {"fifo", Options{}}} {
		t.Run(o.name, func(t *testing.T) {
			s := mustNew(t, mkNodes(8, 8, "H100", 0, false), oneQueue(), nil, o.opts)
			mustSubmit(t, s, Job{ID: "a", Queue: "q", Pods: 6, Pod: gpus(8)}, Job{ID: "b", Queue: "q", Pods: 6, Pod: gpus(8), Submit: 1})
			r := s.Schedule(1)
			checkInvariants(t, s)
			st := started(r)
			if !st["a"] || st["b"] {
				t.Fatalf("started %v, want only a", st)
			}
			why, _ := pendingReason(r, "b")
			if why.Code != CodeCapacity || !strings.Contains(why.Message, "room for 2, 4 pod(s) short") {
				t.Fatalf("b pending for %v; want the missing 4 pods named", why)
			}
			if err := s.Finish("a"); err != nil {
				t.Fatal(err)
			}
			if r := s.Schedule(2); !started(r)["b"] {
				t.Fatalf("b did not start after a finished: %+v", r.Pending)
			}
			checkInvariants(t, s)
		})
	}
}

func TestGangTopology(t *testing.T) {
	// 2 racks of 4 nodes; NVLink domains = racks when nvl is set.
	tests := []struct {
		name     string
		level    Level
		required bool
		fill     []int // nodes taken by 8-GPU blockers first
		pods     int
		want     string // "start", or a reason code
		sameRack bool
	}{
		{name: "rack required fits in the emptier rack", level: LevelRack, required: true, fill: []int{0, 1}, pods: 4, want: "start", sameRack: true},
		{name: "rack required waits", level: LevelRack, required: true, fill: []int{0, 1, 4, 5}, pods: 3, want: CodeTopology},
		{name: "rack preferred spans racks", level: LevelRack, fill: []int{0, 1, 4, 5}, pods: 3, want: "start"},
		{name: "nvlink preferred stays in one domain", level: LevelNVLink, fill: []int{0}, pods: 2, want: "start", sameRack: true},
		{name: "zone required: one zone holds all", level: LevelZone, required: true, fill: []int{0, 1, 4, 5}, pods: 4, want: "start"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := mustNew(t, mkNodes(8, 8, "H100", 4, true), oneQueue(), nil, Gpud)
			for _, n := range tc.fill {
				id := "fill-" + s.c.info[n].name
				mustSubmit(t, s, Job{ID: id, Queue: "q", Pod: gpus(8)})
				pods, _ := s.c.placeGang(&s.jobs[id].d, 1, LevelNone, false, onlyNode(s, n))
				s.commit(s.jobs[id], pods, 0)
			}
			s.pending = s.pending[len(tc.fill):]
			mustSubmit(t, s, Job{ID: "g", Queue: "q", Pods: tc.pods, Pod: gpus(8), Topology: tc.level, Required: tc.required})
			r := s.Schedule(0)
			checkInvariants(t, s)
			if tc.want != "start" {
				why, _ := pendingReason(r, "g")
				if why.Code != tc.want {
					t.Fatalf("reason %v, want %s", why, tc.want)
				}
				return
			}
			ps, ok := s.Placement("g")
			if !ok {
				t.Fatalf("g not running: %+v", r.Pending)
			}
			racks := map[int]bool{}
			for _, p := range ps {
				racks[p.Node/4] = true
			}
			if tc.sameRack && len(racks) != 1 {
				t.Fatalf("pods span racks %v: %+v", racks, ps)
			}
		})
	}
}

// onlyNode blocks every node but n.
func onlyNode(s *Scheduler, n int) []bool {
	m := make([]bool, len(s.c.info))
	for i := range m {
		m[i] = i != n
	}
	return m
}

// TestMemorySizedFraction: a fraction sized by GPU memory alone (no milli)
// is counted by memory, not divided by its zero milli (a panic the job-trace
// fuzzer found). Four 20 GiB pods fit on one 80 GiB GPU; the fifth waits.
func TestMemorySizedFraction(t *testing.T) {
	s := mustNew(t, mkNodes(1, 1, "A100", 0, false), oneQueue(), nil, Gpud)
	for i := range 5 {
		p := Pod{CPUMilli: 1000, MemoryMiB: 1024, NumGPU: 1, GPUMemoryMiB: 20480}
		if err := s.Submit(Job{ID: fmt.Sprintf("m%d", i), Queue: "q", Pod: p, Submit: int64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	r := s.Schedule(0)
	if len(r.Started) != 4 || len(r.Pending) != 1 {
		t.Fatalf("started %d, pending %d; want 4, 1", len(r.Started), len(r.Pending))
	}
}
