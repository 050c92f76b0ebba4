package allocator

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

// gpuNode builds a node of n GPUs with the given model, memory (MiB) and
// compute capability.
func gpuNode(name, model string, n int, memMiB int64, cc string) Node {
	nd := node(name, 64000, model, n)
	for g := range nd.GPUs {
		nd.GPUs[g].MemoryMiB, nd.GPUs[g].ComputeCapability = memMiB, cc
	}
	return nd
}

// migNode builds a node of n GPUs in MIG mode.
func migNode(name string, n int) Node {
	nd := gpuNode(name, "A100", n, 81920, "8.0")
	for g := range nd.GPUs {
		nd.GPUs[g].Labels = map[string]string{LabelMIG: "true"}
	}
	return nd
}

// nvlNode builds an 8-GPU node whose GPUs are in the NVLink domains given.
func nvlNode(name string, domains ...string) Node {
	nd := gpuNode(name, "H100", len(domains), 81920, "9.0")
	for g, d := range domains {
		nd.GPUs[g].Labels = map[string]string{LabelNVLinkDomain: d}
	}
	return nd
}

func TestRequestFeatures(t *testing.T) {
	mixed := []Node{gpuNode("t4", "T4", 2, 15360, "7.5"), gpuNode("v100", "V100M32", 2, 32768, "7.0"), gpuNode("a100", "A100", 2, 81920, "8.0")}
	tests := []struct {
		name      string
		nodes     []Node
		bound     []Request // placed first, in order
		req       Request
		wantNodes []string // node names acceptable; empty with wantWhy
		wantMilli int64
		wantWhy   string // NoFitError reason; "invalid" for ErrInvalid
	}{
		{name: "min vram", nodes: mixed, req: Request{NumGPU: 1, MinGPUMemoryMiB: 32000}, wantNodes: []string{"v100", "a100"}, wantMilli: 1000},
		{name: "min vram none", nodes: mixed, req: Request{NumGPU: 1, MinGPUMemoryMiB: 100000}, wantWhy: ReasonModel},
		{name: "min compute capability", nodes: mixed, req: Request{NumGPU: 2, MinComputeCapability: "8.0"}, wantNodes: []string{"a100"}, wantMilli: 1000},
		{name: "compute capability and model", nodes: mixed, req: Request{NumGPU: 1, Models: []string{"T4", "V100M32"}, MinComputeCapability: "7.5"}, wantNodes: []string{"t4"}, wantMilli: 1000},
		{name: "bad compute capability", nodes: mixed, req: Request{NumGPU: 1, MinComputeCapability: "eight"}, wantWhy: "invalid"},
		{name: "memory fraction on 16G", nodes: mixed[:1], req: Request{NumGPU: 1, GPUMemoryMiB: 3840}, wantNodes: []string{"t4"}, wantMilli: 250},
		{name: "memory fraction on 80G", nodes: mixed[2:], req: Request{NumGPU: 1, GPUMemoryMiB: 8192, GPUCoresPct: 5}, wantNodes: []string{"a100"}, wantMilli: 100},
		{name: "cores dominate memory", nodes: mixed[2:], req: Request{NumGPU: 1, GPUMemoryMiB: 8192, GPUCoresPct: 30}, wantNodes: []string{"a100"}, wantMilli: 300},
		{name: "memory fraction rounds up to whole", nodes: mixed[:1], req: Request{NumGPU: 1, GPUMemoryMiB: 20000}, wantNodes: []string{"t4"}, wantMilli: 1000},
		{name: "memory fraction needs known memory", nodes: []Node{node("x", 64000, "T4", 1)}, req: Request{NumGPU: 1, GPUMemoryMiB: 1024}, wantWhy: ReasonGPUMemory},
		{name: "memory fraction of two GPUs", nodes: mixed, req: Request{NumGPU: 2, GPUMemoryMiB: 1024}, wantWhy: "invalid"},
		{name: "memory fraction fills remainder", nodes: mixed[:1], bound: []Request{{NumGPU: 1, GPUMilli: 500}, {NumGPU: 1, GPUMilli: 500}, {NumGPU: 1, GPUMilli: 500}},
			req: Request{NumGPU: 1, GPUMemoryMiB: 7680}, wantNodes: []string{"t4"}, wantMilli: 500},
		{name: "mig slice", nodes: []Node{migNode("m", 1)}, req: Request{MIGProfile: "3g.40gb"}, wantNodes: []string{"m"}, wantMilli: 500},
		{name: "mig alias and prefix", nodes: []Node{migNode("m", 1)}, req: Request{MIGProfile: "nvidia.com/mig-1g.5gb"}, wantNodes: []string{"m"}, wantMilli: 125},
		{name: "mig unknown profile", nodes: []Node{migNode("m", 1)}, req: Request{MIGProfile: "5g.50gb"}, wantWhy: "invalid"},
		{name: "mig needs mig gpu", nodes: mixed, req: Request{MIGProfile: "1g.10gb"}, wantWhy: ReasonModel},
		{name: "whole gpu never on mig gpu", nodes: []Node{migNode("m", 2)}, req: Request{NumGPU: 1}, wantWhy: ReasonModel},
		{name: "mig full", nodes: []Node{migNode("m", 1)}, bound: []Request{{MIGProfile: "4g.40gb"}, {MIGProfile: "3g.40gb"}}, req: Request{MIGProfile: "1g.10gb"}, wantWhy: ReasonMIG},
		{name: "mig placement rule", nodes: []Node{migNode("m", 1)}, bound: []Request{{MIGProfile: "1g.10gb"}, {MIGProfile: "3g.40gb"}}, req: Request{MIGProfile: "3g.40gb"}, wantWhy: ReasonMIG},
	}
	for _, tc := range tests {
		for _, pol := range PolicyNames {
			t.Run(tc.name+"/"+pol, func(t *testing.T) {
				c, a := newTestAllocator(t, tc.nodes, pol, append(slices.Clone(tc.bound), tc.req))
				for _, b := range tc.bound {
					if _, err := a.Place(b); err != nil {
						t.Fatalf("placing %+v: %v", b, err)
					}
				}
				used := c.AllocatedGPUMilli()
				d, err := a.Place(tc.req)
				var nf *NoFitError
				switch {
				case tc.wantWhy == "invalid":
					if !errors.Is(err, ErrInvalid) {
						t.Fatalf("Place() err = %v, want ErrInvalid", err)
					}
					return
				case tc.wantWhy != "":
					if !errors.As(err, &nf) || nf.Reason != tc.wantWhy {
						t.Fatalf("Place() = %+v, %v; want no fit %q", d, err, tc.wantWhy)
					}
					return
				case err != nil:
					t.Fatal(err)
				}
				if n := c.Node(d.Node); !slices.Contains(tc.wantNodes, n.Name) {
					t.Fatalf("Place() on %s, want one of %v", n.Name, tc.wantNodes)
				}
				if d.MilliPerGPU != tc.wantMilli || c.AllocatedGPUMilli()-used != tc.wantMilli*int64(len(d.GPUs)) {
					t.Fatalf("Place() = %+v took %d milli; want %d per GPU", d, c.AllocatedGPUMilli()-used, tc.wantMilli)
				}
				if err := c.Unbind(d, tc.req); err != nil || c.AllocatedGPUMilli() != used {
					t.Fatalf("Unbind() = %v, allocated %d, want %d", err, c.AllocatedGPUMilli(), used)
				}
			})
		}
	}
}

