package decide

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpud/gpud/internal/testkit/schedtest"
	"github.com/gpud/gpud/pkg/allocator/jobs"
	"github.com/gpud/gpud/pkg/scheduler/extres"
	"github.com/gpud/gpud/pkg/scheduler/plan"
	"github.com/gpud/gpud/pkg/scheduler/rules"
)

// gpuClass resolves nvidia.com/gpu to gpu.gpud.io, as the shipped
// DeviceClass's extendedResourceName does.
type gpuClass struct{}

func (gpuClass) GetDeviceClass(name corev1.ResourceName) *resourceapi.DeviceClass {
	if name == "nvidia.com/gpu" {
		return &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu.gpud.io"}}
	}
	return nil
}

// withClassRules is withRules with the DeviceClass resolver, as the
// runtime builds its rules (NodeResourcesFit leaves nvidia.com/gpu to the
// claim on nodes that do not advertise it).
func withClassRules(t *testing.T, e *env) {
	t.Helper()
	client := fake.NewClientset()
	f := informers.NewSharedInformerFactory(client, 0)
	r, err := rules.New(t.Context(), rules.Config{Informers: f, Client: client, DeviceClasses: gpuClass{}})
	if err != nil {
		t.Fatal(err)
	}
	f.Start(t.Context().Done())
	f.WaitForCacheSync(t.Context().Done())
	t.Cleanup(f.Shutdown)
	e.rules = r
}

// pluginNode adds a node without ResourceSlices whose device plugin
// advertises n nvidia.com/gpu.
func pluginNode(e *env, name string, n int64) {
	kn := schedtest.Node(name, map[string]string{hostnameLabel: name})
	kn.Status.Allocatable[corev1.ResourcePods] = resource.MustParse("110")
	kn.Status.Allocatable["nvidia.com/gpu"] = *resource.NewQuantity(n, resource.DecimalSI)
	e.nodes = append(e.nodes, kn)
}

// extPod adds a pending pod asking n nvidia.com/gpu in its container, with
// PerNode built as the runtime's snapshot builds it.
func (e *env) extPod(name string, n int64, opts ...podOpt) *plan.Pod {
	e.t.Helper()
	p := e.pod(name, nil, opts...)
	p.Pod.Spec.Containers[0].Resources.Requests["nvidia.com/gpu"] = *resource.NewQuantity(n, resource.DecimalSI)
	opt := extres.PerNode(p.Pod, gpuClass{}, nil, e.nodes)
	if opt == nil {
		e.t.Fatalf("pod %s: no per-node options", name)
	}
	for _, o := range opt {
		as := *p
		as.Claims = slices.Clone(p.Claims)
		if o.Claim != nil {
			as.Claims = append(as.Claims, o.Claim.Claim)
			as.ExtendedResources = o.Claim.Mappings
		}
		as.PluginDevices = extres.Count(o.Plugin)
		nodes := map[string]bool{}
		for _, n := range o.Nodes {
			nodes[n] = true
		}
		p.PerNode = append(p.PerNode, plan.PerNode{Nodes: nodes, Pod: &as, NeverFits: extres.NeverFits(o, e.nodes)})
	}
	return p
}

// pluginBound adds a pod bound to node holding n nvidia.com/gpu through
// the device plugin.
func (e *env) pluginBound(name, node string, n int64, opts ...podOpt) *plan.Pod {
	e.t.Helper()
	p := e.pod(name, nil, opts...)
	e.pending = slices.DeleteFunc(e.pending, func(x *plan.Pod) bool { return x == p })
	p.Pod.Spec.Containers[0].Resources.Requests["nvidia.com/gpu"] = *resource.NewQuantity(n, resource.DecimalSI)
	p.Pod.Spec.NodeName = node
	p.PluginDevices = n
	e.bound = append(e.bound, p)
	return p
}

// extBinds checks each bind of p as kube-scheduler's per-node rule has
// it: on node dp no claim and no mapping, elsewhere an extended-resource
// claim of n devices of that node, with the pod's mapping. It returns the
// pods per node, "dp=2,dra=3".
func extBinds(t *testing.T, p plan.Plan, n int) string {
	t.Helper()
	count := map[string]int{}
	for _, b := range p.Binds {
		count[b.Node]++
		var ext []*resourceapi.ResourceClaim
		devices := 0
		for _, a := range b.Allocations {
			if extres.IsExtendedClaim(a.Claim, b.Pod.Pod.UID) {
				ext = append(ext, a.Claim)
				if a.Result != nil {
					devices += len(a.Result.Devices.Results)
				}
			}
		}
		switch {
		case b.Node == "dp" && (len(ext) != 0 || b.ExtendedResources != nil):
			t.Errorf("%s on the device-plugin node has claims %v and mappings %+v, want none", b.Pod.Key(), ext, b.ExtendedResources)
		case b.Node != "dp" && (len(ext) != 1 || devices != n || len(b.ExtendedResources) != 1):
			t.Errorf("%s on DRA node %s: extended claims %d with %d devices, mappings %+v; want one of %d devices, one mapping",
				b.Pod.Key(), b.Node, len(ext), devices, b.ExtendedResources, n)
		}
	}
	var parts []string
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range count {
			if !yield(k) {
				return
			}
		}
	}) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, count[k]))
	}
	return strings.Join(parts, ",")
}

