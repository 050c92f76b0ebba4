package allocator

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// randomCluster builds a small heterogeneous cluster.
func randomCluster(rng *rand.Rand) []Node {
	models := []string{"T4", "V100M16", "V100M32", "G2"}
	nodes := make([]Node, 5+rng.IntN(20))
	for i := range nodes {
		nodes[i] = node(fmt.Sprint("n", i), int64(8+rng.IntN(120))*1000, models[rng.IntN(len(models))], rng.IntN(9))
		nodes[i].MemoryMiB = int64(64+rng.IntN(512)) * 1024
		mig := rng.IntN(6) == 0
		mem, cc := []int64{0, 16384, 32768, 81920}[rng.IntN(4)], []string{"", "7.0", "8.0", "9.0"}[rng.IntN(4)]
		for g := range nodes[i].GPUs {
			gpu := &nodes[i].GPUs[g]
			gpu.Unhealthy = rng.IntN(20) == 0
			gpu.MemoryMiB, gpu.ComputeCapability = mem, cc
			switch {
			case mig:
				gpu.Labels = map[string]string{LabelMIG: "true"}
			case rng.IntN(2) == 0:
				gpu.Labels = map[string]string{LabelNVLinkDomain: fmt.Sprint(g / 4)}
			}
		}
	}
	return nodes
}