func TestMIGPlacement(t *testing.T) {
	c, _ := NewCluster([]Node{migNode("m", 2)})
	p, _ := NewPolicy(PolicyGpud, Workload{})
	a := New(c, p, rand.New(rand.NewPCG(1, 2)))
	steps := []struct {
		profile   string
		wantGPU   int
		wantStart int
	}{
		{"3g.40gb", 0, 0},
		{"1g.10gb", 0, 4}, // best fit: the used GPU, first free start
		{"2g.20gb", 1, 0}, // GPU 0 has 3 memory slices left, but only 3 compute
		{"1g.20gb", 0, 6},
		{"7g.80gb", -1, 0},
	}
	for _, st := range steps {
		d, err := a.Place(Request{MIGProfile: st.profile})
		if st.wantGPU < 0 {
			if !errors.Is(err, ErrNoFit) {
				t.Fatalf("%s: Place() = %+v, %v; want no fit", st.profile, d, err)
			}
			continue
		}
		if err != nil || d.GPUs[0] != st.wantGPU || d.MIGStart != st.wantStart {
			t.Fatalf("%s: Place() = %+v, %v; want GPU %d start %d", st.profile, d, err, st.wantGPU, st.wantStart)
		}
	}
	if got := []int{c.FreeMIGSlices(0, 0), c.FreeMIGSlices(0, 1)}; !slices.Equal(got, []int{1, 6}) {
		t.Fatalf("free memory slices = %v, want [1 6]", got)
	}
	// A second bind of an occupied slice is refused.
	if err := c.Bind(Decision{Node: 0, GPUs: []int{1}, MIGStart: 0}, Request{MIGProfile: "1g.10gb"}); !errors.Is(err, ErrNoFit) {
		t.Fatalf("overlapping bind: err = %v", err)
	}
	if err := c.Bind(Decision{Node: 0, GPUs: []int{1}, MIGStart: 3}, Request{MIGProfile: "3g.40gb"}); !errors.Is(err, ErrNoFit) {
		t.Fatalf("bind at a start the profile does not allow: err = %v", err)
	}
}

