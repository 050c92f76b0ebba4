package jobs

import (
	"fmt"
	"testing"

	"github.com/gpud/gpud/pkg/allocator"
)

// mkNodes builds n nodes of g GPUs of model with 80 GiB each; rackSize > 0
// puts nodes in racks of that many (and NVLink domains of the same size when
// nvl is set).
func mkNodes(n, g int, model string, rackSize int, nvl bool) []allocator.Node {
	out := make([]allocator.Node, n)
	for i := range out {
		gpus := make([]allocator.GPU, g)
		for k := range gpus {
			gpus[k] = allocator.GPU{Model: model, MemoryMiB: 81920}
		}
		labels := map[string]string{}
		if rackSize > 0 {
			labels[LabelRack] = fmt.Sprintf("rack-%d", i/rackSize)
			if nvl {
				labels[LabelNVLinkDomain] = fmt.Sprintf("nvl-%d", i/rackSize)
			}
		}
		out[i] = allocator.Node{Name: fmt.Sprintf("n%03d", i), CPUMilli: 256000, MemoryMiB: 2 << 20, GPUs: gpus, Labels: labels}
	}
	return out
}

func oneQueue() []Queue { return []Queue{{Name: "q"}} }

func mustNew(t testing.TB, nodes []allocator.Node, qs []Queue, rs []Reservation, o Options) *Scheduler {
	t.Helper()
	s, err := New(nodes, qs, rs, o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

func mustSubmit(t testing.TB, s *Scheduler, js ...Job) {
	t.Helper()
	for _, j := range js {
		if err := s.Submit(j); err != nil {
			t.Fatalf("Submit(%s): %v", j.ID, err)
		}
	}
}

func started(r Result) map[string]bool {
	m := map[string]bool{}
	for _, s := range r.Started {
		m[s.JobID] = true
	}
	return m
}

func pendingReason(r Result, id string) (Reason, bool) {
	for _, p := range r.Pending {
		if p.JobID == id {
			return p.Reason, true
		}
	}
	return Reason{}, false
}

func preempted(r Result) map[string]string {
	m := map[string]string{}
	for _, p := range r.Preempted {
		m[p.JobID] = p.Beneficiary
	}
	return m
}

func gpus(n int) Pod { return Pod{CPUMilli: 1000, MemoryMiB: 1024, NumGPU: n} }

func frac(milli int64) Pod { return Pod{CPUMilli: 1000, MemoryMiB: 1024, NumGPU: 1, GPUMilli: milli} }

// checkInvariants fails if any GPU is over-allocated (milli below 0 or
// above 1000, memory negative, MIG slices overlapping) or the free state
// differs from what the running jobs' placements imply.
func checkInvariants(t testing.TB, s *Scheduler) {
	t.Helper()
	want, _ := newCluster(nodesOf(s))
	for _, j := range s.running {
		if len(j.pods) != j.n {
			t.Fatalf("job %s runs %d of %d pods", j.job.ID, len(j.pods), j.n)
		}
		for i := range j.pods {
			p := &j.pods[i]
			for _, g := range p.GPUs {
				gf := want.free[p.Node].gpus[g]
				if j.d.kind == kindMIG {
					if gf.migUsed&j.d.mig.Mask(p.MIGStart) != 0 {
						t.Fatalf("job %s: MIG slices overlap on %s gpu %d", j.job.ID, p.NodeName, g)
					}
				} else if gf.milli < p.MilliPerGPU || gf.mem < takenMem(p, &j.d, s.c.info[p.Node].gpus[g].memMiB) {
					t.Fatalf("job %s: gpu %d on %s over-allocated (free %d milli %d MiB, takes %d, %d)", j.job.ID, g, p.NodeName, gf.milli, gf.mem, p.MilliPerGPU, p.MemoryMiBPerGPU)
				}
			}
			want.bind(p, &j.d)
		}
	}
	for i := range want.free {
		w, g := want.free[i], s.c.free[i]
		if w.cpu != g.cpu || w.mem != g.mem || w.wholeFree != g.wholeFree || w.milliFree != g.milliFree || w.cpu < 0 || w.mem < 0 {
			t.Fatalf("node %d free state %+v, placements imply %+v", i, g, w)
		}
		for k := range w.gpus {
			if w.gpus[k] != g.gpus[k] || g.gpus[k].milli < 0 || g.gpus[k].milli > allocator.MilliPerGPU || g.gpus[k].mem < 0 || g.gpus[k].migCompute > MIGSlicesPerGPU {
				t.Fatalf("node %d gpu %d free %+v, placements imply %+v", i, k, g.gpus[k], w.gpus[k])
			}
		}
	}
}

// nodesOf rebuilds the node list from the scheduler's fixed description.
func nodesOf(s *Scheduler) []allocator.Node {
	out := make([]allocator.Node, len(s.c.info))
	for i, inf := range s.c.info {
		n := allocator.Node{Name: inf.name, CPUMilli: inf.cpu, MemoryMiB: inf.mem}
		for _, g := range inf.gpus {
			gpu := allocator.GPU{Model: s.c.models[g.model], MemoryMiB: g.memMiB, Unhealthy: !g.healthy}
			if g.mig {
				gpu.Labels = map[string]string{LabelMIG: "true"}
			}
			n.GPUs = append(n.GPUs, gpu)
		}
		out[i] = n
	}
	return out
}
