package scheduler

import (
	"fmt"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// BenchmarkSnapshot measures what the runtime adds to a decision: listing
// merged with the assume cache, the view, and claim resolution for every
// pod, on nodes×8 L40S GPUs with as many pending pods (one whole-GPU claim
// each) and as many bound pods.
func BenchmarkSnapshot(b *testing.B) {
	for _, nodes := range []int{16, 128} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			in := inputs{classes: []*resourceapi.DeviceClass{gpuClass()}}
			for i := range nodes {
				name := fmt.Sprintf("n%d", i)
				in.nodes = append(in.nodes, kubeNode(name))
				in.slices = append(in.slices, nodeSlices(b, "pcie-l40s", name)...)
			}
			for i := range nodes * 8 {
				c := wholeClaim("ns", fmt.Sprintf("c%d", i), "gpu.gpud.io")
				in.claims = append(in.claims, c)
				p := claimPod("ns", fmt.Sprintf("p%d", i), t0, c.Name)
				if i%2 == 0 {
					p.Spec.NodeName = "n0"
				}
				in.pods = append(in.pods, p)
			}
			s, err := New(Config{Client: fake.NewClientset(), Decider: placeAll{}})
			if err != nil {
				b.Fatal(err)
			}
			// A few claims written by "this process", newer than the informer's.
			for _, c := range in.claims[:8] {
				w := c.DeepCopy()
				w.ResourceVersion = "99"
				w.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "x", UID: "y"}}
				s.assumed.claim(w, t0)
			}
			b.ReportAllocs()
			for b.Loop() {
				in2 := in
				in2.claims = s.assumed.mergeClaims(in.claims, t0)
				sn := s.snap.build(in2, t0)
				if len(sn.Pending) != nodes*4 {
					b.Fatalf("pending %d", len(sn.Pending))
				}
			}
		})
	}
}
