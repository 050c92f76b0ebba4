package decide

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpud/gpud/internal/testkit/schedtest"
	"github.com/gpud/gpud/pkg/allocator/jobs"
	"github.com/gpud/gpud/pkg/scheduler/plan"
)

// nicDriver publishes one RDMA NIC per node it is given, as another DRA
// driver next to gpud would.
const nicDriver = "nic.example.com"

func (e *env) nics(nodes ...string) {
	e.classes = append(e.classes, &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: nicDriver},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: `device.driver == "` + nicDriver + `"`}}}}})
	for _, n := range nodes {
		node := n
		e.slices = append(e.slices, &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: n + "-nic"},
			Spec: resourceapi.ResourceSliceSpec{Driver: nicDriver, NodeName: &node,
				Pool:    resourceapi.ResourcePool{Name: n, ResourceSliceCount: 1},
				Devices: []resourceapi.Device{{Name: "nic-0"}}}})
	}
}

// withClaim gives a pod a second claim holding reqs.
func withClaim(name string, reqs ...resourceapi.DeviceRequest) podOpt {
	return func(x *plan.Pod) {
		c := &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: x.Pod.Name + "-" + name, Namespace: "default", UID: types.UID("claim-uid-" + x.Pod.Name + "-" + name)},
			Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: reqs}},
		}
		x.Claims = append(x.Claims, c)
		x.Pod.Spec.ResourceClaims = append(x.Pod.Spec.ResourceClaims, corev1.PodResourceClaim{Name: name, ResourceClaimName: &c.Name})
	}
}

// resultsOfBind lists a bind's device results as "request=pool/device".
func resultsOfBind(b plan.Bind) []string {
	var out []string
	for _, a := range b.Allocations {
		for _, r := range a.Result.Devices.Results {
			out = append(out, r.Request+"="+r.Pool+"/"+r.Device)
		}
	}
	return out
}

// A pod asking a GPU (gpud's claim) and an RDMA NIC (another driver's
// claim) goes where both are: gpud's policy places the GPU, kube-scheduler's
// allocator the NIC; a second such pod waits once the only NIC is taken.
func TestOtherDriverNextToGPU(t *testing.T) {
	e := newEnv(t)
	e.node("a", "dgx-h100", nil)
	e.node("b", "dgx-h100", nil)
	e.nics("b")
	e.pod("train", []resourceapi.DeviceRequest{gpus(2)}, withClaim("nic", exact("nic", nicDriver, 1)))
	p := e.decide(Config{})
	b := bindOf(t, p, "train")
	if b.Node != "b" || len(b.Allocations) != 2 || !strings.Contains(strings.Join(resultsOfBind(b), " "), "nic=b/nic-0") {
		t.Fatalf("train on %s with %v, want node b with its NIC", b.Node, resultsOfBind(b))
	}
	e.apply(p)

	e.pod("second", []resourceapi.DeviceRequest{gpus(1)}, withClaim("nic", exact("nic", nicDriver, 1)))
	p = e.decide(Config{})
	pd, ok := pendingOf(p, "second")
	if !ok || pd.Code != jobs.CodeCapacity || !strings.Contains(pd.Message, "default/second-nic") {
		t.Fatalf("second: pending %v %+v, want capacity naming its NIC claim", ok, pd)
	}
}

// allocationMode All takes every matching device of one node; with one GPU
// of node a in use it lands on node b, and b's GPUs are then taken for
// gpud's own later placements.
func TestOtherAllocationModeAll(t *testing.T) {
	e := newEnv(t)
	e.node("a", "dgx-h100", nil)
	e.node("b", "dgx-h100", nil)
	e.pod("one", []resourceapi.DeviceRequest{gpus(1)})
	p := e.decide(Config{})
	e.apply(p)
	busy := bindOf(t, p, "one").Node

	all := gpus(0)
	all.Exactly.AllocationMode, all.Exactly.Count = resourceapi.DeviceAllocationModeAll, 0
	e.pod("all", []resourceapi.DeviceRequest{all})
	p = e.decide(Config{})
	b := bindOf(t, p, "all")
	if b.Node == busy || len(resultsOfBind(b)) != 8 {
		t.Fatalf("all: on %s with %d devices, want the other node than %s with 8", b.Node, len(resultsOfBind(b)), busy)
	}
	e.apply(p)

	e.pod("after", []resourceapi.DeviceRequest{gpus(1)})
	p = e.decide(Config{})
	if got := bindOf(t, p, "after").Node; got != busy {
		t.Fatalf("after: on %s, want %s (the All pod holds every GPU of the other node)", got, busy)
	}
}

