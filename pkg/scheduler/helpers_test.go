package scheduler

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"

	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/dra"
	"github.com/gpud/gpud/pkg/scheduler/plan"
	"github.com/gpud/gpud/pkg/scheduler/view"
	"github.com/gpud/gpud/pkg/simnode"
)

// t0 is the tests' clock.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// nodeSlices publishes a simulated node (no MIG) as the DRA driver does.
func nodeSlices(t testing.TB, profile, name string) []*resourceapi.ResourceSlice {
	t.Helper()
	n := simnode.NewBuiltin(profile, simnode.WithNodeName(name)) // UUIDs unique per node, as real GPUs'
	t.Cleanup(n.Close)
	inv, err := discovery.New(n, name, nil).Inventory()
	if err != nil {
		t.Fatalf("discovery: %v", err)
	}
	pub, err := dra.Build(name, dra.NodeState{Inventory: inv, MIG: map[string]dra.MIGCatalog{}})
	if err != nil {
		t.Fatalf("dra.Build: %v", err)
	}
	pool := pub.Resources.Pools[name]
	var out []*resourceapi.ResourceSlice
	for i, s := range pool.Slices {
		out = append(out, &resourceapi.ResourceSlice{
			// A UID and resourceVersion, as the informer's objects have
			// (the view's pool cache keys on them).
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", name, i), UID: types.UID(fmt.Sprintf("slice-%s-%d", name, i)), ResourceVersion: "1"},
			Spec: resourceapi.ResourceSliceSpec{Driver: dra.DriverName, NodeName: ptr.To(name), Devices: s.Devices, SharedCounters: s.SharedCounters,
				Pool: resourceapi.ResourcePool{Name: name, Generation: 1, ResourceSliceCount: int64(len(pool.Slices))}},
		})
	}
	return out
}

func kubeNode(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("512Gi")}}}
}

// gpuClass is deploy/dra's gpu.gpud.io class (whole GPUs).
func gpuClass() *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu.gpud.io"}, Spec: resourceapi.DeviceClassSpec{
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: `device.driver == "gpu.gpud.io" && device.attributes["gpu.gpud.io"].type == "gpu"`}}}}}
}

// wholeClaim asks for one whole GPU of class.
func wholeClaim(ns, name, class string) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("claim-" + name), ResourceVersion: "10"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}}}}}}
}

// claimPod is a pending pod of this scheduler using claims by name.
func claimPod(ns, name string, created time.Time, claims ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("pod-" + name), CreationTimestamp: metav1.NewTime(created)},
		Spec: corev1.PodSpec{SchedulerName: DefaultSchedulerName, Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
	for _, c := range claims {
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: c, ResourceClaimName: ptr.To(c)})
	}
	return p
}

// placeAll is a decider that places every pending pod on the snapshot's
// view (no CPU, gangs or priority): enough to drive the runtime.
type placeAll struct{ gang string }

func (d placeAll) Decide(s *plan.Snapshot) plan.Plan {
	var out plan.Plan
	// Later pods see earlier ones' devices taken; the view is left as it
	// came (plan.Decider: the next cycle's view starts from its usage).
	defer func() {
		for _, b := range out.Binds {
			for _, a := range b.Allocations {
				s.View.Release(a.Result)
			}
		}
	}()
	for _, p := range s.Pending {
		items, _, err := s.View.Demand(p.Claims)
		if err != nil {
			out.Pending = append(out.Pending, plan.Pending{Pod: p, Code: plan.CodeInvalid, Message: err.Error()})
			continue
		}
		allocs, err := s.View.Place(items, view.Options{Policy: s.Policy})
		if err != nil {
			out.Pending = append(out.Pending, plan.Pending{Pod: p, Code: "capacity", Message: err.Error()})
			continue
		}
		if err := s.View.Assume(allocs...); err != nil {
			out.Pending = append(out.Pending, plan.Pending{Pod: p, Code: plan.CodeInvalid, Message: err.Error()})
			continue
		}
		out.Binds = append(out.Binds, plan.Bind{Pod: p, Node: allocs[0].Node, Allocations: allocs, Gang: d.gang})
	}
	return out
}

// testScheduler is a scheduler on a fake clientset holding objs, with a
// fake event recorder; binds are recorded, not stored.
type testScheduler struct {
	*Scheduler
	client   *fake.Clientset
	events   *events.FakeRecorder
	bindings []string // "ns/pod=node"
}

func newTestScheduler(t *testing.T, d plan.Decider, objs ...runtime.Object) *testScheduler {
	t.Helper()
	client := fake.NewClientset(objs...)
	s, err := New(Config{Client: client, Decider: d, Now: func() time.Time { return t0 }, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	ts := &testScheduler{Scheduler: s, client: client, events: events.NewFakeRecorder(100)}
	s.recorder = ts.events
	// The API server bumps resourceVersion on every write; the fake
	// tracker does not.
	rv := 100
	client.PrependReactor("update", "resourceclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
		rv++
		a.(k8stesting.UpdateAction).GetObject().(*resourceapi.ResourceClaim).ResourceVersion = fmt.Sprint(rv)
		return false, nil, nil
	})
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "binding" {
			return false, nil, nil
		}
		b := a.(k8stesting.CreateAction).GetObject().(*corev1.Binding)
		ts.bindings = append(ts.bindings, b.Namespace+"/"+b.Name+"="+b.Target.Name)
		return true, b, nil
	})
	return ts
}

// execute is Scheduler.execute, returning once the binds it handed to
// the workers are done.
func (ts *testScheduler) execute(ctx context.Context, sn *snapshot, p plan.Plan) {
	ts.Scheduler.execute(ctx, sn, p)
	ts.binds.wait()
}

// cycleOn is Scheduler.cycleOn, returning once the binds it handed to the
// workers are done.
func (ts *testScheduler) cycleOn(ctx context.Context, in inputs, now time.Time) {
	ts.Scheduler.cycleOn(ctx, in, now)
	ts.binds.wait()
}

// claimFromAPI reads a claim back from the fake clientset.
func (ts *testScheduler) claimFromAPI(t *testing.T, ns, name string) *resourceapi.ResourceClaim {
	t.Helper()
	c, err := ts.client.ResourceV1().ResourceClaims(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// snapshotOf builds a snapshot straight from objects (no informers).
func (ts *testScheduler) snapshotOf(in inputs) *snapshot {
	in.claims = ts.assumed.mergeClaims(in.claims, t0)
	return ts.snap.build(in, t0)
}

func metricValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
