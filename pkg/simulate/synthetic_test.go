package simulate

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gpud/gpud/pkg/trace"
)

// synthetic builds a cluster and pod list from shapes: nodes as (count,
// CPU cores, GPUs, model) and pods as (weight, CPU cores, GPUs, milli,
// gpu_spec), drawing n pods.
type nodeShape struct {
	count, cores, gpus int
	model              string
}

type podShape struct {
	weight, cores, gpus int
	milli               int64
	spec                string
}

func synthetic(ns []nodeShape, ps []podShape, n int, seed uint64) ([]trace.Node, []trace.Pod) {
	var nodes []trace.Node
	for _, s := range ns {
		for range s.count {
			nodes = append(nodes, trace.Node{Name: fmt.Sprintf("n%04d", len(nodes)), CPUMilli: int64(s.cores) * 1000, MemoryMiB: 1 << 20, NumGPU: s.gpus, Model: s.model})
		}
	}
	total := 0
	for _, p := range ps {
		total += p.weight
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	pods := make([]trace.Pod, n)
	for i := range pods {
		k := rng.IntN(total)
		for _, p := range ps {
			if k -= p.weight; k < 0 {
				pods[i] = trace.Pod{Name: fmt.Sprintf("p%05d", i), CPUMilli: int64(p.cores) * 1000, MemoryMiB: 1024, NumGPU: p.gpus, GPUMilli: p.milli, GPUSpec: p.spec}
				break
			}
		}
	}
	return nodes, pods
}

// TestGpudModelConstraints runs the FGD protocol on a cluster of three GPU
// models where a third of the GPU pods accept only some of them (the openb
// traces have no gpu_spec at all), and checks that gpud leaves fewer GPUs
// unallocated than FGD there too (mean over 100-130% arrived, 3 seeds).
// Measured: FGD 4.94%, gpud 4.74%, BestFit 5.08%.
func TestGpudModelConstraints(t *testing.T) {
	if testing.Short() {
		t.Skip("short: 9 simulations")
	}
	nodes, pods := synthetic(
		[]nodeShape{{150, 64, 2, "T4"}, {40, 96, 8, "V100M32"}, {40, 128, 8, "A100"}},
		[]podShape{
			{25, 6, 1, 1000, ""}, {10, 4, 1, 810, ""}, {8, 4, 1, 470, ""}, {12, 12, 1, 1000, "V100M32|A100"},
			{8, 8, 1, 650, "A100"}, {6, 24, 2, 1000, "V100M32|A100"}, {3, 60, 8, 1000, "A100"}, {3, 16, 4, 1000, "V100M32"}, {15, 12, 0, 0, ""},
		}, 4000, 7)
	rows, _, err := RunOpenB(t.Context(), Config{Workload: "model-constrained", Nodes: nodes, Pods: pods,
		Policies: []string{"FGD", "gpud", "BestFit"}, Seeds: seeds(3), Arrived: []int{100, 110, 120, 130}})
	if err != nil {
		t.Fatal(err)
	}
	mean := map[string]float64{}
	for _, r := range rows {
		mean[r.Policy] += r.UnallocMean / 4
	}
	t.Logf("unallocated: FGD %.2f%% gpud %.2f%% BestFit %.2f%%", mean["06-FGD"], mean["07-gpud"], mean["05-BestFit"])
	if mean["07-gpud"] >= mean["06-FGD"] {
		t.Errorf("gpud leaves %.2f%% unallocated, FGD %.2f%%", mean["07-gpud"], mean["06-FGD"])
	}
}
