package k8senv_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/gpud/gpud/test/k8senv"
)

const bindTimeout = time.Minute

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func pod(name string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:  "main",
				Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU:    resource.MustParse("100m"),
					corev1.ResourceMemory: resource.MustParse("64Mi"),
				}},
			}},
		},
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

// TestSchedulerBindsPod: kube-scheduler binds a plain pod to the one node
// that matches its node selector, the admin kubeconfig works, and RBAC
// denies an identity without bindings.
func TestSchedulerBindsPod(t *testing.T) {
	env := k8senv.Start(t)
	t.Logf("cold start: %s (%v)", env.StartupTime, env.Phases)

	env.CreateNode(t, "node-a", map[string]string{"gpu.example.com/present": "true"})
	env.CreateNode(t, "node-b", nil)
	p := pod("plain", func(p *corev1.Pod) {
		p.Spec.NodeSelector = map[string]string{"gpu.example.com/present": "true"}
	})
	if _, err := env.Client.CoreV1().Pods(p.Namespace).Create(ctx(t), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if node := env.WaitForPodBound(t, p.Namespace, p.Name, bindTimeout); node != "node-a" {
		t.Fatalf("pod bound to %q, want node-a", node)
	}

	// The kubeconfig on disk is usable as it is.
	cfg, err := clientcmd.BuildConfigFromFlags("", env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Nodes().Get(ctx(t), "node-a", metav1.GetOptions{}); err != nil {
		t.Fatalf("admin kubeconfig %s: %v", env.Kubeconfig, err)
	}
	if !strings.HasPrefix(env.Kubeconfig, env.Dir+string(filepath.Separator)) {
		t.Errorf("kubeconfig %s outside the env's dir %s", env.Kubeconfig, env.Dir)
	}

	// RBAC decides for everyone but the admin.
	for name, cfg := range map[string]*rest.Config{
		"user":            env.UserConfig(t, "nobody"),
		"service account": env.ServiceAccountConfig(t, metav1.NamespaceDefault, "nobody"),
	} {
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		_, err = cs.CoreV1().Nodes().List(ctx(t), metav1.ListOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s without RBAC bindings listing nodes: err = %v, want Forbidden", name, err)
		}
	}
	if path := env.WriteKubeconfig(t, "nobody", env.UserConfig(t, "nobody")); !fileExists(path) {
		t.Errorf("WriteKubeconfig: %s not written", path)
	}

	// The Workload API (GenericWorkload, scheduling.k8s.io/v1beta1) is served.
	if _, err := env.Client.SchedulingV1beta1().Workloads(metav1.NamespaceDefault).List(ctx(t), metav1.ListOptions{}); err != nil {
		t.Errorf("scheduling.k8s.io/v1beta1 workloads: %v", err)
	}
	if _, err := env.Client.SchedulingV1beta1().PodGroups(metav1.NamespaceDefault).List(ctx(t), metav1.ListOptions{}); err != nil {
		t.Errorf("scheduling.k8s.io/v1beta1 podgroups: %v", err)
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

const driver = "gpu.example.com"

func attrs(kv map[string]any) map[resourcev1.QualifiedName]resourcev1.DeviceAttribute {
	out := map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{}
	for k, v := range kv {
		switch v := v.(type) {
		case string:
			out[resourcev1.QualifiedName(k)] = resourcev1.DeviceAttribute{StringValue: ptr.To(v)}
		case int:
			out[resourcev1.QualifiedName(k)] = resourcev1.DeviceAttribute{IntValue: ptr.To(int64(v))}
		case bool:
			out[resourcev1.QualifiedName(k)] = resourcev1.DeviceAttribute{BoolValue: ptr.To(v)}
		}
	}
	return out
}

// gpu is a whole GPU that can also be shared by memory (consumable
// capacity: a claim without a request gets all of it) and that consumes
// all of its counter set, so no MIG slice of it can be allocated with it.
func gpu(index int, counterSet string) resourcev1.Device {
	mem := resource.MustParse("80Gi")
	return resourcev1.Device{
		Name:                     "gpu-" + strconv.Itoa(index),
		Attributes:               attrs(map[string]any{"type": "gpu", "index": index, "migCapable": true}),
		AllowMultipleAllocations: ptr.To(true),
		Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{
			"memory": {Value: mem, RequestPolicy: &resourcev1.CapacityRequestPolicy{
				Default: ptr.To(mem),
				ValidRange: &resourcev1.CapacityRequestPolicyRange{
					Min:  ptr.To(resource.MustParse("1Gi")),
					Step: ptr.To(resource.MustParse("1Gi")),
				},
			}},
		},
		ConsumesCounters: []resourcev1.DeviceCounterConsumption{{
			CounterSet: counterSet,
			Counters: map[string]resourcev1.Counter{
				"memory": {Value: mem},
				"slices": {Value: resource.MustParse("8")},
			},
		}},
	}
}

func counterSet(name string) resourcev1.CounterSet {
	return resourcev1.CounterSet{Name: name, Counters: map[string]resourcev1.Counter{
		"memory": {Value: resource.MustParse("80Gi")},
		"slices": {Value: resource.MustParse("8")},
	}}
}

func claim(name, class, selector, memory string) *resourcev1.ResourceClaim {
	req := &resourcev1.ExactDeviceRequest{DeviceClassName: class}
	if selector != "" {
		req.Selectors = []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: selector}}}
	}
	if memory != "" {
		req.Capacity = &resourcev1.CapacityRequirements{Requests: map[resourcev1.QualifiedName]resource.Quantity{
			"memory": resource.MustParse(memory),
		}}
	}
	return &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: req}},
		}},
	}
}

