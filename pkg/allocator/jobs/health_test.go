package jobs

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSetGPUHealth: a failed GPU takes no new pods, reports the jobs on it,
// frees nothing when they finish, and serves again once healthy.
func TestSetGPUHealth(t *testing.T) {
	s := mustNew(t, mkNodes(2, 8, "H100", 0, false), oneQueue(), nil, Gpud)
	mustSubmit(t, s, Job{ID: "a", Queue: "q", Pod: gpus(8)})
	r := s.Schedule(0)
	node := r.Started[0].Pods[0].NodeName
	on, err := s.SetGPUHealth(node, 3, false)
	if err != nil || !slices.Equal(on, []string{"a"}) {
		t.Fatalf("SetGPUHealth = %v, %v; want [a]", on, err)
	}
	checkInvariants(t, s)
	if err := s.Finish("a"); err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, s)
	mustSubmit(t, s, Job{ID: "b", Queue: "q", Pod: gpus(8), Submit: 1}, Job{ID: "c", Queue: "q", Pod: gpus(8), Submit: 1})
	r = s.Schedule(1)
	if st := started(r); !st["b"] || st["c"] {
		t.Fatalf("started %v: want b on the healthy node and c waiting (node %s has 7 healthy GPUs)", st, node)
	}
	if reason, _ := pendingReason(r, "c"); reason.Code != CodeCapacity {
		t.Fatalf("c pending for %v, want capacity", reason)
	}
	mustSubmit(t, s, Job{ID: "f", Queue: "q", Pod: frac(500), Submit: 2})
	r = s.Schedule(2)
	for _, st := range r.Started {
		if p := st.Pods[0]; p.NodeName == node && slices.Contains(p.GPUs, 3) {
			t.Fatalf("%s placed on the failed GPU", st.JobID)
		}
	}
	if err := s.Finish("f"); err != nil {
		t.Fatal(err)
	}
	if on, err := s.SetGPUHealth(node, 3, true); err != nil || len(on) != 0 {
		t.Fatalf("repair: %v, %v", on, err)
	}
	checkInvariants(t, s)
	if r = s.Schedule(3); !started(r)["c"] {
		t.Fatalf("c did not start on the repaired node: %+v", r.Pending)
	}
	checkInvariants(t, s)
	for _, bad := range []struct {
		node string
		gpu  int
	}{{"nope", 0}, {node, 8}, {node, -1}} {
		if _, err := s.SetGPUHealth(bad.node, bad.gpu, false); !errors.Is(err, ErrInvalid) {
			t.Errorf("SetGPUHealth(%q, %d): err = %v, want ErrInvalid", bad.node, bad.gpu, err)
		}
	}
}

// TestSetGPUHealthUnhealthyAtStart: a GPU unhealthy when the scheduler was
// built serves once marked healthy.
func TestSetGPUHealthUnhealthyAtStart(t *testing.T) {
	nodes := mkNodes(1, 2, "H100", 0, false)
	nodes[0].GPUs[1].Unhealthy = true
	s := mustNew(t, nodes, oneQueue(), nil, Gpud)
	mustSubmit(t, s, Job{ID: "a", Queue: "q", Pod: gpus(2)})
	if r := s.Schedule(0); len(r.Started) != 0 {
		t.Fatal("a 2-GPU job started on a node with one healthy GPU")
	}
	if _, err := s.SetGPUHealth("n000", 1, true); err != nil {
		t.Fatal(err)
	}
	if r := s.Schedule(1); !started(r)["a"] {
		t.Fatalf("a did not start once both GPUs were healthy: %+v", r.Pending)
	}
	checkInvariants(t, s)
}

// TestPropertyHealthFlips: random failures and repairs between random
// submissions, finishes and rounds keep the free state equal to what the
// placements imply, and never place a pod on an unhealthy GPU.
func TestPropertyHealthFlips(t *testing.T) {
	for seed := range uint64(30) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 11))
			nodes := randomCluster(rng)
			s := mustNew(t, nodes, []Queue{{Name: "a"}, {Name: "b"}, {Name: "c"}}, nil, []Options{Gpud, {}, {FairShare: true}}[seed%3])
			next := 0
			for step := range 80 {
				now := int64(step * 5)
				for range rng.IntN(4) {
					if err := s.Submit(randomJob(rng, next, now)); err != nil {
						t.Fatal(err)
					}
					next++
				}
				if n := nodes[rng.IntN(len(nodes))]; len(n.GPUs) > 0 {
					if _, err := s.SetGPUHealth(n.Name, rng.IntN(len(n.GPUs)), rng.IntN(3) == 0); err != nil {
						t.Fatal(err)
					}
				}
				if run := s.Running(); len(run) > 0 && rng.IntN(2) == 0 {
					if err := s.Finish(run[rng.IntN(len(run))]); err != nil {
						t.Fatal(err)
					}
				}
				r := s.Schedule(now)
				checkInvariants(t, s)
				for _, st := range r.Started {
					for _, p := range st.Pods {
						for _, g := range p.GPUs {
							if !s.c.info[p.Node].gpus[g].healthy {
								t.Fatalf("%s placed on unhealthy GPU %d of %s", st.JobID, g, p.NodeName)
							}
						}
					}
				}
			}
		})
	}
}