// TestExtendedResourcesPerNode: pods asking nvidia.com/gpu on a cluster
// with a device-plugin node (allocatable nvidia.com/gpu: 8, no slices) and
// a DRA node (8 GPUs, gpud's slices) fill both, as kube-scheduler does:
// a claim only on the DRA node, the device plugin's count on the other.
func TestExtendedResourcesPerNode(t *testing.T) {
	e := newEnv(t)
	withClassRules(t, e)
	pluginNode(e, "dp", 8)
	rulesNode(e, "dra")
	for i := range 18 {
		e.extPod(fmt.Sprintf("p%02d", i), 1)
	}
	p := e.decide(Config{})
	if got := extBinds(t, p, 1); got != "dp=8,dra=8" {
		t.Errorf("binds per node %s, want dp=8,dra=8", got)
	}
	if len(p.Pending) != 2 {
		t.Fatalf("%d pending, want 2", len(p.Pending))
	}
	msg := p.Pending[0].Message
	if p.Pending[0].Code == "" || !strings.Contains(msg, "device plugin") || !strings.Contains(msg, "DeviceClass") {
		t.Errorf("pending reason %s %q, want both ways of serving nvidia.com/gpu", p.Pending[0].Code, msg)
	}
}

// TestExtendedResourcesGangAcrossBoth: a gang of three 4-GPU pods fits
// only with members on both the device-plugin node and the DRA node.
func TestExtendedResourcesGangAcrossBoth(t *testing.T) {
	e := newEnv(t)
	withClassRules(t, e)
	pluginNode(e, "dp", 8)
	rulesNode(e, "dra")
	e.gang("g", 3)
	for i := range 3 {
		e.extPod(fmt.Sprintf("g%d", i), 4, group("g"))
	}
	p := e.decide(Config{})
	if len(p.Binds) != 3 {
		t.Fatalf("%d binds (pending %+v), want the gang's 3", len(p.Binds), p.Pending)
	}
	if got := extBinds(t, p, 4); got != "dp=1,dra=2" && got != "dp=2,dra=1" {
		t.Errorf("gang per node %s, want members on both nodes", got)
	}
}

// TestExtendedResourcesPreemptOnPluginNode: the only room for a
// high-priority pod asking 8 nvidia.com/gpu is on the device-plugin node,
// held by a low-priority pod through the plugin: that pod is evicted, and
// the preemptor waits nominated there; next cycle, with the victim gone,
// it binds there without a claim.
func TestExtendedResourcesPreemptOnPluginNode(t *testing.T) {
	e := newEnv(t)
	withClassRules(t, e)
	pluginNode(e, "dp", 8)
	rulesNode(e, "dra")
	e.pluginBound("low", "dp", 8, prio(1))
	keep := e.pod("keep", []resourceapi.DeviceRequest{gpus(8)}, prio(100))
	e.apply(e.decide(Config{}))
	if keep.Pod.Spec.NodeName != "dra" {
		t.Fatalf("keep bound to %q, want dra", keep.Pod.Spec.NodeName)
	}
	hi := e.extPod("hi", 8, prio(50))
	p := e.decide(Config{})
	if got := evictedOf(p); !slices.Equal(got, []string{"low"}) {
		t.Fatalf("evicted %v, want [low] (pending %+v)", got, p.Pending)
	}
	x, ok := pendingOf(p, "hi")
	if !ok || x.NominatedNode != "dp" {
		t.Fatalf("hi pending %+v, want nominated to dp", x)
	}
	e.apply(p)
	// While the victim terminates, hi waits for it rather than preempting
	// again.
	p = e.decide(Config{})
	if x, _ := pendingOf(p, "hi"); len(p.Evictions) != 0 || x.NominatedNode != "dp" {
		t.Fatalf("while the victim terminates: evictions %v, hi %+v", evictedOf(p), x)
	}
	e.finish("default/low")
	hi.Pod.Status.NominatedNodeName = "dp"
	p = e.decide(Config{})
	if got := extBinds(t, p, 8); got != "dp=1" {
		t.Errorf("binds %s (pending %+v), want hi on dp", got, p.Pending)
	}
}

