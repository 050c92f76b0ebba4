package rules

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/gpud/gpud/internal/testkit/testwait"
)

const hostname = "kubernetes.io/hostname"

func node(name string, mod ...func(*corev1.Node)) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{hostname: name,
		"topology.kubernetes.io/zone": "zone-" + name}}}
	n.Status.Allocatable = corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"),
		corev1.ResourcePods: resource.MustParse("110"),
	}
	n.Status.Capacity = n.Status.Allocatable.DeepCopy()
	for _, m := range mod {
		m(n)
	}
	return n
}

func pod(name string, mod ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name),
		Labels: map[string]string{"app": "web"}}}
	p.Spec.Containers = []corev1.Container{{Name: "c", Image: "x", Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}}
	for _, m := range mod {
		m(p)
	}
	return p
}

func on(n string) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Spec.NodeName = n } }

func antiAffinity(p *corev1.Pod) {
	p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, TopologyKey: hostname}}}}
}

func hostPort(p *corev1.Pod) {
	p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 9999, Protocol: corev1.ProtocolTCP}}
}

func spread(p *corev1.Pod) {
	p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: hostname,
		WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}
}

func pvc(claim string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: claim, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}})
	}
}

// newRules starts rules over a fake API server holding objs.
func newRules(t *testing.T, objs ...k8sruntime.Object) *Rules {
	t.Helper()
	client := fake.NewClientset(objs...)
	f := informers.NewSharedInformerFactory(client, 0)
	r, err := New(t.Context(), Config{Informers: f, Client: client})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	f.Start(t.Context().Done())
	for typ, ok := range f.WaitForCacheSync(t.Context().Done()) {
		if !ok {
			t.Fatalf("informer %v not synced", typ)
		}
	}
	t.Cleanup(f.Shutdown)
	return r
}

func newCycle(t *testing.T, r *Rules, nodes []*corev1.Node, bound ...*corev1.Pod) *Cycle {
	t.Helper()
	c, err := r.Cycle(t.Context(), nodes, bound)
	if err != nil {
		t.Fatalf("Cycle: %v", err)
	}
	return c
}

// allowed lists the nodes the rules allow for p, and the reasons of the
// others.
func allowed(c *Cycle, p *corev1.Pod, nodes ...string) (ok []string, why []string) {
	for _, n := range nodes {
		if r := c.Filter(p, n); r != "" {
			why = append(why, n+": "+r)
			continue
		}
		ok = append(ok, n)
	}
	return ok, why
}

func TestFilter(t *testing.T) {
	nodes := []*corev1.Node{node("a"), node("b", func(n *corev1.Node) {
		n.Spec.Unschedulable = false
		n.Status.Allocatable["example.com/nic"] = resource.MustParse("1")
	})}
	tests := []struct {
		name    string
		bound   []*corev1.Pod
		pod     *corev1.Pod
		want    string // allowed nodes, comma-separated
		wantWhy string // a substring of a refusal
	}{
		{name: "plain pod fits both", pod: pod("p"), want: "a,b"},
		{name: "anti-affinity avoids the replica's node", bound: []*corev1.Pod{pod("r1", on("a"))},
			pod: pod("r2", antiAffinity), want: "b", wantWhy: "anti-affinity"},
		{name: "a bound pod's anti-affinity keeps a matching pod away",
			bound: []*corev1.Pod{pod("r1", on("b"), antiAffinity)}, pod: pod("r2"), want: "a", wantWhy: "anti-affinity"},
		{name: "host port taken", bound: []*corev1.Pod{pod("h1", on("a"), hostPort)}, pod: pod("h2", hostPort),
			want: "b", wantWhy: "free ports"},
		{name: "extended resource only b has", pod: pod("nic", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Requests["example.com/nic"] = resource.MustParse("1")
		}), want: "b", wantWhy: "Insufficient example.com/nic"},
		{name: "cpu short", bound: []*corev1.Pod{pod("big", on("a"), func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("7500m")
		})}, pod: pod("p", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("1")
		}), want: "b", wantWhy: "Insufficient cpu"},
		{name: "spread maxSkew 1", bound: []*corev1.Pod{pod("s1", on("a")), pod("s2", on("a")), pod("s3", on("b"))},
			pod: pod("s4", spread), want: "b", wantWhy: "topology spread"},
		{name: "node selector", pod: pod("sel", func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{hostname: "a"} }),
			want: "a"},
		{name: "missing PVC", pod: pod("vol", pvc("nope")), want: "", wantWhy: `persistentvolumeclaim "nope" not found`},
	}
	r := newRules(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCycle(t, r, nodes, tc.bound...)
			ok, why := allowed(c, tc.pod, "a", "b")
			if got := strings.Join(ok, ","); got != tc.want {
				t.Errorf("allowed = %q, want %q (refusals: %q)", got, tc.want, why)
			}
			if tc.wantWhy != "" && !strings.Contains(strings.Join(why, "; "), tc.wantWhy) {
				t.Errorf("refusals %q lack %q", why, tc.wantWhy)
			}
		})
	}
}

