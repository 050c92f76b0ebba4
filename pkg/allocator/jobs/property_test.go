package jobs

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gpud/gpud/pkg/allocator"
)

func randomCluster(rng *rand.Rand) []allocator.Node {
	n := 2 + rng.IntN(12)
	models := []string{"H100", "A100", "T4"}
	out := make([]allocator.Node, n)
	for i := range out {
		g := []int{0, 1, 2, 4, 8}[rng.IntN(5)]
		model := models[rng.IntN(len(models))]
		gs := make([]allocator.GPU, g)
		for k := range gs {
			gs[k] = allocator.GPU{Model: model, MemoryMiB: []int64{16384, 40960, 81920}[rng.IntN(3)], Unhealthy: rng.IntN(20) == 0}
			if model == "A100" && rng.IntN(2) == 0 {
				gs[k].Labels = map[string]string{LabelMIG: "true"}
			}
		}
		out[i] = allocator.Node{Name: fmt.Sprintf("n%d", i), CPUMilli: int64(8000 + rng.IntN(64)*1000), MemoryMiB: 65536, GPUs: gs,
			Labels: map[string]string{LabelRack: fmt.Sprint(i % 3), LabelNVLinkDomain: fmt.Sprint(i / 2), LabelZone: fmt.Sprint(i % 2)}}
	}
	return out
}

func randomJob(rng *rand.Rand, id int, now int64) Job {
	p := Pod{CPUMilli: int64(rng.IntN(8)) * 1000, MemoryMiB: int64(rng.IntN(8192))}
	switch rng.IntN(4) {
	case 0:
		p.NumGPU = 1 + rng.IntN(8)
	case 1:
		p.NumGPU, p.GPUMilli = 1, int64(1+rng.IntN(999))
		if rng.IntN(2) == 0 {
			p.GPUMemoryMiB = int64(1 + rng.IntN(20000))
		}
	case 2:
		p.MIG = MIGProfiles[rng.IntN(len(MIGProfiles))].Name
	}
	if rng.IntN(4) == 0 {
		p.Models = []string{"H100"}
	}
	return Job{
		ID: fmt.Sprintf("j%d", id), Queue: []string{"a", "b", "c"}[rng.IntN(3)], Priority: rng.IntN(3),
		Pods: 1 + rng.IntN(4), Pod: p, Topology: Level(rng.IntN(4)), Required: rng.IntN(2) == 0,
		Checkpointable: rng.IntN(2) == 0, Preemptible: rng.IntN(3) == 0, EstimateSeconds: int64(rng.IntN(200)), Submit: now,
	}
}

// TestPropertyRandomClusters drives random jobs through random clusters and
// checks after every step: no GPU over-allocated (our own ledger and the
// core's Cluster.Bind agree), no fraction above 1000 milli, every running
// gang whole and within its required domain, every pending job explained,
// every preemption for a job that started.
func TestPropertyRandomClusters(t *testing.T) {
	for seed := range uint64(60) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			nodes := randomCluster(rng)
			qs := []Queue{
				{Name: "org", Quota: Quota{Limit: Resources{GPUMilli: int64(rng.IntN(40)) * 1000}}},
				{Name: "a", Parent: "org", Quota: Quota{Guaranteed: Resources{GPUMilli: 4000, MIGSlices: 7}}},
				{Name: "b", Parent: "org", Quota: Quota{ModelLimit: map[string]int64{"H100": 6000}}},
				{Name: "c", Quota: Quota{Guaranteed: Resources{GPUMilli: 8000}}},
			}
			rs := []Reservation{{Name: "r", Queue: "c", Nodes: []string{"n0"}, Start: 50, End: 120}}
			opts := []Options{Gpud, {}, {FairShare: true}}[seed%3]
			s := mustNew(t, nodes, qs, rs, opts)
			core, err := allocator.NewCluster(nodes)
			if err != nil {
				t.Fatal(err)
			}
			placed := map[string][]PodPlacement{}
			migOf := map[string]string{}
			// coreOf maps a pod placement onto the core's ledger.
			coreOf := func(id string, p PodPlacement) (allocator.Decision, allocator.Request) {
				d := allocator.Decision{Node: p.Node, GPUs: p.GPUs, MilliPerGPU: p.MilliPerGPU, MIGStart: p.MIGStart}
				if p.MIGStart >= 0 {
					return d, allocator.Request{MIGProfile: migOf[id]}
				}
				return d, allocator.Request{NumGPU: len(p.GPUs), GPUMilli: p.MilliPerGPU}
			}
			unbindCore := func(id string) {
				for _, p := range placed[id] {
					if len(p.GPUs) > 0 {
						if err := core.Unbind(coreOf(id, p)); err != nil {
							t.Fatalf("core unbind %s: %v", id, err)
						}
					}
				}
				delete(placed, id)
			}
			next := 0
			for step := range 60 {
				now := int64(step * 5)
				for range rng.IntN(4) {
					if err := s.Submit(randomJob(rng, next, now)); err != nil {
						t.Fatal(err)
					}
					next++
				}
				if run := s.Running(); len(run) > 0 && rng.IntN(2) == 0 {
					id := run[rng.IntN(len(run))]
					unbindCore(id)
					if err := s.Finish(id); err != nil {
						t.Fatal(err)
					}
				}
				r := s.Schedule(now)
				checkInvariants(t, s)
				startedNow := started(r)
				for _, p := range r.Preempted {
					if !startedNow[p.Beneficiary] || p.Beneficiary == "" {
						t.Fatalf("preemption of %s names %q, which did not start", p.JobID, p.Beneficiary)
					}
					unbindCore(p.JobID)
				}
				for _, st := range r.Started {
					j := s.jobs[st.JobID]
					if len(st.Pods) != j.n {
						t.Fatalf("gang %s started %d of %d pods", st.JobID, len(st.Pods), j.n)
					}
					if j.job.Required && j.n > 1 && j.job.Topology != LevelNone {
						g := s.c.info[st.Pods[0].Node].group[j.job.Topology]
						for _, p := range st.Pods {
							if s.c.info[p.Node].group[j.job.Topology] != g {
								t.Fatalf("gang %s spans %s domains", st.JobID, j.job.Topology)
							}
						}
					}
					for _, p := range st.Pods {
						if p.MilliPerGPU > allocator.MilliPerGPU {
							t.Fatalf("%s takes %d milli of a GPU", st.JobID, p.MilliPerGPU)
						}
						migOf[st.JobID] = j.job.Pod.MIG
						if len(p.GPUs) > 0 {
							if err := core.Bind(coreOf(st.JobID, p)); err != nil {
								t.Fatalf("core ledger rejects %s: over-allocated: %v", st.JobID, err)
							}
						}
					}
					placed[st.JobID] = st.Pods
				}
				if len(r.Pending)+len(s.running) != len(s.jobs) {
					t.Fatalf("%d pending reasons + %d running != %d jobs", len(r.Pending), len(s.running), len(s.jobs))
				}
				for _, p := range r.Pending {
					if p.Reason.Code == "" || p.Reason.Message == "" {
						t.Fatalf("job %s pending without a reason", p.JobID)
					}
				}
			}
		})
	}
}
