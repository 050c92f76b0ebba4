package kubectlgpud

import (
	"fmt"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpud/gpud/internal/testkit/schedtest"
	"github.com/gpud/gpud/pkg/dra"
)

// benchCluster is n simulated DGX H100 nodes (8 GPUs each, dynamic MIG
// placements published) with every GPU held by one pod's claim.
func benchCluster(b *testing.B, n int) *Snapshot {
	b.Helper()
	s := &Snapshot{Classes: schedtest.ShippedClasses(b)}
	st := schedtest.SimState(b, "dgx-h100", "node-0")
	for i := range n {
		name := fmt.Sprintf("node-%d", i)
		_, sl := schedtest.Publish(b, name, st)
		s.Slices = append(s.Slices, sl...)
		s.Nodes = append(s.Nodes, schedtest.Node(name, nil))
		for g := range 8 {
			p := pod("bench", fmt.Sprintf("p-%d-%d", i, g), name, "q", "")
			c := claim("bench", p.Name+"-gpu", schedtest.Exact("r", "gpu.gpud.io", 1))
			c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
				{Request: "r", Driver: dra.DriverName, Pool: name, Device: dra.GPUDeviceName(g)}}}}
			c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: p.Name, UID: p.UID}}
			usesClaim(p, c)
			s.Pods = append(s.Pods, p)
			s.Claims = append(s.Claims, c)
		}
	}
	return s
}

// BenchmarkCommands measures the pure part of nodes and pods (what runs
// after the lists): per cluster size in nodes of 8 GPUs.
func BenchmarkCommands(b *testing.B) {
	for _, n := range []int{16, 128} {
		s := benchCluster(b, n)
		b.Run(fmt.Sprintf("nodes/n=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if got := Nodes(s, DefaultResourcePrefix); len(got) != n {
					b.Fatalf("%d nodes", len(got))
				}
			}
		})
		b.Run(fmt.Sprintf("pods/n=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if got := Pods(s, DefaultResourcePrefix); len(got) != 8*n {
					b.Fatalf("%d pods", len(got))
				}
			}
		})
	}
}