func TestTaintsAndCordon(t *testing.T) {
	nodes := []*corev1.Node{
		node("a", func(n *corev1.Node) { n.Spec.Unschedulable = true }),
		node("b", func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: "gpu", Value: "true", Effect: corev1.TaintEffectNoSchedule}}
		}),
		node("c"),
	}
	r := newRules(t)
	c := newCycle(t, r, nodes)
	if ok, why := allowed(c, pod("p"), "a", "b", "c"); strings.Join(ok, ",") != "c" {
		t.Errorf("untolerating pod allowed on %v (refusals %q), want c", ok, why)
	}
	tol := pod("t", func(p *corev1.Pod) {
		p.Spec.Tolerations = []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	})
	if ok, why := allowed(c, tol, "a", "b", "c"); strings.Join(ok, ",") != "b,c" {
		t.Errorf("tolerating pod allowed on %v (refusals %q), want b,c", ok, why)
	}
}

// TestAddRemove checks that pods placed in the cycle count for later pods
// (ports, anti-affinity, spread) and stop counting once removed.
func TestAddRemove(t *testing.T) {
	r := newRules(t)
	c := newCycle(t, r, []*corev1.Node{node("a"), node("b")})
	first := pod("h1", hostPort, antiAffinity)
	if got := c.Filter(first, "a"); got != "" {
		t.Fatalf("first pod refused on a: %s", got)
	}
	if err := c.Add(first, "a"); err != nil {
		t.Fatal(err)
	}
	second := pod("h2", hostPort)
	if ok, _ := allowed(c, second, "a", "b"); strings.Join(ok, ",") != "b" {
		t.Errorf("after placing h1 on a, h2 allowed on %v, want b", ok)
	}
	if err := c.Add(second, "b"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := allowed(c, pod("h3", hostPort), "a", "b"); len(ok) != 0 {
		t.Errorf("third host-port pod allowed on %v, want none", ok)
	}
	if err := c.Remove(first, "a"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := allowed(c, pod("h3", hostPort), "a", "b"); strings.Join(ok, ",") != "a" {
		t.Errorf("after removing h1, h3 allowed on %v, want a", ok)
	}
}

func TestVolumes(t *testing.T) {
	local := func(name, nodeName string) *corev1.PersistentVolume {
		return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:         corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				StorageClassName: "local",
				PersistentVolumeSource: corev1.PersistentVolumeSource{
					Local: &corev1.LocalVolumeSource{Path: "/mnt/" + name}},
				ClaimRef: &corev1.ObjectReference{Namespace: "default", Name: "claim-" + name},
				NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: []corev1.NodeSelectorRequirement{{Key: hostname, Operator: corev1.NodeSelectorOpIn, Values: []string{nodeName}}}}}}},
			},
			Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeBound}}
	}
	claim := func(name, pv string) *corev1.PersistentVolumeClaim {
		sc := "local"
		// The PV controller marks a claim it bound (bind-completed).
		return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default",
			Annotations: map[string]string{"pv.kubernetes.io/bind-completed": "yes"}},
			Spec: corev1.PersistentVolumeClaimSpec{VolumeName: pv, StorageClassName: &sc,
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
			Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound}}
	}
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "local"}, Provisioner: "kubernetes.io/no-provisioner",
		VolumeBindingMode: &wffc}
	wffcClaim := claim("claim-wffc", "")
	wffcClaim.Annotations = nil
	wffcClaim.Status.Phase = corev1.ClaimPending
	r := newRules(t, sc, local("pv-a", "a"), local("pv-b", "b"), claim("claim-pv-a", "pv-a"), claim("claim-pv-b", "pv-b"), wffcClaim)
	c := newCycle(t, r, []*corev1.Node{node("a"), node("b")})
	for _, n := range []string{"a", "b"} {
		p := pod("vol-"+n, pvc("claim-pv-"+n))
		ok, why := allowed(c, p, "a", "b")
		if strings.Join(ok, ",") != n {
			t.Errorf("pod with the PVC bound to %s's local PV allowed on %v, want %s (refusals %q)", n, ok, n, why)
		}
	}
	if _, unres := c.Unresolvable(pod("vol-x", pvc("missing"))); !unres {
		t.Error("pod naming a missing PVC is not unresolvable")
	}
	if why, unres := c.Unresolvable(pod("vol-a", pvc("claim-pv-a"))); unres {
		t.Errorf("pod with a bound PVC unresolvable: %s", why)
	}
	// An unbound WaitForFirstConsumer claim is not a reason to wait: the
	// rules find the nodes with a matching PV, and BindVolumes binds it.
	if why, unres := c.Unresolvable(pod("vol-wffc", pvc("claim-wffc"))); unres {
		t.Errorf("pod with an unbound WaitForFirstConsumer claim unresolvable: %s", why)
	}
}