func TestTopologyAwareGPUs(t *testing.T) {
	tests := []struct {
		name    string
		nodes   []Node
		taken   []int // GPUs of node 0 taken first, one whole GPU each
		num     int
		want    []int // GPUs, in order
		wantOne bool  // any GPUs, but all in one domain
	}{
		{name: "fits one domain, best fit", nodes: []Node{nvlNode("a", "x", "x", "x", "x", "y", "y", "y", "y")}, taken: []int{0}, num: 3, want: []int{1, 2, 3}},
		{name: "smaller domain preferred", nodes: []Node{nvlNode("a", "x", "x", "x", "x", "y", "y", "y", "y")}, taken: []int{5}, num: 2, want: []int{4, 6}},
		{name: "keeps the domain that fits", nodes: []Node{nvlNode("a", "x", "x", "x", "x", "y", "y", "y", "y")}, taken: []int{0, 5}, num: 3, wantOne: true},
		{name: "spans fewest domains", nodes: []Node{nvlNode("a", "x", "x", "y", "y", "z", "z", "z", "w")}, taken: []int{2}, num: 4, want: []int{4, 5, 6, 0}},
		{name: "no labels takes first free", nodes: []Node{gpuNode("a", "H100", 8, 81920, "9.0")}, taken: []int{1}, num: 3, want: []int{0, 2, 3}},
	}
	for _, tc := range tests {
		for _, pol := range PolicyNames {
			t.Run(tc.name+"/"+pol, func(t *testing.T) {
				c, _ := NewCluster(tc.nodes)
				one := Request{NumGPU: 1}
				for _, g := range tc.taken {
					if err := c.Bind(Decision{Node: 0, GPUs: []int{g}, MilliPerGPU: 1000}, one); err != nil {
						t.Fatal(err)
					}
				}
				q := Request{NumGPU: tc.num}
				p, _ := NewPolicy(pol, c.Workload([]Request{q}))
				d, err := New(c, p, rand.New(rand.NewPCG(1, 2))).Place(q)
				if err != nil {
					t.Fatal(err)
				}
				if tc.wantOne {
					doms := map[string]bool{}
					for _, g := range d.GPUs {
						doms[c.Node(0).GPUs[g].Labels[LabelNVLinkDomain]] = true
					}
					if len(doms) != 1 {
						t.Fatalf("GPUs %v span %d domains", d.GPUs, len(doms))
					}
					return
				}
				if !slices.Equal(d.GPUs, tc.want) {
					t.Fatalf("GPUs = %v, want %v", d.GPUs, tc.want)
				}
			})
		}
	}
}

// TestGpudPrefersOneNVLinkDomain: of two nodes with four free GPUs each, a
// 4-GPU pod goes to the one where the four share an NVLink domain.
func TestGpudPrefersOneNVLinkDomain(t *testing.T) {
	split := nvlNode("split", "x", "x", "x", "x", "y", "y", "y", "y")
	whole := nvlNode("whole", "x", "x", "x", "x", "y", "y", "y", "y")
	for seed := range uint64(8) {
		c, _ := NewCluster([]Node{split, whole})
		one := Request{NumGPU: 1}
		for _, b := range []Decision{{Node: 0, GPUs: []int{0, 1, 4, 5}}, {Node: 1, GPUs: []int{0, 1, 2, 3}}} {
			if err := c.Bind(b, Request{NumGPU: 4}); err != nil {
				t.Fatal(err)
			}
		}
		q := Request{NumGPU: 4}
		p, _ := NewPolicy(PolicyGpud, c.Workload([]Request{q, one}))
		d, err := New(c, p, rand.New(rand.NewPCG(seed, 1))).Decide(q)
		if err != nil || d.Node != 1 || !slices.Equal(d.GPUs, []int{4, 5, 6, 7}) {
			t.Fatalf("seed %d: Decide() = %+v, %v; want node 1 GPUs 4-7", seed, d, err)
		}
	}
}

func TestRequestMilli(t *testing.T) {
	tests := []struct {
		name     string
		req      Request
		per, tot int64
	}{
		{"cpu only", Request{CPUMilli: 1000}, 0, 0},
		{"whole", Request{NumGPU: 4}, 1000, 4000},
		{"fraction", Request{NumGPU: 1, GPUMilli: 250}, 250, 250},
		{"mig", Request{MIGProfile: "3g.40gb"}, 500, 500},
		{"mig alias", Request{MIGProfile: "1g.5gb", NumGPU: 3}, 125, 125},
		{"memory and cores", Request{NumGPU: 1, GPUMemoryMiB: 4096, GPUCoresPct: 20}, 200, 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if per, tot := tc.req.MilliPerGPUOf(), tc.req.TotalGPUMilli(); per != tc.per || tot != tc.tot {
				t.Fatalf("MilliPerGPUOf, TotalGPUMilli = %d, %d; want %d, %d", per, tot, tc.per, tc.tot)
			}
		})
	}
}
