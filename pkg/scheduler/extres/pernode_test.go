package extres

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const migName = corev1.ResourceName(resourceapi.ResourceDeviceClassPrefix + "mig.gpud.io")

func node(name string, alloc map[corev1.ResourceName]string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{}}}
	for k, v := range alloc {
		n.Status.Allocatable[k] = resource.MustParse(v)
	}
	return n
}

// TestPerNode follows kube-scheduler's filterExtendedResources node by
// node: a resource the node's allocatable lists (> 0) is the device
// plugin's and stays out of the claim; the others are the claim's.
func TestPerNode(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"}, Spec: corev1.PodSpec{Containers: []corev1.Container{
		ctr("main", map[string]string{"cpu": "1", "nvidia.com/gpu": "2", string(migName): "1"})}}}
	nodes := []*corev1.Node{
		node("dra-1", nil),
		node("plugin", map[corev1.ResourceName]string{"nvidia.com/gpu": "8"}),
		node("dra-0", map[corev1.ResourceName]string{"nvidia.com/gpu": "0"}), // 0: as absent
		node("both", map[corev1.ResourceName]string{"nvidia.com/gpu": "8", migName: "7"}),
	}
	got := PerNode(pod, resolver, nil, nodes)
	if len(got) != 3 {
		t.Fatalf("%d options, want 3: %+v", len(got), got)
	}
	// The DRA nodes: one claim with both resources' requests.
	if want := []string{"dra-0", "dra-1"}; !reflect.DeepEqual(got[0].Nodes, want) {
		t.Errorf("option 0 nodes %v, want %v", got[0].Nodes, want)
	}
	if want := []resourceapi.DeviceRequest{req("container-0-request-1", "mig.gpud.io", 1), req("container-0-request-2", "gpu.gpud.io", 2)}; got[0].Claim == nil ||
		!reflect.DeepEqual(got[0].Claim.Claim.Spec.Devices.Requests, want) || got[0].Plugin != nil {
		t.Errorf("option 0: claim %+v plugin %v, want requests %+v and no plugin", got[0].Claim, got[0].Plugin, want)
	}
	// The plugin node: the claim asks only for the MIG device; the GPUs
	// are the device plugin's.
	if want := []string{"plugin"}; !reflect.DeepEqual(got[1].Nodes, want) {
		t.Errorf("option 1 nodes %v, want %v", got[1].Nodes, want)
	}
	if got[1].Claim == nil || !reflect.DeepEqual(got[1].Claim.Claim.Spec.Devices.Requests, []resourceapi.DeviceRequest{req("container-0-request-1", "mig.gpud.io", 1)}) ||
		!reflect.DeepEqual(got[1].Claim.Mappings, []corev1.ContainerExtendedResourceRequest{mapping("main", string(migName), "container-0-request-1")}) {
		t.Errorf("option 1 claim %+v, want the MIG request alone", got[1].Claim)
	}
	if q := got[1].Plugin["nvidia.com/gpu"]; q.Value() != 2 || len(got[1].Plugin) != 1 || Count(got[1].Plugin) != 2 {
		t.Errorf("option 1 plugin %v, want nvidia.com/gpu: 2", got[1].Plugin)
	}
	// A node whose plugins serve both: no claim, last.
	if !reflect.DeepEqual(got[2].Nodes, []string{"both"}) || got[2].Claim != nil || Count(got[2].Plugin) != 3 {
		t.Errorf("option 2 %+v, want node both, no claim, 3 devices from plugins", got[2])
	}
	if n := PluginDevices(pod, resolver, nodes[1]); n != 2 {
		t.Errorf("PluginDevices on the plugin node %d, want 2", n)
	}
	if n := PluginDevices(pod, resolver, nodes[0]); n != 0 {
		t.Errorf("PluginDevices on a DRA node %d, want 0", n)
	}
}

// TestPerNodeNone: For's claim holds everywhere when no node advertises
// the resource, when the pod asks for none a class serves, and when its
// claim was written before (reused as written).
func TestPerNodeNone(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "u"}, Spec: corev1.PodSpec{Containers: []corev1.Container{
		ctr("main", map[string]string{"nvidia.com/gpu": "1"})}}}
	dra := []*corev1.Node{node("a", nil), node("b", map[corev1.ResourceName]string{"example.com/nic": "1"})}
	if got := PerNode(pod, resolver, nil, dra); got != nil {
		t.Errorf("no node advertises nvidia.com/gpu: options %+v, want nil", got)
	}
	mixed := append(dra, node("c", map[corev1.ResourceName]string{"nvidia.com/gpu": "4"}))
	if got := PerNode(pod, resolver, nil, mixed); len(got) != 2 || got[1].Claim != nil || !reflect.DeepEqual(got[1].Nodes, []string{"c"}) {
		t.Errorf("options %+v, want the claim on a and b, the plugin on c", got)
	}
	if got := PerNode(pod, resolver, &resourceapi.ResourceClaim{}, mixed); got != nil {
		t.Errorf("with the claim written before: options %+v, want nil", got)
	}
	if got := PerNode(pod, nil, nil, mixed); got != nil {
		t.Errorf("without a resolver: options %+v, want nil", got)
	}
	plain := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{ctr("main", map[string]string{"example.com/nic": "1"})}}}
	if got := PerNode(plain, resolver, nil, mixed); got != nil {
		t.Errorf("no DRA-backed resource: options %+v, want nil", got)
	}
}

// TestNeverFits: an option's device-plugin resources never fit when every
// node of the option has less of one than the pod asks, or no node has
// enough of all at once; one node with enough of all is room enough.
func TestNeverFits(t *testing.T) {
	gpu, nic := corev1.ResourceName("nvidia.com/gpu"), corev1.ResourceName("example.com/nic")
	nodes := []*corev1.Node{
		node("a", map[corev1.ResourceName]string{gpu: "8", nic: "1"}),
		node("b", map[corev1.ResourceName]string{gpu: "4", nic: "4"}),
		node("other", map[corev1.ResourceName]string{gpu: "16", nic: "16"}), // not the option's
	}
	ask := func(g, n string) Option {
		return Option{Nodes: []string{"a", "b"}, Plugin: corev1.ResourceList{gpu: resource.MustParse(g), nic: resource.MustParse(n)}}
	}
	for _, c := range []struct {
		name string
		o    Option
		want string
	}{
		{"fits a", ask("8", "1"), ""},
		{"fits b", ask("2", "4"), ""},
		{"no plugin resources", Option{Nodes: []string{"a"}}, ""},
		{"too many GPUs", ask("9", "1"), "never fits: the pod asks 9 nvidia.com/gpu through a device plugin; the most any of the 2 nodes serving it that way has allocatable is 8"},
		{"not both at once", ask("8", "4"), "never fits: no node of the 2 serving example.com/nic,nvidia.com/gpu through a device plugin has allocatable for all the pod asks of them at once"},
	} {
		if got := NeverFits(c.o, nodes); got != c.want {
			t.Errorf("%s: NeverFits = %q, want %q", c.name, got, c.want)
		}
	}
}