// TestBindVolumes: a pod's unbound WaitForFirstConsumer claim is bound for
// the node chosen as kube-scheduler's VolumeBinding binds it (the free
// local PV of that node gets the claim), and BindVolumes returns once the
// volume controller finished; without the controller it gives up after
// the timeout, saying so.
func TestBindVolumes(t *testing.T) {
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "local"}, Provisioner: "kubernetes.io/no-provisioner",
		VolumeBindingMode: &wffc}
	free := func(name, nodeName string) *corev1.PersistentVolume {
		return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				StorageClassName:       "local",
				PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/mnt/" + name}},
				NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: []corev1.NodeSelectorRequirement{{Key: hostname, Operator: corev1.NodeSelectorOpIn, Values: []string{nodeName}}}}}}},
			},
			Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeAvailable}}
	}
	claim := func(name string) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
			Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: ptr.To("local"),
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
			Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending}}
	}
	p, q := pod("db", pvc("data")), pod("db2", pvc("other"))
	client := fake.NewClientset(sc, free("pv-b", "b"), free("pv-c", "c"), claim("data"), claim("other"), node("a"), node("b"), node("c"), p, q)
	f := informers.NewSharedInformerFactory(client, 0)
	r, err := New(t.Context(), Config{Informers: f, Client: client})
	if err != nil {
		t.Fatal(err)
	}
	f.Start(t.Context().Done())
	f.WaitForCacheSync(t.Context().Done())
	t.Cleanup(f.Shutdown)
	c := newCycle(t, r, []*corev1.Node{node("a"), node("b"), node("c")})
	if ok, why := allowed(c, p, "a", "b", "c"); strings.Join(ok, ",") != "b,c" {
		t.Fatalf("pod with an unbound WaitForFirstConsumer claim allowed on %v, want b,c (the nodes with a free PV); refusals %q", ok, why)
	}

	// No volume controller: the PV is bound to the claim through the API,
	// and BindVolumes gives up waiting for the claim's side.
	err = c.BindVolumes(t.Context(), p, "b", 300*time.Millisecond)
	if !errors.Is(err, ErrVolumes) || !strings.Contains(err.Error(), "not bound within") {
		t.Fatalf("BindVolumes without a volume controller: %v, want ErrVolumes saying it was not bound in time", err)
	}
	pv, err := client.CoreV1().PersistentVolumes().Get(t.Context(), "pv-b", metav1.GetOptions{})
	if err != nil || pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.Name != "data" {
		t.Fatalf("pv-b claimRef after BindVolumes: %+v, %v; want default/data", pv.Spec.ClaimRef, err)
	}

	// With the controller's part done (as kube-controller-manager's PV
	// controller does it), the next pod's binding completes.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go pvController(ctx, client)
	if err := c.BindVolumes(t.Context(), q, "c", 10*time.Second); err != nil {
		t.Fatalf("BindVolumes with a volume controller: %v", err)
	}
	if got, _ := client.CoreV1().PersistentVolumeClaims("default").Get(t.Context(), "other", metav1.GetOptions{}); got.Spec.VolumeName != "pv-c" {
		t.Fatalf("claim other bound to %q, want pv-c", got.Spec.VolumeName)
	}
	// A pod without claims has nothing to bind.
	if err := c.BindVolumes(t.Context(), pod("web"), "a", time.Second); err != nil {
		t.Fatalf("BindVolumes without claims: %v", err)
	}
}

