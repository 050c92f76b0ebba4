package jobs

import (
	"fmt"
	"testing"
)

// BenchmarkGang64GPUs places (and then finishes) a 64-GPU gang, 8 pods of 8
// GPUs, on 1,000 8-GPU nodes in racks of 32 and NVLink domains of 8, half
// of whose nodes run single-GPU pods. Target: under 10 ms per decision.
func BenchmarkGang64GPUs(b *testing.B) {
	for _, tc := range []struct {
		name     string
		level    Level
		required bool
	}{{"rack-preferred", LevelRack, false}, {"rack-required", LevelRack, true}, {"any", LevelNone, false}} {
		b.Run(tc.name, func(b *testing.B) {
			nodes := mkNodes(1000, 8, "H100", 32, false)
			for i := range nodes {
				nodes[i].Labels[LabelNVLinkDomain] = fmt.Sprintf("nvl-%d", i/8)
			}
			s := mustNew(b, nodes, oneQueue(), nil, Gpud)
			for i := range 4000 { // every other node gets 8 single-GPU pods
				mustSubmit(b, s, Job{ID: fmt.Sprintf("bg%d", i), Queue: "q", Pod: gpus(1)})
			}
			s.Schedule(0)
			b.ReportAllocs()
			k := 0
			for b.Loop() {
				id := fmt.Sprintf("g%d", k)
				k++
				if err := s.Submit(Job{ID: id, Queue: "q", Pods: 8, Pod: gpus(8), Topology: tc.level, Required: tc.required}); err != nil {
					b.Fatal(err)
				}
				if r := s.Schedule(int64(k)); len(r.Started) != 1 {
					b.Fatalf("gang not placed: %+v", r.Pending)
				}
				if err := s.Finish(id); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPreempt10kPods decides a preemption on a full cluster running
// 10,000 pods (8,000 whole-GPU pods on 1,000 nodes, 2,000 half-GPU pods on
// 125 nodes): a high-priority 8-GPU job needs the cheapest node's victims.
// Target: under 20 ms per decision.
func BenchmarkPreempt10kPods(b *testing.B) {
	s := mustNew(b, mkNodes(1125, 8, "H100", 32, false), oneQueue(), nil, Gpud)
	for i := range 8000 {
		mustSubmit(b, s, Job{ID: fmt.Sprintf("w%d", i), Queue: "q", Pod: gpus(1), Submit: int64(i)})
	}
	for i := range 2000 {
		mustSubmit(b, s, Job{ID: fmt.Sprintf("h%d", i), Queue: "q", Pod: frac(500), Submit: int64(i), Checkpointable: i%2 == 0})
	}
	if r := s.Schedule(0); len(r.Started) != 10000 || len(s.running) != 10000 {
		b.Fatalf("setup started %d pods", len(r.Started))
	}
	hi := Job{ID: "hi", Queue: "q", Priority: 10, Pod: gpus(8)}
	if err := s.Submit(hi); err != nil {
		b.Fatal(err)
	}
	j := s.jobs["hi"]
	b.ReportAllocs()
	for b.Loop() {
		s.round++
		vs, ok := s.preempt(j, &j.d, nil, 1)
		if !ok || len(vs) != 8 {
			b.Fatalf("preempt: %v, %d victims", ok, len(vs))
		}
		undoPreempt(s, j, vs)
	}
}

// undoPreempt puts the victims back and takes j off, restoring the state.
func undoPreempt(s *Scheduler, j *jobState, vs []Preemption) {
	s.stop(j)
	s.running = s.running[:len(s.running)-1]
	for _, p := range vs {
		v := s.jobs[p.JobID]
		s.c.rebind(v, v.savedPods)
		v.running, v.pods = true, v.savedPods
		s.q.charge(v.queue, v.usage, v.model, v.milli, 1)
	}
}