// A prioritized list falls back to its second choice; matchAttribute
// across two requests keeps both GPUs in one NVLink domain.
func TestOtherPrioritizedListAndMatchAcrossRequests(t *testing.T) {
	e := newEnv(t)
	e.node("a", "dgx-h100", nil)
	e.pod("fa", []resourceapi.DeviceRequest{{Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{
		{Name: "sixteen", DeviceClassName: "gpu.gpud.io", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 16},
		{Name: "two", DeviceClassName: "gpu.gpud.io", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 2},
	}}})
	domain := resourceapi.FullyQualifiedName("gpu.gpud.io/nvlinkDomain")
	pair := e.pod("pair", []resourceapi.DeviceRequest{gpus(1), exact("peer", "gpu.gpud.io", 1)})
	pair.Claims[0].Spec.Devices.Requests[0].Name = "first"
	pair.Claims[0].Spec.Devices.Constraints = []resourceapi.DeviceConstraint{{MatchAttribute: &domain}}
	p := e.decide(Config{})
	if got := strings.Join(resultsOfBind(bindOf(t, p, "fa")), " "); strings.Count(got, "gpu/two=") != 2 {
		t.Fatalf("fa got %q, want two devices for subrequest gpu/two", got)
	}
	if got := resultsOfBind(bindOf(t, p, "pair")); len(got) != 2 {
		t.Fatalf("pair got %v, want two devices", got)
	}
	// No device is given twice between the two pods and gpud's checks.
	seen := map[string]bool{}
	for _, b := range p.Binds {
		for _, r := range resultsOfBind(b) {
			_, dev, _ := strings.Cut(r, "=")
			if seen[dev] {
				t.Fatalf("%s allocated twice: %v", dev, p.Binds)
			}
			seen[dev] = true
		}
	}
}

// A prioritized list naming a DeviceClass that does not exist is invalid
// as written, not short of room.
func TestOtherUnknownClassInvalid(t *testing.T) {
	e := newEnv(t)
	e.node("a", "dgx-h100", nil)
	e.pod("bad", []resourceapi.DeviceRequest{{Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{
		{Name: "x", DeviceClassName: "no-such-class", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}}}})
	p := e.decide(Config{})
	pd, ok := pendingOf(p, "bad")
	if !ok || pd.Code != plan.CodeInvalid || !strings.Contains(pd.Message, `DeviceClass "no-such-class" not found`) {
		t.Fatalf("bad: pending %v %+v, want invalid naming the class", ok, pd)
	}
}

// Nodes without gpud's devices take pods that need none: a CPU-only pod
// and a pod whose only claim is another driver's device, while GPU pods
// still go to the GPU node.
func TestNodesWithoutGPUs(t *testing.T) {
	e := newEnv(t)
	e.node("a-gpu", "dgx-h100", nil)
	e.nodes = append(e.nodes, schedtest.Node("z-cpu", nil))
	e.nics("z-cpu")
	e.pod("web", nil)
	e.pod("nic-only", nil, withClaim("nic", exact("nic", nicDriver, 1)))
	e.pod("train", []resourceapi.DeviceRequest{gpus(1)})
	p := e.decide(Config{})
	got := bindsOf(p)
	for pod, want := range map[string]string{"web": "z-cpu", "nic-only": "z-cpu", "train": "a-gpu"} {
		if got[pod] != want {
			t.Errorf("%s on %q, want %s (binds %v, pending %+v)", pod, got[pod], want, got, p.Pending)
		}
	}
}
