package allocator

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestManyGPUKinds places on a cluster with more kinds of GPU than a
// 64-bit class mask holds: every kind is still told apart.
func TestManyGPUKinds(t *testing.T) {
	const kinds = 200
	var nodes []Node
	for k := range kinds {
		nodes = append(nodes, gpuNode(fmt.Sprint("n", k), fmt.Sprint("M", k), 2, int64(1024*(k+1)), "8.0"))
	}
	c, err := NewCluster(nodes)
	if err != nil {
		t.Fatalf("NewCluster with %d kinds: %v", kinds, err)
	}
	p, _ := NewPolicy(PolicyGpud, c.Workload([]Request{{NumGPU: 1, Models: []string{"M150"}}}))
	a := New(c, p, rand.New(rand.NewPCG(1, 2)))
	for _, k := range []int{0, 63, 64, 130, 199} {
		q := Request{NumGPU: 1, Models: []string{fmt.Sprint("M", k)}}
		d, err := a.Place(q)
		if err != nil || d.Node != k {
			t.Fatalf("model M%d: Place() = %+v, %v; want node %d", k, d, err, k)
		}
	}
	// A memory minimum past the 64th kind leaves kinds 190-199 only.
	d, err := a.Place(Request{NumGPU: 2, MinGPUMemoryMiB: 1024 * 191})
	if err != nil || d.Node < 190 {
		t.Fatalf("min memory: Place() = %+v, %v; want a node of 190-199", d, err)
	}
	if _, err := a.Place(Request{NumGPU: 1, Models: []string{"nope"}}); err == nil {
		t.Fatal("unknown model placed")
	}
}

// TestFragCountsMIG: free MIG slices that no typical slice can use are
// fragment; those a typical slice fits are not.
func TestFragCountsMIG(t *testing.T) {
	c, _ := NewCluster([]Node{migNode("m", 1)})
	w := c.Workload([]Request{{MIGProfile: "3g.40gb"}})
	if got := c.NodeFragMilli(&w, 0); got != 0 {
		t.Fatalf("empty MIG GPU: frag %v, want 0 (a 3g.40gb fits)", got)
	}
	// 4g.40gb at 0 and 1g.10gb at 4 leave slices 5-7: 3 slices free, but
	// no 3g.40gb placement (starts 0 and 4).
	for _, q := range []Request{{MIGProfile: "4g.40gb"}, {MIGProfile: "1g.10gb"}} {
		if err := c.Bind(Decision{Node: 0, GPUs: []int{0}, MIGStart: map[string]int{"4g.40gb": 0, "1g.10gb": 4}[q.MIGProfile]}, q); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.NodeFragMilli(&w, 0); got != 3*125 {
		t.Fatalf("3 stranded slices: frag %v, want 375", got)
	}
	// Whole-GPU typical pods cannot use MIG GPUs at all.
	w = c.Workload([]Request{{NumGPU: 1}})
	if got := c.NodeFragMilli(&w, 0); got != 3*125 {
		t.Fatalf("whole-GPU workload: frag %v, want 375", got)
	}
}

// TestFragPerGPUClass: on a node with GPUs of two models, a typical pod
// constrained to one of them counts the other's free GPU as fragment, not
// the node's first GPU's model for all.
func TestFragPerGPUClass(t *testing.T) {
	n := node("mixed", 64000, "T4", 2)
	n.GPUs[1].Model = "V100M32"
	c, _ := NewCluster([]Node{n})
	w := c.Workload([]Request{{NumGPU: 1, Models: []string{"V100M32"}}})
	if got := c.NodeFragMilli(&w, 0); got != 1000 {
		t.Fatalf("frag %v, want 1000 (the T4 is fragment, the V100 is not)", got)
	}
}

// TestMemoryFractionPerGPU: a memory-sized fraction takes its share of the
// memory of the GPU it lands on, not of the node's smallest GPU.
func TestMemoryFractionPerGPU(t *testing.T) {
	n := gpuNode("mixed", "T4", 2, 16384, "7.5")
	n.GPUs[1].Model, n.GPUs[1].MemoryMiB, n.GPUs[1].ComputeCapability = "A100", 81920, "8.0"
	for _, pol := range PolicyNames {
		t.Run(pol, func(t *testing.T) {
			c, _ := NewCluster([]Node{n})
			p, _ := NewPolicy(pol, c.Workload(nil))
			a := New(c, p, rand.New(rand.NewPCG(1, 2)))
			d, err := a.Place(Request{NumGPU: 1, GPUMemoryMiB: 8192, Models: []string{"A100"}})
			if err != nil || d.GPUs[0] != 1 || d.MilliPerGPU != 100 || c.FreeGPUMilli(0, 1) != 900 {
				t.Fatalf("8 GiB on the A100: %+v, %v, A100 free %d; want 100 milli of GPU 1", d, err, c.FreeGPUMilli(0, 1))
			}
			// 12 GiB is 750 of the T4 or 150 of the A100: either, sized by its own.
			d, err = a.Place(Request{NumGPU: 1, GPUMemoryMiB: 12288})
			if err != nil {
				t.Fatal(err)
			}
			want := map[int]int64{0: 750, 1: 150}[d.GPUs[0]]
			if d.MilliPerGPU != want || c.AllocatedGPUMilli() != 100+want {
				t.Fatalf("12 GiB: %+v, allocated %d; want %d milli on GPU %d", d, c.AllocatedGPUMilli(), want, d.GPUs[0])
			}
			if err := c.Unbind(d, Request{NumGPU: 1, GPUMemoryMiB: 12288}); err != nil || c.AllocatedGPUMilli() != 100 {
				t.Fatalf("Unbind: %v, allocated %d", err, c.AllocatedGPUMilli())
			}
			// 20 GiB is a whole T4 (the documented round-up) or 250 of the A100.
			d, err = a.Place(Request{NumGPU: 1, GPUMemoryMiB: 20480})
			if want := map[int]int64{0: 1000, 1: 250}[d.GPUs[0]]; err != nil || d.MilliPerGPU != want {
				t.Fatalf("20 GiB: %+v, %v; want %d milli", d, err, want)
			}
		})
	}
}

// TestFailReasons: each filter reason counts under its own name.
func TestFailReasons(t *testing.T) {
	for i, r := range reasons {
		if got := reasonIndex(r); got != i {
			t.Fatalf("reasonIndex(%q) = %d, want %d", r, got, i)
		}
	}
}
