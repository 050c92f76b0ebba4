package kubectlgpud

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpud/gpud/internal/testkit/schedtest"
	"github.com/gpud/gpud/pkg/dra"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/scheduler/plan"
)

// fixedTime is when the fixture's events happened.
var fixedTime = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// testCluster is a small cluster as the API server would hold it:
//
//   - gpu-a: a simulated DGX H100 with gpud's DRA driver (8 GPUs, MIG
//     off): train-0 holds GPUs 0-3, infer-0 and infer-1 hold 20Gi and
//     30Gi of GPU 4;
//   - gpu-b: a simulated DGX A100 (8 GPUs, 40GB), MIG on for GPU 0 with a
//     3g.20gb slice at 4 (held by mig-0) and a 1g.5gb placement at 0
//     created for mig-1, MIG on for GPU 1 with two free 1g.5gb slices;
//     GPU 7 has Xid 79 (NoExecute);
//   - dp-c: a device-plugin node with 4 T4s, one unhealthy, dp-0 holding 2;
//   - cpu-d: a node without GPUs, running web-0;
//   - pending: big-0 (8 GPUs on one node, gang big, gpud-scheduler says
//     why), mig-wait (a 3g.20gb slice, none free) and dp-wait (2
//     nvidia.com/gpu, default scheduler).
func testCluster(t testing.TB) []runtime.Object {
	t.Helper()
	var objs []runtime.Object
	for _, c := range schedtest.ShippedClasses(t) {
		objs = append(objs, c.DeepCopy())
	}
	stA := schedtest.SimState(t, "dgx-h100", "gpu-a")
	_, slA := schedtest.Publish(t, "gpu-a", stA)
	stB := schedtest.SimState(t, "dgx-a100", "gpu-b", 0, 1)
	for i := range stB.Inventory.GPUs {
		g := &stB.Inventory.GPUs[i]
		switch g.Index {
		case 0:
			g.MIGDevices = []gpu.MIGDevice{{UUID: "MIG-b0-3g-4", Profile: "3g.20gb", MemoryBytes: 19968 << 20,
				GPUInstanceID: 2, PlacementStart: 4, PlacementSize: 4}}
		case 1:
			for i := range 2 {
				g.MIGDevices = append(g.MIGDevices, gpu.MIGDevice{UUID: fmt.Sprintf("MIG-b1-1g-%d", i), Profile: "1g.5gb",
					MemoryBytes: 4864 << 20, GPUInstanceID: 9 + i, PlacementStart: i, PlacementSize: 1})
			}
		case 7:
			g.Health, g.HealthReason = gpu.Unhealthy, "Xid 79"
		}
	}
	_, slB := schedtest.Publish(t, "gpu-b", stB)
	for _, s := range append(slA, slB...) {
		objs = append(objs, s)
	}
	objs = append(objs,
		schedtest.Node("gpu-a", map[string]string{"nvidia.com/gpu.present": "true"}),
		schedtest.Node("gpu-b", map[string]string{"nvidia.com/gpu.present": "true"}),
		schedtest.Node("cpu-d", nil),
	)
	dp := schedtest.Node("dp-c", map[string]string{"nvidia.com/gpu.product": "Tesla-T4", "nvidia.com/gpu.count": "4"})
	dp.Status.Capacity = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("4")}
	dp.Status.Allocatable["nvidia.com/gpu"] = resource.MustParse("3")
	objs = append(objs, dp)

	gi := func(n int64) resource.Quantity { return *resource.NewQuantity(n<<30, resource.BinarySI) }
	share := func(s string) *types.UID { u := types.UID(s); return &u }
	// Bound DRA pods and their allocated claims.
	type held struct {
		pod, ns, node, queue, group string
		results                     []resourceapi.DeviceRequestAllocationResult
		request                     resourceapi.DeviceRequest
	}
	res := func(pool, dev string) resourceapi.DeviceRequestAllocationResult {
		return resourceapi.DeviceRequestAllocationResult{Request: "r", Driver: dra.DriverName, Pool: pool, Device: dev}
	}
	frac := func(pool, dev string, mem int64, id string) resourceapi.DeviceRequestAllocationResult {
		r := res(pool, dev)
		r.ShareID = share(id)
		r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{"memory": gi(mem)}
		return r
	}
	fracReq := func(mem int64) resourceapi.DeviceRequest {
		r := schedtest.Exact("r", "gpu.gpud.io", 1)
		r.Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": gi(mem)}}
		return r
	}
	for _, h := range []held{
		{pod: "train-0", ns: "team-a", node: "gpu-a", queue: "research", group: "train",
			results: []resourceapi.DeviceRequestAllocationResult{res("gpu-a", "gpu-0"), res("gpu-a", "gpu-1"), res("gpu-a", "gpu-2"), res("gpu-a", "gpu-3")},
			request: schedtest.Exact("r", "gpu.gpud.io", 4)},
		{pod: "infer-0", ns: "team-b", node: "gpu-a", queue: "serving",
			results: []resourceapi.DeviceRequestAllocationResult{frac("gpu-a", "gpu-4", 20, "s1")}, request: fracReq(20)},
		{pod: "infer-1", ns: "team-b", node: "gpu-a", queue: "serving",
			results: []resourceapi.DeviceRequestAllocationResult{frac("gpu-a", "gpu-4", 30, "s2")}, request: fracReq(30)},
		{pod: "mig-0", ns: "team-a", node: "gpu-b", queue: "research",
			results: []resourceapi.DeviceRequestAllocationResult{res("gpu-b", "gpu-0-mig-3g20gb-4")},
			request: schedtest.Exact("r", "mig.gpud.io", 1, schedtest.MIGSelector("3g.20gb"))},
		{pod: "mig-1", ns: "team-b", node: "gpu-b", queue: "serving",
			results: []resourceapi.DeviceRequestAllocationResult{res("gpu-b", "gpu-0-mig-1g5gb-0")},
			request: schedtest.Exact("r", "mig.gpud.io", 1, schedtest.MIGSelector("1g.5gb"))},
	} {
		p := pod(h.ns, h.pod, h.node, h.queue, h.group)
		c := claim(h.ns, h.pod+"-gpu", h.request)
		c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: h.results}}
		c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: p.Name, UID: p.UID}}
		usesClaim(p, c)
		objs = append(objs, p, c)
	}

	// Pending DRA pods.
	big := pod("team-a", "big-0", "", "research", "big")
	bigClaim := claim("team-a", "big-0-gpu", schedtest.Exact("r", "gpu.gpud.io", 8))
	usesClaim(big, bigClaim)
	unschedulable(big, "gpud-scheduler", "0/4 nodes are available: needs 8 whole GPUs on one node; 3 free on gpu-a, 5 on gpu-b")
	big.Spec.SchedulerName = "gpud-scheduler"
	member := pod("team-a", "big-1", "", "research", "big")
	member.Spec.SchedulerName = "gpud-scheduler"
	migWait := pod("team-a", "mig-wait", "", "research", "")
	migClaim := claim("team-a", "mig-wait-gpu", schedtest.Exact("r", "mig.gpud.io", 1, schedtest.MIGSelector("3g.20gb")))
	usesClaim(migWait, migClaim)
	objs = append(objs, big, bigClaim, member, migWait, migClaim)
	objs = append(objs,
		event("team-a", "e1", big, "gpud-scheduler", "FailedScheduling", "0/4 nodes are available: needs 8 whole GPUs on one node", 0),
		event("team-a", "e2", big, "gpud-scheduler", "FailedScheduling", "0/4 nodes are available: needs 8 whole GPUs on one node; 3 free on gpu-a, 5 on gpu-b", time.Minute),
		event("team-a", "e3", member, "gpud-scheduler", "FailedScheduling", "waiting for gang big", time.Minute),
	)

	// Device-plugin pods, a CPU pod and a finished one.
	dp0 := pod("team-b", "dp-0", "dp-c", "", "")
	dp0.Spec.Containers[0].Resources.Requests = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")}
	dpWait := pod("team-b", "dp-wait", "", "", "")
	dpWait.Spec.Containers[0].Resources.Requests = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")}
	unschedulable(dpWait, "default-scheduler", "0/4 nodes are available: 1 Insufficient nvidia.com/gpu, 3 node(s) didn't match Pod's node affinity/selector.")
	done := pod("team-b", "dp-done", "dp-c", "", "")
	done.Spec.Containers[0].Resources.Requests = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
	done.Status.Phase = corev1.PodSucceeded
	objs = append(objs, dp0, dpWait, done, pod("team-b", "web-0", "cpu-d", "", ""))
	return objs
}

