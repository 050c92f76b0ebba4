package allocator

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestCandidatesMatchSubCluster: an allocator limited to some nodes
// (SetCandidates) decides as an allocator on a cluster of those nodes
// alone, for policies whose scores do not depend on the workload, with the
// same tie draws, and counts only those nodes when nothing fits.
func TestCandidatesMatchSubCluster(t *testing.T) {
	for seed := range uint64(30) {
		rng := rand.New(rand.NewPCG(seed, 9))
		nodes := randomCluster(rng)
		c, err := NewCluster(nodes)
		if err != nil {
			t.Fatal(err)
		}
		held := map[int][]boundReq{} // what each node of c holds
		for _, pol := range []string{PolicyBestFit, PolicyGpuPacking, PolicyDotProd} {
			p, err := NewPolicy(pol, c.Workload(nil))
			if err != nil {
				t.Fatal(err)
			}
			warm := New(c, p, nil)
			for step := range 20 {
				mask := make([]bool, c.Len())
				var sub []Node
				var index []int // sub-cluster node -> node
				for i := range mask {
					if mask[i] = rng.IntN(3) > 0; mask[i] {
						sub = append(sub, nodes[i])
						index = append(index, i)
					}
				}
				if err := warm.SetCandidates(mask); err != nil {
					t.Fatal(err)
				}
				q := randomRequest(rng)
				warm.SetRand(rand.New(rand.NewPCG(uint64(step), 1)))
				dw, errw := warm.Decide(q)
				got := fmt.Sprint(dw, errw)
				want := "no candidates"
				if len(sub) > 0 {
					sc, err := NewCluster(sub)
					if err != nil {
						t.Fatal(err)
					}
					// The sub-cluster holds what the nodes hold.
					for k, i := range index {
						for _, b := range held[i] {
							b.d.Node = k
							if err := sc.Bind(b.d, b.q); err != nil {
								t.Fatal(err)
							}
						}
					}
					sp, err := NewPolicy(pol, sc.Workload(nil))
					if err != nil {
						t.Fatal(err)
					}
					df, errf := New(sc, sp, rand.New(rand.NewPCG(uint64(step), 1))).Decide(q)
					if errf == nil {
						df.Node = index[df.Node]
					}
					want = fmt.Sprint(df, errf)
					var nw, nf *NoFitError
					if errors.As(errw, &nw) && errors.As(errf, &nf) && fmt.Sprint(nw.Counts) != fmt.Sprint(nf.Counts) {
						t.Fatalf("seed %d %s step %d: counts %v, sub-cluster's %v", seed, pol, step, nw.Counts, nf.Counts)
					}
				} else if errw == nil {
					t.Fatalf("seed %d %s step %d: chose %+v with no candidate", seed, pol, step, dw)
				}
				if len(sub) > 0 && got != want {
					t.Fatalf("seed %d %s step %d %+v: with candidates %s; sub-cluster %s", seed, pol, step, q, got, want)
				}
				if errw == nil && rng.IntN(2) == 0 {
					if err := c.Bind(dw, q); err != nil {
						t.Fatal(err)
					}
					held[dw.Node] = append(held[dw.Node], boundReq{dw, q})
				}
			}
		}
	}
	if err := New(&Cluster{}, nil, nil).SetCandidates([]bool{true}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("SetCandidates of the wrong length: %v, want ErrInvalid", err)
	}
}

type boundReq struct {
	d Decision
	q Request
}
