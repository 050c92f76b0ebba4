package allocator

import (
	"errors"
	"math/rand/v2"
	"testing"
)

func node(name string, cpu int64, model string, gpus int) Node {
	n := Node{Name: name, CPUMilli: cpu, MemoryMiB: 1 << 20, GPUs: make([]GPU, gpus)}
	for g := range n.GPUs {
		n.GPUs[g].Model = model
	}
	return n
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name     string
		nodes    []Node
		req      Request
		wantNode int
		wantGPUs int
		wantWhy  string
	}{
		{name: "cpu only", nodes: []Node{node("a", 8000, "T4", 1)}, req: Request{CPUMilli: 1000}, wantNode: 0},
		{name: "fraction", nodes: []Node{node("a", 8000, "T4", 2)}, req: Request{CPUMilli: 1000, NumGPU: 1, GPUMilli: 300}, wantGPUs: 1},
		{name: "model constraint", nodes: []Node{node("a", 8000, "T4", 2), node("b", 8000, "V100M32", 2)},
			req: Request{NumGPU: 2, Models: ParseModels("V100M16|V100M32")}, wantNode: 1, wantGPUs: 2},
		{name: "no such model", nodes: []Node{node("a", 8000, "T4", 2)}, req: Request{NumGPU: 1, Models: []string{"A100"}}, wantWhy: ReasonModel},
		{name: "too many gpus", nodes: []Node{node("a", 8000, "T4", 2)}, req: Request{NumGPU: 4}, wantWhy: ReasonGPU},
		{name: "cpu short", nodes: []Node{node("a", 8000, "T4", 2)}, req: Request{CPUMilli: 9000}, wantWhy: ReasonCPU},
		{name: "no gpu node", nodes: []Node{node("a", 8000, "", 0)}, req: Request{NumGPU: 1}, wantWhy: ReasonNoGPU},
	}
	for _, tc := range tests {
		for _, pol := range PolicyNames {
			t.Run(tc.name+"/"+pol, func(t *testing.T) {
				_, a := newTestAllocator(t, tc.nodes, pol, []Request{tc.req})
				d, err := a.Place(tc.req)
				if tc.wantWhy != "" {
					var nf *NoFitError
					if !errors.As(err, &nf) || !errors.Is(err, ErrNoFit) || nf.Reason != tc.wantWhy {
						t.Fatalf("Place() err = %v, want no fit %q", err, tc.wantWhy)
					}
					return
				}
				if err != nil || d.Node != tc.wantNode || len(d.GPUs) != tc.wantGPUs {
					t.Fatalf("Place() = %+v, %v; want node %d with %d GPUs", d, err, tc.wantNode, tc.wantGPUs)
				}
			})
		}
	}
}

func TestPolicyNames(t *testing.T) {
	for i, n := range PolicyNames {
		p, err := NewPolicy(PolicyLabel(n), Workload{})
		if err != nil || p.Name() != n {
			t.Fatalf("NewPolicy(%q) = %v, %v", PolicyLabel(n), p, err)
		}
		if i == 5 && PolicyLabel(n) != "06-FGD" {
			t.Fatalf("PolicyLabel(FGD) = %q", PolicyLabel(n))
		}
	}
	if _, err := NewPolicy("nope", Workload{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("unknown policy: err = %v", err)
	}
}

func TestBindUnbind(t *testing.T) {
	c, _ := NewCluster([]Node{node("a", 8000, "T4", 2)})
	q := Request{CPUMilli: 1000, NumGPU: 1, GPUMilli: 600}
	d := Decision{Node: 0, GPUs: []int{1}, MilliPerGPU: 600}
	if err := c.Bind(d, q); err != nil {
		t.Fatal(err)
	}
	if err := c.Bind(d, q); !errors.Is(err, ErrNoFit) {
		t.Fatalf("second 600m bind on one GPU: err = %v", err)
	}
	if err := c.Unbind(d, q); err != nil {
		t.Fatal(err)
	}
	if err := c.Unbind(d, q); !errors.Is(err, ErrInvalid) {
		t.Fatalf("double unbind: err = %v", err)
	}
	if c.AllocatedGPUMilli() != 0 || c.FreeCPUMilli(0) != 8000 || c.FreeGPUMilli(0, 1) != 1000 {
		t.Fatalf("state after unbind: used %d cpu %d gpu %d", c.AllocatedGPUMilli(), c.FreeCPUMilli(0), c.FreeGPUMilli(0, 1))
	}
}

func TestUnhealthyGPUNeverChosen(t *testing.T) {
	n := node("a", 64000, "T4", 2)
	n.GPUs[0].Unhealthy = true
	c, _ := NewCluster([]Node{n})
	p, _ := NewPolicy(PolicyGpud, Workload{})
	a := New(c, p, rand.New(rand.NewPCG(1, 1)))
	for range 3 {
		d, err := a.Place(Request{NumGPU: 1, GPUMilli: 300})
		if err != nil || d.GPUs[0] != 1 {
			t.Fatalf("Place() = %+v, %v; want GPU 1", d, err)
		}
	}
	if _, err := a.Place(Request{NumGPU: 1, GPUMilli: 300}); !errors.Is(err, ErrNoFit) {
		t.Fatalf("4th 300m: err = %v, want no fit", err)
	}
}

func TestFGDPrefersLessFragmentation(t *testing.T) {
	// Node a has a GPU with 500m free; node b is idle. A 500m pod should
	// fill a's half GPU rather than split one of b's.
	c, _ := NewCluster([]Node{node("a", 64000, "G2", 2), node("b", 64000, "G2", 2)})
	half := Request{CPUMilli: 1000, NumGPU: 1, GPUMilli: 500}
	if err := c.Bind(Decision{Node: 0, GPUs: []int{0}, MilliPerGPU: 500}, half); err != nil {
		t.Fatal(err)
	}
	w := c.Workload([]Request{half, {CPUMilli: 1000, NumGPU: 1}})
	for _, pol := range []string{PolicyFGD, PolicyGpud, PolicyBestFit, PolicyGpuPacking} {
		t.Run(pol, func(t *testing.T) {
			p, _ := NewPolicy(pol, w)
			d, err := New(c, p, rand.New(rand.NewPCG(3, 4))).Decide(half)
			if err != nil || d.Node != 0 || d.GPUs[0] != 0 {
				t.Fatalf("Decide() = %+v, %v; want node 0 GPU 0", d, err)
			}
		})
	}
}

// newTestAllocator is a cluster of nodes with an allocator running policy
// pol, tuned to the workload reqs, with a fixed seed.
func newTestAllocator(t *testing.T, nodes []Node, pol string, reqs []Request) (*Cluster, *Allocator) {
	t.Helper()
	c, err := NewCluster(nodes)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPolicy(pol, c.Workload(reqs))
	if err != nil {
		t.Fatal(err)
	}
	return c, New(c, p, rand.New(rand.NewPCG(1, 2)))
}