func pod(ns, name, node, queue, group string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name), Labels: map[string]string{}},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodPending},
	}
	if node != "" {
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}
	}
	if queue != "" {
		p.Labels[plan.QueueLabel] = queue
	}
	if group != "" {
		p.Labels[plan.PodGroupLabel] = group
	}
	return p
}

func claim(ns, name string, reqs ...resourceapi.DeviceRequest) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name)},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: reqs}},
	}
}

// usesClaim makes p use c as a claim generated from a template does.
func usesClaim(p *corev1.Pod, c *resourceapi.ResourceClaim) {
	tmpl := "gpu-template"
	p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: &tmpl})
	name := c.Name
	p.Status.ResourceClaimStatuses = append(p.Status.ResourceClaimStatuses, corev1.PodResourceClaimStatus{Name: "gpu", ResourceClaimName: &name})
}

func unschedulable(p *corev1.Pod, _, msg string) {
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: corev1.PodReasonUnschedulable, Message: msg}}
}

func event(ns, name string, about *corev1.Pod, from, reason, msg string, after time.Duration) *corev1.Event {
	return &corev1.Event{
		ObjectMeta:          metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s.%s", about.Name, name)},
		InvolvedObject:      corev1.ObjectReference{Kind: "Pod", Namespace: about.Namespace, Name: about.Name, UID: about.UID},
		Reason:              reason,
		Message:             msg,
		Type:                corev1.EventTypeWarning,
		EventTime:           metav1.NewMicroTime(fixedTime.Add(after)),
		ReportingController: from,
		ReportingInstance:   from + "-1",
		Action:              "Scheduling",
	}
}

func fakeClient(t testing.TB) *fake.Clientset {
	t.Helper()
	return fake.NewClientset(testCluster(t)...)
}