func withClaim(claimName string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(claimName)}}
		p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
	}
}

// TestDRAAllocation: the API server accepts a ResourceSlice pool with
// shared counters (partitionable devices), consumable capacity and device
// taints, and the upstream kube-scheduler allocates from it and binds: two
// 20Gi memory fractions share one GPU, a MIG slice of the other GPU uses
// its counters so that GPU can no longer be had whole, a tainted device is
// passed over, and a pod asking for an extended resource is served through
// a DeviceClass's extendedResourceName. No gpud code is involved: this is
// the path the gpud DRA driver's slices must take.
func TestDRAAllocation(t *testing.T) {
	env := k8senv.Start(t)
	c := env.Client
	const node = "dra-node"
	env.CreateNode(t, node, nil)

	for _, dc := range []*resourcev1.DeviceClass{
		{
			ObjectMeta: metav1.ObjectMeta{Name: driver},
			Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{
				CEL: &resourcev1.CELDeviceSelector{Expression: `device.driver == "` + driver + `"`},
			}}},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "whole." + driver},
			Spec: resourcev1.DeviceClassSpec{
				Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
					Expression: `device.driver == "` + driver + `" && device.attributes["` + driver + `"].index >= 2`,
				}}},
				ExtendedResourceName: ptr.To("example.com/gpu"),
			},
		},
	} {
		if _, err := c.ResourceV1().DeviceClasses().Create(ctx(t), dc, metav1.CreateOptions{}); err != nil {
			t.Fatalf("DeviceClass %s: %v", dc.Name, err)
		}
	}

	pool := resourcev1.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 2}
	slices := []*resourcev1.ResourceSlice{
		{
			ObjectMeta: metav1.ObjectMeta{Name: node + "-counters"},
			Spec: resourcev1.ResourceSliceSpec{
				Driver: driver, Pool: pool, NodeName: ptr.To(node),
				SharedCounters: []resourcev1.CounterSet{counterSet("gpu-0"), counterSet("gpu-1")},
			},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: node + "-devices"},
			Spec: resourcev1.ResourceSliceSpec{
				Driver: driver, Pool: pool, NodeName: ptr.To(node),
				Devices: []resourcev1.Device{
					gpu(0, "gpu-0"),
					gpu(1, "gpu-1"),
					{
						Name:       "gpu-1-mig-1g10gb-0",
						Attributes: attrs(map[string]any{"type": "mig", "profile": "1g.10gb", "parentIndex": 1, "placementStart": 0}),
						Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{
							"memory": {Value: resource.MustParse("10Gi")},
						},
						ConsumesCounters: []resourcev1.DeviceCounterConsumption{{
							CounterSet: "gpu-1",
							Counters: map[string]resourcev1.Counter{
								"memory": {Value: resource.MustParse("10Gi")},
								"slices": {Value: resource.MustParse("1")},
							},
						}},
					},
					{
						Name:       "gpu-2",
						Attributes: attrs(map[string]any{"type": "gpu", "index": 2}),
						Taints: []resourcev1.DeviceTaint{{
							Key: driver + "/unhealthy", Value: "xid-79", Effect: resourcev1.DeviceTaintEffectNoSchedule,
						}},
					},
					{Name: "gpu-3", Attributes: attrs(map[string]any{"type": "gpu", "index": 3})},
				},
			},
		},
	}
	for _, s := range slices {
		if _, err := c.ResourceV1().ResourceSlices().Create(ctx(t), s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("ResourceSlice %s: %v", s.Name, err)
		}
	}

	type want struct {
		device   string
		consumed string // consumedCapacity memory, "" for none
	}
	cases := []struct {
		claim *resourcev1.ResourceClaim
		want  want
	}{
		{claim("frac-a", driver, `device.attributes["`+driver+`"].index == 0`, "20Gi"), want{"gpu-0", "20Gi"}},
		{claim("frac-b", driver, `device.attributes["`+driver+`"].index == 0`, "20Gi"), want{"gpu-0", "20Gi"}},
		{claim("mig", driver, `device.attributes["`+driver+`"].type == "mig"`, ""), want{"gpu-1-mig-1g10gb-0", ""}},
	}
	for _, tc := range cases {
		if _, err := c.ResourceV1().ResourceClaims(tc.claim.Namespace).Create(ctx(t), tc.claim, metav1.CreateOptions{}); err != nil {
			t.Fatalf("ResourceClaim %s: %v", tc.claim.Name, err)
		}
		p := pod("pod-"+tc.claim.Name, withClaim(tc.claim.Name))
		if _, err := c.CoreV1().Pods(p.Namespace).Create(ctx(t), p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("pod %s: %v", p.Name, err)
		}
		// One at a time, so that frac-b sees frac-a's share.
		if got := env.WaitForPodBound(t, p.Namespace, p.Name, bindTimeout); got != node {
			t.Fatalf("pod %s bound to %q, want %s", p.Name, got, node)
		}
		rc, err := c.ResourceV1().ResourceClaims(tc.claim.Namespace).Get(ctx(t), tc.claim.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if rc.Status.Allocation == nil || len(rc.Status.Allocation.Devices.Results) != 1 {
			t.Fatalf("claim %s: allocation %+v, want one device", rc.Name, rc.Status.Allocation)
		}
		r := rc.Status.Allocation.Devices.Results[0]
		consumed := map[string]string{}
		for k, q := range r.ConsumedCapacity {
			consumed[string(k)] = q.String()
		}
		t.Logf("claim %s -> driver %s pool %s device %s shareID %q consumed %v, reserved for pod %s",
			rc.Name, r.Driver, r.Pool, r.Device, ptr.Deref(r.ShareID, ""), consumed, p.Name)
		if r.Driver != driver || r.Pool != node || r.Device != tc.want.device {
			t.Errorf("claim %s allocated %s/%s/%s, want %s/%s/%s", rc.Name, r.Driver, r.Pool, r.Device, driver, node, tc.want.device)
		}
		if tc.want.consumed != "" {
			got := r.ConsumedCapacity["memory"]
			if r.ShareID == nil || got.Cmp(resource.MustParse(tc.want.consumed)) != 0 {
				t.Errorf("claim %s: shareID %v, consumed memory %s, want a share of %s", rc.Name, r.ShareID, got.String(), tc.want.consumed)
			}
		}
		if len(rc.Status.ReservedFor) != 1 || rc.Status.ReservedFor[0].Name != p.Name {
			t.Errorf("claim %s reserved for %+v, want pod %s", rc.Name, rc.Status.ReservedFor, p.Name)
		}
	}

	// gpu-1 whole: its counters are partly used by the MIG slice.
	whole := claim("whole-1", driver, `device.attributes["`+driver+`"].index == 1`, "")
	if _, err := c.ResourceV1().ResourceClaims(whole.Namespace).Create(ctx(t), whole, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := pod("pod-whole-1", withClaim(whole.Name))
	if _, err := c.CoreV1().Pods(p.Namespace).Create(ctx(t), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	msg := env.WaitForPodUnschedulable(t, p.Namespace, p.Name, bindTimeout)
	t.Logf("pod-whole-1 unschedulable, as it should be: %s", msg)

	// example.com/gpu: 1 through the DeviceClass's extendedResourceName;
	// gpu-2 is tainted, so it must be gpu-3.
	ext := pod("pod-extended", func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources.Requests["example.com/gpu"] = resource.MustParse("1")
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"example.com/gpu": resource.MustParse("1")}
	})
	if _, err := c.CoreV1().Pods(ext.Namespace).Create(ctx(t), ext, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := env.WaitForPodBound(t, ext.Namespace, ext.Name, bindTimeout); got != node {
		t.Fatalf("pod %s bound to %q, want %s", ext.Name, got, node)
	}
	var extClaim string
	if err := waitUntil(bindTimeout, func() bool {
		got, err := c.CoreV1().Pods(ext.Namespace).Get(ctx(t), ext.Name, metav1.GetOptions{})
		if err == nil && got.Status.ExtendedResourceClaimStatus != nil {
			extClaim = got.Status.ExtendedResourceClaimStatus.ResourceClaimName
		}
		return extClaim != ""
	}); err != nil {
		t.Fatalf("pod %s: no status.extendedResourceClaimStatus: %v\n%s", ext.Name, err, env.DescribePod(ext.Namespace, ext.Name))
	}
	rc, err := c.ResourceV1().ResourceClaims(ext.Namespace).Get(ctx(t), extClaim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rc.Status.Allocation == nil || len(rc.Status.Allocation.Devices.Results) != 1 || rc.Status.Allocation.Devices.Results[0].Device != "gpu-3" {
		t.Fatalf("extended-resource claim %s: allocation %+v, want gpu-3 (gpu-2 is tainted)", rc.Name, rc.Status.Allocation)
	}
	t.Logf("pod-extended (example.com/gpu: 1) -> claim %s -> device %s", rc.Name, rc.Status.Allocation.Devices.Results[0].Device)
}

func waitUntil(timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s", timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

// TestGangScheduling: with GenericWorkload on, kube-scheduler's
// GangScheduling plugin holds the pods of a scheduling.k8s.io/v1beta1
// PodGroup until minCount of them exist, then binds them all.
func TestGangScheduling(t *testing.T) {
	env := k8senv.Start(t)
	c := env.Client
	env.CreateNode(t, "gang-node", nil)
	pg := &schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: "gang", Namespace: metav1.NamespaceDefault},
		Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
			Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 2},
		}},
	}
	if _, err := c.SchedulingV1beta1().PodGroups(pg.Namespace).Create(ctx(t), pg, metav1.CreateOptions{}); err != nil {
		t.Fatalf("PodGroup: %v", err)
	}
	member := func(name string) *corev1.Pod {
		return pod(name, func(p *corev1.Pod) {
			p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(pg.Name)}
		})
	}
	first := member("gang-0")
	if _, err := c.CoreV1().Pods(first.Namespace).Create(ctx(t), first, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Alone, it must wait. (Some wait is needed to see that nothing
	// happens; the scheduler binds a plain pod in well under this.)
	time.Sleep(3 * time.Second)
	if got, err := c.CoreV1().Pods(first.Namespace).Get(ctx(t), first.Name, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else if got.Spec.NodeName != "" {
		t.Fatalf("gang-0 bound to %s alone, want it held until minCount 2\n%s", got.Spec.NodeName, env.DescribePod(first.Namespace, first.Name))
	}
	second := member("gang-1")
	if _, err := c.CoreV1().Pods(second.Namespace).Create(ctx(t), second, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*corev1.Pod{first, second} {
		if got := env.WaitForPodBound(t, p.Namespace, p.Name, bindTimeout); got != "gang-node" {
			t.Fatalf("%s bound to %q, want gang-node", p.Name, got)
		}
	}
}
