package tracefamily

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/gpud/gpud/pkg/trace"
)

func cluster() []trace.Node {
	var nodes []trace.Node
	add := func(n int, model string, gpus int, cpu int64) {
		for i := range n {
			nodes = append(nodes, trace.Node{Name: fmt.Sprintf("%s-%d", model, i), CPUMilli: cpu, MemoryMiB: 1 << 19, NumGPU: gpus, Model: model})
		}
	}
	add(30, "G2", 8, 96000)  // 240 GPUs
	add(30, "T4", 2, 104000) // 60 GPUs
	add(10, "P100", 2, 16000)
	add(5, "", 0, 64000)
	return nodes
}

func pods(n int) []trace.Pod {
	out := make([]trace.Pod, n)
	for i := range out {
		p := trace.Pod{Name: fmt.Sprintf("p%05d", i), CPUMilli: 8000, MemoryMiB: 16384, NumGPU: 1, GPUMilli: 1000}
		switch i % 4 {
		case 1:
			p.GPUMilli = 500
		case 2:
			p.NumGPU, p.GPUMilli = 0, 0
		}
		out[i] = p
	}
	return out
}

func TestConstrained(t *testing.T) {
	nodes, in := cluster(), pods(20000)
	f, err := ByName("gpuspec33")
	if err != nil {
		t.Fatal(err)
	}
	out, err := f.Apply(nodes, in)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := f.Apply(nodes, in)
	if !reflect.DeepEqual(out, again) {
		t.Fatal("Apply is not deterministic")
	}
	gpuPods, constrained, sets := 0, 0, 0
	perModel := map[string]int{}
	for i, p := range out {
		if p.Name != in[i].Name || p.CPUMilli != in[i].CPUMilli || p.NumGPU != in[i].NumGPU || p.GPUMilli != in[i].GPUMilli {
			t.Fatalf("pod %d changed beyond gpu_spec: %+v from %+v", i, p, in[i])
		}
		if p.NumGPU == 0 {
			if p.GPUSpec != "" {
				t.Fatalf("CPU-only pod %s got gpu_spec %q", p.Name, p.GPUSpec)
			}
			continue
		}
		gpuPods++
		if p.GPUSpec == "" {
			continue
		}
		constrained++
		ms := strings.Split(p.GPUSpec, "|")
		if len(ms) > 1 {
			sets++
		}
		seen := map[string]bool{}
		for _, m := range ms {
			if seen[m] || (m != "G2" && m != "T4" && m != "P100") {
				t.Fatalf("pod %s: gpu_spec %q: model %q repeated or not in the cluster", p.Name, p.GPUSpec, m)
			}
			seen[m] = true
		}
		if len(ms) == 1 {
			perModel[ms[0]]++
		}
	}
	if share := float64(constrained) / float64(gpuPods); share < 0.31 || share > 0.35 {
		t.Errorf("constrained share %.3f, want about 0.33", share)
	}
	if share := float64(sets) / float64(constrained); share < 0.45 || share > 0.55 {
		t.Errorf("set share %.3f, want about 0.5", share)
	}
	// Single models in proportion to GPUs: G2 240, T4 60, P100 20 of 320.
	singles := perModel["G2"] + perModel["T4"] + perModel["P100"]
	if g2 := float64(perModel["G2"]) / float64(singles); g2 < 0.70 || g2 > 0.80 {
		t.Errorf("G2 share of single-model specs %.3f, want about 0.75", g2)
	}
}

func TestConstrainedOnlyWhereThePodFits(t *testing.T) {
	nodes := cluster()
	in := []trace.Pod{{Name: "big", CPUMilli: 100000, MemoryMiB: 1024, NumGPU: 2, GPUMilli: 1000}}
	f := Family{Name: "all", SpecShare: 1, SetShare: 0}
	for range 50 {
		out, err := f.Apply(nodes, in)
		if err != nil {
			t.Fatal(err)
		}
		if out[0].GPUSpec != "T4" { // only T4 nodes have 100 cores and 2 GPUs
			t.Fatalf("gpu_spec %q, want T4", out[0].GPUSpec)
		}
		f.Name += "x"
	}
}

func TestMultiGPU(t *testing.T) {
	nodes, in := cluster(), pods(8000)
	f, _ := ByName("multigpu20")
	out, err := f.Apply(nodes, in)
	if err != nil {
		t.Fatal(err)
	}
	whole, multi := 0, map[int]int{}
	for i, p := range out {
		if in[i].NumGPU == 1 && in[i].GPUMilli == 1000 {
			whole++
		}
		if p.NumGPU > 1 {
			multi[p.NumGPU]++
			if p.GPUMilli != 1000 || p.CPUMilli > 96000 || p.CPUMilli != min(8000*int64(p.NumGPU), 96000) {
				t.Fatalf("multi-GPU pod %+v", p)
			}
		}
	}
	n := multi[2] + multi[4] + multi[8]
	if share := float64(n) / float64(whole); share < 0.17 || share > 0.23 {
		t.Errorf("multi share %.3f, want about 0.2 (%v)", share, multi)
	}
	if multi[2] <= multi[4] || multi[4] <= multi[8] || multi[8] == 0 {
		t.Errorf("sizes %v, want 2 > 4 > 8 > 0 (weights 0.5, 0.3, 0.2)", multi)
	}
}

func TestErrors(t *testing.T) {
	if _, err := ByName("nope"); !errors.Is(err, ErrUnknown) || !strings.Contains(err.Error(), "gpuspec15") {
		t.Fatalf("ByName(nope) = %v, want ErrUnknown listing the families", err)
	}
	for _, f := range []Family{{Name: "a", SpecShare: 1.5}, {Name: "b", MultiShare: 0.1}, {Name: "c", MultiShare: 0.1, MultiWeights: [3]float64{-1, 1, 0}}} {
		if _, err := f.Apply(cluster(), pods(4)); err == nil || !strings.Contains(err.Error(), f.Name) {
			t.Errorf("Apply(%+v) = %v, want an error naming the family", f, err)
		}
	}
	if _, err := (Family{Name: "cpu", SpecShare: 0.5}).Apply([]trace.Node{{Name: "c", CPUMilli: 1000}}, pods(4)); err == nil {
		t.Error("constraining on a cluster without GPU models: no error")
	}
	for _, f := range Families {
		if err := f.Validate(); err != nil {
			t.Errorf("family %s: %v", f.Name, err)
		}
	}
}

// TestUniform: a uniform family asks every model alike, whatever its GPUs.
func TestUniform(t *testing.T) {
	out, err := Family{Name: "u", SpecShare: 1, Uniform: true}.Apply(cluster(), pods(9000))
	if err != nil {
		t.Fatal(err)
	}
	per := map[string]int{}
	for _, p := range out {
		if p.GPUSpec != "" {
			per[p.GPUSpec]++
		}
	}
	for _, m := range []string{"G2", "T4", "P100"} {
		if share := float64(per[m]) / float64(per["G2"]+per["T4"]+per["P100"]); share < 0.30 || share > 0.37 {
			t.Errorf("model %s drawn %.3f of the time, want about 1/3 (%v)", m, share, per)
		}
	}
}
