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

	"github.com/gpud/gpud/pkg/scheduler/plan"
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

// TestExtendedResourcePerNode: next to a device-plugin node (allocatable
// nvidia.com/gpu, no slices) the pending pod is offered both ways, a claim
// on the DRA node and none on the plugin node; a Bind on the plugin node
// creates no claim and writes no mapping, and the bound pod then counts
// 2 GPUs held through the plugin.
func TestExtendedResourcePerNode(t *testing.T) {
	ts, base, pod := extendedRig(t)
	dp := kubeNode("dp")
	dp.Status.Allocatable["nvidia.com/gpu"] = resource.MustParse("8")
	if _, err := ts.client.CoreV1().Nodes().Create(t.Context(), dp, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	in := viewInputs(t, append(base, dp), nil, []*corev1.Pod{pod})
	sn := ts.snapshotOf(in)
	if len(sn.Pending) != 1 {
		t.Fatalf("pending %v", sn.Pending)
	}
	p := sn.Pending[0]
	if len(p.Claims) != 0 || p.ExtendedResources != nil || len(p.PerNode) != 2 {
		t.Fatalf("pod claims %v mappings %v, %d per-node entries; want the claim per node only, 2 entries", p.Claims, p.ExtendedResources, len(p.PerNode))
	}
	dra, plug := p.PerNode[0], p.PerNode[1]
	if dra.Nodes["dp"] || len(dra.Pod.Claims) != 1 || len(dra.Pod.ExtendedResources) != 1 || dra.Pod.PluginDevices != 0 {
		t.Errorf("DRA entry: nodes %v claims %d mappings %v plugin devices %d", dra.Nodes, len(dra.Pod.Claims), dra.Pod.ExtendedResources, dra.Pod.PluginDevices)
	}
	if !plug.Nodes["dp"] || len(plug.Nodes) != 1 || len(plug.Pod.Claims) != 0 || plug.Pod.ExtendedResources != nil || plug.Pod.PluginDevices != 2 {
		t.Errorf("plugin entry: nodes %v claims %d mappings %v plugin devices %d", plug.Nodes, len(plug.Pod.Claims), plug.Pod.ExtendedResources, plug.Pod.PluginDevices)
	}
	ts.execute(t.Context(), sn, plan.Plan{Binds: []plan.Bind{{Pod: p, Node: "dp"}}})
	if len(ts.bindings) != 1 || ts.bindings[0] != "ns/p=dp" {
		t.Fatalf("bindings %v, want ns/p=dp", ts.bindings)
	}
	list, err := ts.client.ResourceV1().ResourceClaims("ns").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := ts.client.CoreV1().Pods("ns").Get(t.Context(), "p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 || got.Status.ExtendedResourceClaimStatus != nil {
		t.Errorf("on the plugin node: claims %v, extendedResourceClaimStatus %+v; want none", list.Items, got.Status.ExtendedResourceClaimStatus)
	}
	bound := pod.DeepCopy()
	bound.Spec.NodeName = "dp"
	in.pods = []*corev1.Pod{bound}
	if sn = ts.snapshotOf(in); len(sn.Bound) != 1 || sn.Bound[0].PluginDevices != 2 {
		t.Errorf("bound %+v, want the pod holding 2 GPUs through the plugin", sn.Bound)
	}
}
