package scheduler

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/dynamic-resource-allocation/deviceclass/extendedresourcecache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// extendedRig is one 4-GPU node whose class serves nvidia.com/gpu, and a
// pending pod asking for 2 of it; the fake API server names created claims
// from generateName as the real one does.
func extendedRig(t *testing.T) (*testScheduler, []runtime.Object, *corev1.Pod) {
	t.Helper()
	base := l40sNode(t)
	for _, o := range base {
		if dc, ok := o.(*resourceapi.DeviceClass); ok {
			dc.Spec.ExtendedResourceName = ptr.To("nvidia.com/gpu")
		}
	}
	pod := claimPod("ns", "p", t0)
	two := resource.MustParse("2")
	pod.Spec.Containers[0].Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{"nvidia.com/gpu": two}, Limits: corev1.ResourceList{"nvidia.com/gpu": two}}
	ts := newTestScheduler(t, placeAll{}, append(base, pod)...)
	classes := extendedresourcecache.NewExtendedResourceCache(klog.Background())
	for _, o := range base {
		if dc, ok := o.(*resourceapi.DeviceClass); ok {
			classes.OnAdd(dc, true)
		}
	}
	ts.snap.classes = classes
	ts.client.PrependReactor("create", "resourceclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
		c := a.(k8stesting.CreateAction).GetObject().(*resourceapi.ResourceClaim)
		if c.Name == "" {
			c.Name = c.GenerateName + "x1"
			c.UID = "uid-x1"
		}
		return false, nil, nil
	})
	return ts, base, pod
}

// TestExecuteExtendedResource: the claim of a pod's nvidia.com/gpu is
// created, allocated and reserved for it, and the pod's status maps its
// container's resource to the claim's request before the Binding.
func TestExecuteExtendedResource(t *testing.T) {
	ts, base, pod := extendedRig(t)
	sn := ts.snapshotOf(viewInputs(t, base, nil, []*corev1.Pod{pod}))
	if len(sn.Pending) != 1 || len(sn.Pending[0].Claims) != 1 {
		t.Fatalf("pending %d, claims of the pod %v", len(sn.Pending), sn.Pending)
	}
	p := ts.cfg.Decider.Decide(sn.Snapshot)
	if len(p.Binds) != 1 {
		t.Fatalf("plan = %+v", p)
	}
	ts.execute(t.Context(), sn, p)
	if len(ts.bindings) != 1 {
		t.Fatalf("bindings = %v", ts.bindings)
	}
	c := ts.claimFromAPI(t, "ns", "p-extended-resources-x1")
	if c.Annotations[resourceapi.ExtendedResourceClaimAnnotation] != "true" || c.Status.Allocation == nil ||
		len(c.Status.Allocation.Devices.Results) != 2 || len(c.Status.ReservedFor) != 1 || c.Status.ReservedFor[0].UID != pod.UID {
		t.Fatalf("claim = %+v", c)
	}
	got, err := ts.client.CoreV1().Pods("ns").Get(t.Context(), "p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := got.Status.ExtendedResourceClaimStatus
	if st == nil || st.ResourceClaimName != c.Name || len(st.RequestMappings) != 1 ||
		st.RequestMappings[0].RequestName != c.Status.Allocation.Devices.Results[0].Request {
		t.Fatalf("pod status extendedResourceClaimStatus = %+v", st)
	}
	// The next cycle (informers not caught up on the pod): the claim is
	// the pod's, not a second one.
	sn = ts.snapshotOf(viewInputs(t, base, []*resourceapi.ResourceClaim{c}, []*corev1.Pod{pod}))
	if len(sn.Pending) != 0 || len(sn.Bound) != 1 || len(sn.Bound[0].Claims) != 1 || sn.Bound[0].Claims[0].Name != c.Name {
		t.Fatalf("next cycle: pending %d, bound %+v", len(sn.Pending), sn.Bound)
	}
}

// TestExtendedResourceRollback: when the Binding fails, the claim created
// for it is deallocated and deleted (the next attempt writes a new one),
// not left holding the GPUs.
func TestExtendedResourceRollback(t *testing.T) {
	ts, base, pod := extendedRig(t)
	ts.client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "binding" {
			return true, nil, errors.New("node is gone")
		}
		return false, nil, nil
	})
	sn := ts.snapshotOf(viewInputs(t, base, nil, []*corev1.Pod{pod}))
	ts.execute(t.Context(), sn, ts.cfg.Decider.Decide(sn.Snapshot))
	list, err := ts.client.ResourceV1().ResourceClaims("ns").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Errorf("claims left after a failed Binding: %+v", list.Items)
	}
}
