package allocator

import (
	"encoding/csv"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/internal/openbdata"
)

// openbNodes reads the 1,213-node openb GPU cluster, or skips.
func openbNodes(b *testing.B) []Node {
	f, err := os.Open(filepath.Join(openbdata.Dir(), "openb_node_list_gpu_node.csv"))
	if err != nil {
		b.Skipf("trace data absent: %v", err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		b.Fatal(err)
	}
	var nodes []Node
	for _, r := range recs[1:] {
		cpu, _ := strconv.ParseInt(r[1], 10, 64)
		gpus, _ := strconv.Atoi(r[3])
		n := node(r[0], cpu, r[4], gpus)
		n.MemoryMiB, _ = strconv.ParseInt(r[2], 10, 64)
		nodes = append(nodes, n)
	}
	return nodes
}

// BenchmarkDecide measures one placement decision on the openb cluster,
// half full, for single-GPU, fractional and model-constrained requests.
func BenchmarkDecide(b *testing.B) {
	nodes := openbNodes(b)
	reqs := map[string]Request{
		"single":     {CPUMilli: 8000, MemoryMiB: 16384, NumGPU: 1},
		"fractional": {CPUMilli: 4000, MemoryMiB: 8192, NumGPU: 1, GPUMilli: 460},
		// constrained asks for a set of models, as openb's gpu_spec does.
		"constrained": {CPUMilli: 8000, MemoryMiB: 16384, NumGPU: 1, Models: []string{"V100M16", "V100M32"}},
	}
	mix := []Request{reqs["single"], reqs["fractional"], {CPUMilli: 3152, NumGPU: 1, GPUMilli: 810}, {CPUMilli: 2000}}
	for _, pol := range PolicyNames {
		for _, kind := range []string{"single", "fractional", "constrained"} {
			b.Run(pol+"/"+kind, func(b *testing.B) {
				c, err := NewCluster(nodes)
				if err != nil {
					b.Fatal(err)
				}
				p, _ := NewPolicy(pol, c.Workload(mix))
				rng := rand.New(rand.NewPCG(1, 2))
				a := New(c, p, rng)
				// Fill to about half the GPUs so nodes differ.
				for c.AllocatedGPUMilli() < c.GPUCapacityMilli()/2 {
					if _, err := a.Place(mix[rng.IntN(len(mix))]); err != nil {
						break
					}
				}
				q := reqs[kind]
				b.ReportAllocs()
				cpu0 := processCPU(b)
				for b.Loop() {
					// Decide alone leaves the cluster unchanged; bind one in
					// eight so node states keep moving as in a run.
					d, err := a.Decide(q)
					if err != nil {
						b.Fatal(err)
					}
					if rng.IntN(8) == 0 {
						_ = c.Bind(d, q)
						_ = c.Unbind(d, q)
					}
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
				if cpu := processCPU(b) - cpu0; cpu > 0 {
					b.ReportMetric(float64(b.N)/cpu.Seconds(), "decisions/cpu-s")
				}
			})
		}
	}
}

// processCPU is the user plus system CPU time this process has used. The
// machines benchmarks run on are shared: decisions per CPU-second hold
// steadier than per wall-second when other work competes for the cores.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
