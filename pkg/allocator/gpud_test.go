package allocator

import (
	"math/rand/v2"
	"testing"
)

// fill binds one 1-GPU pod of cpu milli on each GPU in gpus of node i.
func fill(t *testing.T, c *Cluster, i int, cpu int64, gpus ...int) {
	t.Helper()
	for _, g := range gpus {
		if err := c.Bind(Decision{Node: i, GPUs: []int{g}, MilliPerGPU: MilliPerGPU}, Request{CPUMilli: cpu, NumGPU: 1}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestGpudKeepsCPUForGPUs pins the two terms that make gpud beat FGD on the
// openb traces, on cases where FGD's one-pod lookahead sees a tie.
func TestGpudKeepsCPUForGPUs(t *testing.T) {
	// The typical pod is a 1-GPU, 8-core pod; 8-GPU pods are rare, outside
	// the typical set (as in the openb traces).
	typical := []Request{{CPUMilli: 8000, NumGPU: 1}}
	tests := []struct {
		name  string
		setup func(t *testing.T, c *Cluster)
		req   Request
		want  int
	}{
		{
			// Node 0 is idle; node 1's GPUs are all taken. A CPU-only pod
			// on node 0 would cost a later 8-GPU, 88-core pod its node.
			name:  "cpu-only pod goes where GPUs are used up",
			setup: func(t *testing.T, c *Cluster) { fill(t, c, 1, 8000, 0, 1, 2, 3, 4, 5, 6, 7) },
			req:   Request{CPUMilli: 16000},
			want:  1,
		},
		{
			// Both nodes have 4 free GPUs; node 0 only 28 cores. A 16-core
			// pod there leaves 3 GPUs with 12 cores, enough for the next
			// typical pod (FGD sees no fragmentation) but not for the
			// three GPUs (8 cores each).
			name: "gpu pod avoids stranding GPUs without CPU",
			setup: func(t *testing.T, c *Cluster) {
				fill(t, c, 0, 17000, 0, 1, 2, 3)
				fill(t, c, 1, 4000, 0, 1, 2, 3)
			},
			req:  Request{CPUMilli: 16000, NumGPU: 1},
			want: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fgdOther := 0
			for seed := range uint64(16) {
				c, _ := NewCluster([]Node{node("a", 96000, "G2", 8), node("b", 96000, "G2", 8)})
				tc.setup(t, c)
				w := c.Workload(typical)
				for _, pol := range []string{PolicyGpud, PolicyFGD} {
					p, _ := NewPolicy(pol, w)
					a := New(c, p, rand.New(rand.NewPCG(seed, 5)))
					if err := a.SetTieOrder([]int{int(seed % 2), int(1 - seed%2)}); err != nil {
						t.Fatal(err)
					}
					d, err := a.Decide(tc.req)
					if err != nil {
						t.Fatal(err)
					}
					if pol == PolicyGpud && d.Node != tc.want {
						t.Fatalf("seed %d: gpud chose node %d, want %d", seed, d.Node, tc.want)
					}
					if pol == PolicyFGD && d.Node != tc.want {
						fgdOther++
					}
				}
			}
			// The case is one FGD cannot tell apart: it follows the tie order.
			if fgdOther == 0 {
				t.Fatalf("FGD always chose node %d too; the case does not exercise gpud's terms", tc.want)
			}
		})
	}
}

// TestGpudLeavesScarceModels: with pods constrained to each model in
// proportion to its GPUs, FGD sends an unconstrained pod to the small
// model (its GPUs count as fragment for every pod constrained elsewhere, so
// taking them lowers FGD's measure), and the pods constrained to it find it
// full. gpud measures fragmentation only over the GPUs each pod can use and
// keeps filling the node it has opened.
func TestGpudLeavesScarceModels(t *testing.T) {
	typical := []Request{
		{CPUMilli: 4000, NumGPU: 1}, {CPUMilli: 4000, NumGPU: 1}, {CPUMilli: 4000, NumGPU: 1},
		{CPUMilli: 4000, NumGPU: 1}, {CPUMilli: 4000, NumGPU: 1}, {CPUMilli: 4000, NumGPU: 1},
		{CPUMilli: 4000, NumGPU: 1, Models: []string{"G2"}}, {CPUMilli: 4000, NumGPU: 1, Models: []string{"G2"}},
		{CPUMilli: 4000, NumGPU: 1, Models: []string{"G2"}}, {CPUMilli: 4000, NumGPU: 1, Models: []string{"T4"}},
	}
	fgdT4 := 0
	for seed := range uint64(16) {
		for _, pol := range []string{PolicyGpud, PolicyFGD} {
			c, _ := NewCluster([]Node{node("g2", 96000, "G2", 8), node("t4", 96000, "T4", 2)})
			fill(t, c, 0, 4000, 0, 1, 2, 3)
			p, _ := NewPolicy(pol, c.Workload(typical))
			a := New(c, p, rand.New(rand.NewPCG(seed, 5)))
			if err := a.SetTieOrder([]int{int(seed % 2), int(1 - seed%2)}); err != nil {
				t.Fatal(err)
			}
			d, err := a.Decide(Request{CPUMilli: 4000, NumGPU: 1})
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case pol == PolicyGpud && d.Node != 0:
				t.Fatalf("seed %d: gpud took the T4, which the T4-only pods need", seed)
			case pol == PolicyFGD && d.Node == 1:
				fgdT4++
			}
		}
	}
	if fgdT4 == 0 {
		t.Fatal("FGD never took the T4; the case does not show the difference")
	}
}

// TestGpudPressure: pods constrained to each model alike ask the small
// model for more of its GPUs than the big one. FGD sees a tie (either
// model's GPUs are fragment for the pods constrained to the other) and
// follows its tie order; gpud leaves the small model to the pods that need
// it.
func TestGpudPressure(t *testing.T) {
	typical := []Request{
		{CPUMilli: 4000, NumGPU: 1}, {CPUMilli: 4000, NumGPU: 1}, {CPUMilli: 4000, NumGPU: 1},
		{CPUMilli: 4000, NumGPU: 1}, {CPUMilli: 4000, NumGPU: 1}, {CPUMilli: 4000, NumGPU: 1},
		{CPUMilli: 4000, NumGPU: 1, Models: []string{"G2"}}, {CPUMilli: 4000, NumGPU: 1, Models: []string{"G2"}},
		{CPUMilli: 4000, NumGPU: 1, Models: []string{"T4"}}, {CPUMilli: 4000, NumGPU: 1, Models: []string{"T4"}},
	}
	fgdT4 := 0
	for seed := range uint64(16) {
		for _, pol := range []string{PolicyGpud, PolicyFGD} {
			// Both nodes: 4 free GPUs and 48 free cores.
			c, _ := NewCluster([]Node{node("g2", 96000, "G2", 16), node("t4", 96000, "T4", 8)})
			fill(t, c, 0, 4000, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)
			fill(t, c, 1, 12000, 0, 1, 2, 3)
			p, _ := NewPolicy(pol, c.Workload(typical))
			a := New(c, p, rand.New(rand.NewPCG(seed, 5)))
			if err := a.SetTieOrder([]int{int(seed % 2), int(1 - seed%2)}); err != nil {
				t.Fatal(err)
			}
			d, err := a.Decide(Request{CPUMilli: 4000, NumGPU: 1})
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case pol == PolicyGpud && d.Node != 0:
				t.Fatalf("seed %d: gpud took the T4, which its constrained pods ask twice as hard", seed)
			case pol == PolicyFGD && d.Node == 1:
				fgdT4++
			}
		}
	}
	if fgdT4 == 0 {
		t.Fatal("FGD never took the T4; the case does not show the difference")
	}
	// A pod that can use only the T4 pays nothing for it.
	c, _ := NewCluster([]Node{node("g2", 96000, "G2", 16), node("t4", 96000, "T4", 8)})
	p, _ := NewPolicy(PolicyGpud, c.Workload(typical))
	if d, err := New(c, p, rand.New(rand.NewPCG(1, 5))).Decide(Request{CPUMilli: 4000, NumGPU: 1, Models: []string{"T4"}}); err != nil || d.Node != 1 {
		t.Fatalf("T4-only pod: %+v, %v", d, err)
	}
}