func randomRequest(rng *rand.Rand) Request {
	q := Request{CPUMilli: int64(rng.IntN(16000)), MemoryMiB: int64(rng.IntN(64 * 1024))}
	switch rng.IntN(6) {
	case 0:
	case 1:
		q.NumGPU, q.GPUMilli = 1, int64(1+rng.IntN(999))
	case 4:
		q.NumGPU, q.GPUMemoryMiB, q.GPUCoresPct = 1, int64(rng.IntN(20000)), int64(rng.IntN(60))
	case 5:
		q.MIGProfile = []string{"1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}[rng.IntN(5)]
	default:
		q.NumGPU = []int{1, 1, 2, 4, 8}[rng.IntN(5)]
	}
	if rng.IntN(4) == 0 {
		q.Models = ParseModels([]string{"T4", "V100M16|V100M32", "G2|T4"}[rng.IntN(3)])
	}
	if rng.IntN(6) == 0 {
		q.MinGPUMemoryMiB = 30000
	}
	if rng.IntN(6) == 0 {
		q.MinComputeCapability = "8.0"
	}
	return q
}

// TestPlacementInvariants places random requests with every policy and
// checks: no GPU ever goes above 1000m used or below 0, CPU and memory never
// go negative, decisions name distinct healthy GPUs of allowed models, a
// no-fit really fits nowhere, and a seed reproduces its decisions.
func TestPlacementInvariants(t *testing.T) {
	for seed := range uint64(20) {
		for _, pol := range PolicyNames {
			t.Run(fmt.Sprintf("seed=%d/%s", seed, pol), func(t *testing.T) {
				run := func() []Decision {
					rng := rand.New(rand.NewPCG(seed, 99))
					nodes := randomCluster(rng)
					c, err := NewCluster(nodes)
					if err != nil {
						t.Fatal(err)
					}
					reqs := make([]Request, 300)
					for i := range reqs {
						reqs[i] = randomRequest(rng)
					}
					p, _ := NewPolicy(pol, c.Workload(reqs))
					a := New(c, p, rand.New(rand.NewPCG(seed, 7)))
					var out []Decision
					for _, q := range reqs {
						d, err := a.Place(q)
						if errors.Is(err, ErrNoFit) {
							r, _ := c.normalize(q)
							for i := range c.state {
								if fitsAnyVariant(a, &c.state[i], &r) {
									t.Fatalf("no fit for %+v but node %d fits", q, i)
								}
							}
							continue
						}
						if err != nil {
							t.Fatal(err)
						}
						checkDecision(t, c, d, q)
						out = append(out, d)
					}
					for i := range c.state {
						s := &c.state[i]
						if s.cpuFree < 0 || s.memFree < 0 {
							t.Fatalf("node %d: cpu %d mem %d", i, s.cpuFree, s.memFree)
						}
						for _, f := range s.gpuFree {
							if f < 0 || f > MilliPerGPU {
								t.Fatalf("node %d: GPU free %d outside 0..1000", i, f)
							}
						}
					}
					return out
				}
				a, b := run(), run()
				if !slices.EqualFunc(a, b, func(x, y Decision) bool { return x.Node == y.Node && slices.Equal(x.GPUs, y.GPUs) }) {
					t.Fatal("same seed gave different decisions")
				}
			})
		}
	}
}

func checkDecision(t *testing.T, c *Cluster, d Decision, q Request) {
	t.Helper()
	n := c.Node(d.Node)
	if want := q.NumGPU; len(d.GPUs) != want && (q.MIGProfile == "" || len(d.GPUs) != 1) {
		t.Fatalf("decision %+v for %+v: wrong GPU count", d, q)
	}
	for i, g := range d.GPUs {
		gpu := n.GPUs[g]
		if slices.Contains(d.GPUs[:i], g) || gpu.Unhealthy {
			t.Fatalf("decision %+v: GPU %d repeated or unhealthy", d, g)
		}
		if len(q.Models) > 0 && !slices.Contains(q.Models, gpu.Model) {
			t.Fatalf("decision %+v: model %s not in %v", d, gpu.Model, q.Models)
		}
		if gpu.MemoryMiB < q.MinGPUMemoryMiB || (q.MinComputeCapability != "" && gpu.ComputeCapability < q.MinComputeCapability) {
			t.Fatalf("decision %+v for %+v: GPU %+v below the minimums", d, q, gpu)
		}
		if (gpu.Labels[LabelMIG] == "true") != (q.MIGProfile != "") {
			t.Fatalf("decision %+v for %+v: GPU %+v in the wrong MIG mode", d, q, gpu)
		}
	}
}

// fitsAnyVariant reports whether r fits node s as Decide sizes it there.
func fitsAnyVariant(a *Allocator, s *nodeState, r *request) bool {
	if r.gmem > 0 && !s.memUniform {
		_, _, why := a.bestVariant(s, r)
		return why == ""
	}
	rn, ok := atNode(s, r)
	return ok && fit(s, &rn) == ""
}

// TestCachedVerdictsMatchFresh: an allocator whose per-node verdicts are
// cached from earlier decisions decides exactly as a fresh one on the
// same cluster state: the same node and GPUs, or the same refusal with the
// same per-reason node counts. Requests repeat with only their memory
// changed, which cached verdicts leave out and the scan checks apart.
func TestCachedVerdictsMatchFresh(t *testing.T) {
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 7))
		c, err := NewCluster(randomCluster(rng))
		if err != nil {
			t.Fatal(err)
		}
		rank := rng.Perm(c.Len())
		for _, pol := range PolicyNames {
			if pol == PolicyRandom {
				continue // its ties draw from the rng, which a fresh allocator restarts
			}
			p, err := NewPolicy(pol, c.Workload(nil))
			if err != nil {
				t.Fatal(err)
			}
			warm := New(c, p, rand.New(rand.NewPCG(1, 1)))
			if err := warm.SetTieOrder(rank); err != nil {
				t.Fatal(err)
			}
			var placed []struct {
				d Decision
				q Request
			}
			var prev Request
			for step := range 60 {
				q := randomRequest(rng)
				switch step % 3 {
				case 1:
					q = prev
					q.MemoryMiB = int64(rng.IntN(600 * 1024)) // beyond some nodes' memory
				case 2:
					// Short of both CPU and memory somewhere: CPU is the reason.
					q.CPUMilli, q.MemoryMiB = int64(rng.IntN(200_000)), int64(rng.IntN(600*1024))
				}
				prev = q
				fresh := New(c, p, rand.New(rand.NewPCG(1, 1)))
				if err := fresh.SetTieOrder(rank); err != nil {
					t.Fatal(err)
				}
				dw, errw := warm.Decide(q)
				df, errf := fresh.Decide(q)
				if fmt.Sprint(dw, errw) != fmt.Sprint(df, errf) {
					t.Fatalf("seed %d %s step %d %+v: warm %+v, %v; fresh %+v, %v", seed, pol, step, q, dw, errw, df, errf)
				}
				var nw, nf *NoFitError
				if errors.As(errw, &nw) && errors.As(errf, &nf) {
					if fmt.Sprint(nw.Counts) != fmt.Sprint(nf.Counts) {
						t.Fatalf("seed %d %s step %d: counts warm %v fresh %v", seed, pol, step, nw.Counts, nf.Counts)
					}
					if want := filterCounts(warm, q); fmt.Sprint(nw.Counts) != fmt.Sprint(want) {
						t.Fatalf("seed %d %s step %d %+v: counts %v, the filter says %v", seed, pol, step, q, nw.Counts, want)
					}
				}
				switch {
				case errw == nil && rng.IntN(3) > 0:
					if err := c.Bind(dw, q); err != nil {
						t.Fatalf("bind %+v: %v", dw, err)
					}
					placed = append(placed, struct {
						d Decision
						q Request
					}{dw, q})
				case len(placed) > 0 && rng.IntN(4) == 0:
					k := rng.IntN(len(placed))
					if err := c.Unbind(placed[k].d, placed[k].q); err != nil {
						t.Fatal(err)
					}
					placed = slices.Delete(placed, k, k+1)
				}
			}
			for _, pl := range placed {
				if err := c.Unbind(pl.d, pl.q); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// filterCounts is the reference for a refusal's counts: each node's reason
// from the filter run on the whole request, memory included.
func filterCounts(a *Allocator, q Request) map[string]int {
	r, err := a.c.normalize(q)
	if err != nil {
		return nil
	}
	out := map[string]int{}
	for i := range a.c.state {
		s := &a.c.state[i]
		var why string
		if r.gmem > 0 && !s.memUniform {
			_, _, why = a.bestVariant(s, &r)
		} else {
			rn, _ := atNode(s, &r)
			why = fit(s, &rn)
		}
		if why != "" {
			out[why]++
		}
	}
	return out
}