// pvController completes bindings the scheduler started, as the PV
// controller does: a PV whose claimRef names a pending claim gets the
// claim's volumeName, and both turn Bound.
func pvController(ctx context.Context, client *fake.Clientset) {
	for ctx.Err() == nil {
		pvs, _ := client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		for _, pv := range pvs.Items {
			ref := pv.Spec.ClaimRef
			if ref == nil || pv.Status.Phase == corev1.VolumeBound {
				continue
			}
			pvc, err := client.CoreV1().PersistentVolumeClaims(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
			if err != nil {
				continue
			}
			pvc.Spec.VolumeName = pv.Name
			pvc.Annotations = map[string]string{"pv.kubernetes.io/bind-completed": "yes"}
			pvc.Status.Phase = corev1.ClaimBound
			if _, err := client.CoreV1().PersistentVolumeClaims(ref.Namespace).Update(ctx, pvc, metav1.UpdateOptions{}); err != nil {
				continue
			}
			pv.Status.Phase = corev1.VolumeBound
			_, _ = client.CoreV1().PersistentVolumes().Update(ctx, &pv, metav1.UpdateOptions{})
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestScore checks that preferred node affinity ranks nodes.
func TestScore(t *testing.T) {
	r := newRules(t)
	c := newCycle(t, r, []*corev1.Node{node("a"), node("b")})
	p := pod("pref", func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 10,
				Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: hostname, Operator: corev1.NodeSelectorOpIn, Values: []string{"b"}}}}}}}}
	})
	s := c.Score(p, []string{"a", "b"})
	if s["b"] <= s["a"] {
		t.Errorf("scores %v: want b above a", fmt.Sprint(s))
	}
}

// TestDeletedNode: pods still bound to a node that is gone (the node
// object deleted first) count nowhere and break nothing, in the snapshot
// and when a what-if releases and puts them back.
func TestDeletedNode(t *testing.T) {
	r := newRules(t)
	ghost := pod("ghost", on("gone"), antiAffinity, hostPort)
	c := newCycle(t, r, []*corev1.Node{node("a")}, ghost)
	if err := c.Remove(ghost, "gone"); err != nil {
		t.Fatal(err)
	}
	if err := c.Add(ghost, "gone"); err != nil {
		t.Fatal(err)
	}
	if got := c.Filter(pod("p", antiAffinity, hostPort), "a"); got != "" {
		t.Fatalf("pod refused on a: %s", got)
	}
}

// Cycles leave no goroutines behind: VolumeBinding's volume binder (one
// per plugin) registers handlers, each with its own goroutines, on the
// shared PV and PVC informers, and each framework starts a metrics
// goroutine that lives as long as the context it was built with; per
// cycle, both leaked for the scheduler's life.
func TestCyclesAddNoInformerHandlers(t *testing.T) {
	r := newRules(t, node("a"))
	newCycle(t, r, []*corev1.Node{node("a")})
	before := runtime.NumGoroutine()
	for range 50 {
		newCycle(t, r, []*corev1.Node{node("a")})
	}
	// The last framework's metrics goroutine may still be on its way out.
	testwait.For(t, 5*time.Second, "goroutines back to the count before 50 cycles", func() bool {
		return runtime.NumGoroutine() <= before+5
	})
}
