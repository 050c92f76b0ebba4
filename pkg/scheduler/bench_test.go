package scheduler

import (
	"fmt"
	"github.com/gpud/gpud/pkg/scheduler/plan"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpud/gpud/pkg/scheduler/decide"
)

// BenchmarkSnapshot measures what the runtime adds to a decision: listing
// merged with the assume cache, the view, and claim resolution for every
// pod, on nodes×4 L40S GPUs with as many pending pods (one whole-GPU claim
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
			// One cycle first: what later cycles carry over (parsed
			// pools, selector matches, models, the rules' NodeInfos,
			// queue charges) is made once, as in a running scheduler.
			if sn, _, err := s.prepare(b.Context(), in, t0); err != nil {
				b.Fatal(err)
			} else {
				s.cfg.Decider.Decide(sn.Snapshot)
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

// BenchmarkCycle measures one whole cycle as a pod arriving alone sees it
// (what sched-bench's feed latency is made of, without the API calls):
// listing is left out; the snapshot, the placement rules over every node
// and bound pod, self-healing's check, the view's metrics, and gpud's
// decision for one pending pod, on nodes×4 L40S
// GPUs with nodes×2 bound pods holding a GPU each. 2,000 nodes is
// make scale-bench's size where a cycle's rebuild, linear in nodes,
// outgrows kube-scheduler's feed latency (docs/scale.md).
//
// pools=off is the same cycle parsing every pool afresh (no
// view.PoolCache), the baseline of the pool cache.
func BenchmarkCycle(b *testing.B) {
	for _, nodes := range []int{64, 167, 2000, 3500} {
		for _, pools := range []bool{true, false} {
			b.Run(fmt.Sprintf("nodes=%d/pools=%s", nodes, map[bool]string{true: "on", false: "off"}[pools]), func(b *testing.B) { benchCycle(b, nodes, 1, pools) })
		}
	}
}

// BenchmarkBurst measures a cycle that places 50 pods at once, as in
// make scale-bench's burst, on 3,500 nodes: the cost of a placement.
func BenchmarkBurst(b *testing.B) {
	b.Run("nodes=3500/pending=50", func(b *testing.B) { benchCycle(b, 3500, 50, true) })
}

func benchCycle(b *testing.B, nodes, pending int, pools bool) {
	{
		{
			in := inputs{classes: []*resourceapi.DeviceClass{gpuClass()}}
			for i := range nodes {
				name := fmt.Sprintf("n%d", i)
				n := kubeNode(name)
				n.Status.Allocatable[corev1.ResourcePods] = resource.MustParse("110")
				in.nodes = append(in.nodes, n)
				in.slices = append(in.slices, nodeSlices(b, "pcie-l40s", name)...)
			}
			for i := range nodes*2 + pending {
				c := wholeClaim("ns", fmt.Sprintf("c%d", i), "gpu.gpud.io")
				p := claimPod("ns", fmt.Sprintf("p%d", i), t0, c.Name)
				if i < nodes*2 {
					node := fmt.Sprintf("n%d", i%nodes)
					p.Spec.NodeName = node
					c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
						Request: "gpu", Driver: "gpu.gpud.io", Pool: node, Device: fmt.Sprintf("gpu-%d", i/nodes)}}}}
					c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: p.Name, UID: p.UID}}
				}
				in.claims = append(in.claims, c)
				in.pods = append(in.pods, p)
			}
			s, err := New(Config{Client: fake.NewClientset(), Decider: decide.New(decide.Config{})})
			if err != nil {
				b.Fatal(err)
			}
			if !pools {
				s.snap.pools = nil
			}
			// A cycle without its API writes: what cycleOn does before
			// and around the decision.
			cycle := func() plan.Plan {
				sn, _, err := s.prepare(b.Context(), in, t0)
				if err != nil {
					b.Fatal(err)
				}
				s.heal(b.Context(), sn, in.slices, t0)
				s.m.observeView(sn.View, sn.claims, sn.skips)
				return s.cfg.Decider.Decide(sn.Snapshot)
			}
			// One cycle first: what later cycles carry over (parsed
			// pools, selector matches, models, usage, the rules'
			// NodeInfos, queue charges) is made once, as in a running
			// scheduler.
			cycle()
			b.ReportAllocs()
			for b.Loop() {
				if p := cycle(); len(p.Binds) != pending {
					b.Fatalf("binds %d, pending %+v", len(p.Binds), p.Pending)
				}
			}
		}
	}
}
