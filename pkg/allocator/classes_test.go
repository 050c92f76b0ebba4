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