// TestExtendedResourcesQueueLimit: GPUs a pod takes through a device
// plugin count against its queue's limits like claimed ones: a queue
// limited to 4 GPUs holding 3 on the device-plugin node gets one more, not
// two, and a per-model limit reads the node's GFD product label.
func TestExtendedResourcesQueueLimit(t *testing.T) {
	e := newEnv(t)
	withClassRules(t, e)
	pluginNode(e, "dp", 8)
	e.nodes[0].Labels[gfdProductLabel] = "NVIDIA-H100-80GB-HBM3"
	rulesNode(e, "dra")
	e.queues = []jobs.Queue{
		{Name: "team-a", Quota: jobs.Quota{Limit: jobs.Resources{GPUMilli: 4000}}},
		{Name: "team-b", Quota: jobs.Quota{ModelLimit: map[string]int64{"NVIDIA H100 80GB HBM3": 2000}}},
	}
	e.pluginBound("held-a", "dp", 3, queue("team-a"))
	e.pluginBound("held-b", "dp", 2, queue("team-b"))
	e.extPod("a1", 1, queue("team-a"))
	e.extPod("a2", 1, queue("team-a"))
	e.extPod("b1", 1, queue("team-b"))
	p := e.decide(Config{})
	got := bindsOf(p)
	if _, ok := got["a1"]; !ok || len(got) != 1 {
		t.Errorf("binds %v, want a1 alone (team-a at its 4-GPU limit after it, team-b at its H100 limit)", got)
	}
	for _, name := range []string{"a2", "b1"} {
		if x, ok := pendingOf(p, name); !ok || !strings.Contains(x.Code, "quota") {
			t.Errorf("%s pending %+v, want a quota reason", name, x)
		}
	}
}

// TestExtendedResourcesShapes: two pods alike but for how many
// nvidia.com/gpu they ask are different shapes: the first failing (8 GPUs
// over its queue's 4-GPU limit) does not make the second (1 GPU) wait,
// even without the rules (which read the requests themselves).
func TestExtendedResourcesShapes(t *testing.T) {
	e := newEnv(t)
	pluginNode(e, "dp", 8)
	rulesNode(e, "dra")
	e.queues = []jobs.Queue{{Name: "q", Quota: jobs.Quota{Limit: jobs.Resources{GPUMilli: 4000}}}}
	e.extPod("eight", 8, queue("q"))
	e.extPod("one", 1, queue("q"))
	p := e.decide(Config{})
	if got := bindsOf(p); got["one"] != "dra" || len(got) != 1 {
		t.Errorf("binds %v, want one on dra (pending %+v)", got, p.Pending)
	}
}

// TestExtendedResourcesNeverFitsEitherWay: a pod asking 9 nvidia.com/gpu
// fits neither the device-plugin node (8 allocatable) nor the DRA node (8
// GPUs): it says "never fits", naming both ways, while a pod asking 8 on a
// full cluster is only short of room now.
func TestExtendedResourcesNeverFitsEitherWay(t *testing.T) {
	e := newEnv(t)
	withClassRules(t, e)
	pluginNode(e, "dp", 8)
	rulesNode(e, "dra")
	e.extPod("nine", 9)
	p := e.decide(Config{})
	w, ok := pendingOf(p, "nine")
	if !ok || w.Code != jobs.CodeNeverFits || !strings.HasPrefix(w.Message, "never fits: ") ||
		!strings.Contains(w.Message, "asks 9 nvidia.com/gpu through a device plugin; the most any of the 1 nodes serving it that way has allocatable is 8") ||
		!strings.Contains(w.Message, "asks 9 GPUs") {
		t.Errorf("nine: pending %v %+v, want never fits naming the device plugin's 8 and the DRA node's 8 GPUs", ok, w)
	}

	e = newEnv(t)
	withClassRules(t, e)
	pluginNode(e, "dp", 8)
	rulesNode(e, "dra")
	e.pluginBound("holder", "dp", 8)
	e.pod("dra-holder", []resourceapi.DeviceRequest{gpus(8)})
	e.apply(e.decide(Config{}))
	e.extPod("eight", 8)
	p = e.decide(Config{})
	if len(p.Binds) != 0 {
		t.Fatalf("binds %+v on a full cluster", p.Binds)
	}
	if w, ok := pendingOf(p, "eight"); !ok || w.Code == jobs.CodeNeverFits || strings.Contains(w.Message, "never") {
		t.Errorf("eight on a full cluster: pending %v %+v, want short of room now, not never fits", ok, w)
	}
}
