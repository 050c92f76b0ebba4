package view

import (
	"fmt"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"
)

// BenchmarkBuildDemandPlace is one scheduling decision as the loop makes
// it: a fresh view of n dgx-h100 nodes (half their GPUs shared by
// fractions), a 20Gi fraction's claim, placed.
func BenchmarkBuildDemandPlace(b *testing.B) {
	for _, n := range []int{8, 64} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			st := simState(b, "dgx-h100", "bench")
			c := &cluster{pub: nil}
			c.in.Classes = shippedClasses(b)
			for i := range n {
				name := fmt.Sprintf("node-%03d", i)
				_, sl := published(b, name, st)
				c.in.Slices = append(c.in.Slices, sl...)
				c.in.Nodes = append(c.in.Nodes, k8sNode(name))
			}
			for i := range n * 4 {
				v := c.build(b)
				allocs, err := place(b, v, Options{}, claim(fmt.Sprint("pre", i), fraction("gpu", "20Gi", "")))
				if err != nil {
					b.Fatal(err)
				}
				c.commit(b, allocs)
			}
			for _, cached := range []bool{false, true} {
				b.Run(fmt.Sprint("matchcache=", cached), func(b *testing.B) {
					in := c.in
					if cached {
						// Warm the caches, as a running loop has them: the
						// first, cold decision would otherwise weigh on
						// ns/op by how few iterations a noisy machine runs.
						in.Matches, in.CEL = NewMatchCache(), cel.NewCache(256, celFeatures)
						v, _ := Build(in)
						if _, err := place(b, v, Options{}, claim("new", fraction("gpu", "20Gi", ""))); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportAllocs()
					for b.Loop() {
						v, _ := Build(in)
						if _, err := place(b, v, Options{}, claim("new", fraction("gpu", "20Gi", ""))); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		})
	}
}

var _ = resourceapi.DriverNameMaxLength

// BenchmarkPlaceCycle is the placements of one cycle on one view: n
// dgx-h100 nodes, 64 fraction claims placed one after another, each assumed
// before the next (as the loop does), with warm selector caches.
func BenchmarkPlaceCycle(b *testing.B) {
	for _, n := range []int{64, 256} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			st := simState(b, "dgx-h100", "bench")
			c := &cluster{pub: nil}
			c.in.Classes = shippedClasses(b)
			for i := range n {
				name := fmt.Sprintf("node-%03d", i)
				_, sl := published(b, name, st)
				c.in.Slices = append(c.in.Slices, sl...)
				c.in.Nodes = append(c.in.Nodes, k8sNode(name))
			}
			in := c.in
			in.Matches, in.CEL = NewMatchCache(), cel.NewCache(256, celFeatures)
			claims := make([]*resourceapi.ResourceClaim, 64)
			for i := range claims {
				claims[i] = claim(fmt.Sprint("c", i), fraction("gpu", fmt.Sprintf("%dGi", 5+i%30), ""))
			}
			b.ReportAllocs()
			for b.Loop() {
				v, _ := Build(in)
				for _, cl := range claims {
					allocs, err := place(b, v, Options{}, cl)
					if err != nil {
						b.Fatal(err)
					}
					if err := v.Assume(allocs...); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
