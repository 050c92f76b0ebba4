package test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/test/k8senv"
)

// nicDriver is a second DRA driver in the claim cases: one RDMA NIC on
// each pool's node b.
const nicDriver = "nic.example.com"

// claimsSetup creates gpud's DeviceClasses, a NIC DeviceClass and one NIC
// slice on node b of each pool.
func claimsSetup(t *testing.T, env *k8senv.Env) {
	t.Helper()
	c := env.Client
	createDeviceClasses(t, c)
	nic := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: nicDriver},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: `device.driver == "` + nicDriver + `"`}}}}}
	if _, err := c.ResourceV1().DeviceClasses().Create(t.Context(), nic, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, pool := range []string{"gpud", "kube"} {
		node := pool + "-b"
		sl := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-nic"},
			Spec: resourceapi.ResourceSliceSpec{Driver: nicDriver, NodeName: &node,
				Pool:    resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1},
				Devices: []resourceapi.Device{{Name: "nic-0"}}}}
		if _, err := c.ResourceV1().ResourceSlices().Create(t.Context(), sl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// claimPod is a pod of a claim case with its own claims (named
// <pod>-<i>), created before it.
type claimPod struct {
	name   string
	claims []resourceapi.DeviceClaim
	// templates become ResourceClaimTemplates <pod>-t<i>, which the resource
	// claim controller turns into the pod's claims.
	templates []resourceapi.DeviceClaim
	// shares names claims of other pods of the case that this pod uses too.
	shares []string
	// mod changes the pod; after names pods that must be bound before it
	// is created (as in rulesPod).
	mod   func(*corev1.Pod)
	after []string
}

type claimCase struct {
	name string
	pods []claimPod
	// check judges one scheduler's placement (pod → "a", "b", "" pending).
	check func(map[string]string) error
	// verify checks the bound pods' claims in namespace ns.
	verify func(t *testing.T, env *k8senv.Env, ns string)
	// setup, if set, runs before the pods are created; what it returns
	// runs once their claims are freed.
	setup func(t *testing.T, env *k8senv.Env) (cleanup func())
}

func claimReq(name, class string, count int64, mode resourceapi.DeviceAllocationMode) resourceapi.DeviceRequest {
	return resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class, AllocationMode: mode, Count: count}}
}

func claimCases() []claimCase {
	one := func(name string, count int64) resourceapi.DeviceRequest {
		return claimReq(name, "gpu.gpud.io", count, resourceapi.DeviceAllocationModeExactCount)
	}
	all := resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{claimReq("gpu", "gpu.gpud.io", 0, resourceapi.DeviceAllocationModeAll)}}
	eight := resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{one("gpu", 8)}}
	eightTolerating := resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{one("gpu", 8)}}
	eightTolerating.Requests[0].Exactly.Tolerations = []resourceapi.DeviceToleration{{Key: maintenanceTaint,
		Operator: resourceapi.DeviceTolerationOpExists, Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	domain := resourceapi.FullyQualifiedName("gpu.gpud.io/nvlinkDomain")
	numa := resourceapi.FullyQualifiedName("gpu.gpud.io/numaNode")
	distinct := func(count int64, attr resourceapi.FullyQualifiedName) resourceapi.DeviceClaim {
		return resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{one("gpu", count)},
			Constraints: []resourceapi.DeviceConstraint{{DistinctAttribute: &attr}}}
	}
	admin := func(class string, count int64) resourceapi.DeviceClaim {
		c := resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{claimReq("dev", class, count, resourceapi.DeviceAllocationModeExactCount)}}
		c.Requests[0].Exactly.AdminAccess = ptr.To(true)
		return c
	}
	nic := resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{claimReq("nic", nicDriver, 1, resourceapi.DeviceAllocationModeExactCount)}}
	return []claimCase{
		{name: "allocationMode All", pods: []claimPod{{name: "all-0", claims: []resourceapi.DeviceClaim{all}}, {name: "all-1", claims: []resourceapi.DeviceClaim{all}},
			{name: "all-2", claims: []resourceapi.DeviceClaim{all}}},
			check: perNode("a=1 b=1 pending=1", true), verify: resultCounts(map[string]int{"all-0": 8, "all-1": 8, "all-2": 8})},
		{name: "firstAvailable", pods: []claimPod{{name: "fa", claims: []resourceapi.DeviceClaim{{Requests: []resourceapi.DeviceRequest{{Name: "gpu",
			FirstAvailable: []resourceapi.DeviceSubRequest{
				{Name: "sixteen", DeviceClassName: "gpu.gpud.io", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 16},
				{Name: "two", DeviceClassName: "gpu.gpud.io", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 2}}}}}}}},
			check: perNode("a=1", true), verify: requestNames(map[string]string{"fa": "gpu/two gpu/two"})},
		{name: "matchAttribute across requests", pods: []claimPod{{name: "pair", claims: []resourceapi.DeviceClaim{{
			Requests:    []resourceapi.DeviceRequest{one("first", 1), one("second", 1)},
			Constraints: []resourceapi.DeviceConstraint{{MatchAttribute: &domain}}}}}},
			check: perNode("a=1", true), verify: requestNames(map[string]string{"pair": "first second"})},
		{name: "GPU and another driver's NIC", pods: []claimPod{
			{name: "gn-0", claims: []resourceapi.DeviceClaim{{Requests: []resourceapi.DeviceRequest{one("gpu", 1)}},
				{Requests: []resourceapi.DeviceRequest{claimReq("nic", nicDriver, 1, resourceapi.DeviceAllocationModeExactCount)}}}},
			{name: "gn-1", claims: []resourceapi.DeviceClaim{{Requests: []resourceapi.DeviceRequest{one("gpu", 1)}},
				{Requests: []resourceapi.DeviceRequest{claimReq("nic", nicDriver, 1, resourceapi.DeviceAllocationModeExactCount)}}}}},
			check: perNode("b=1 pending=1", false)},
		// An admin's DeviceTaintRule on node a's GPUs: a pod whose request
		// does not tolerate the taint may not get them...
		{name: "DeviceTaintRule", setup: taintNodeAGPUs, pods: []claimPod{{name: "untol-0", claims: []resourceapi.DeviceClaim{eight}},
			{name: "untol-1", claims: []resourceapi.DeviceClaim{eight}}},
			check: func(got map[string]string) error {
				if got["untol-0"] == "a" || got["untol-1"] == "a" {
					return fmt.Errorf("a pod that does not tolerate the taint got node a's tainted GPUs: %v", got)
				}
				return perNode("b=1 pending=1", false)(got)
			}},
		// ...and one whose request tolerates it may.
		{name: "DeviceTaintRule tolerated", setup: taintNodeAGPUs, pods: []claimPod{{name: "tol-0", claims: []resourceapi.DeviceClaim{eightTolerating}},
			{name: "tol-1", claims: []resourceapi.DeviceClaim{eightTolerating}}},
			check: perNode("a=1 b=1", false)},
		// A dgx-h100 has two NUMA nodes: two GPUs on distinct NUMA nodes
		// exist, three do not.
		{name: "distinctAttribute", pods: []claimPod{{name: "numa-2", claims: []resourceapi.DeviceClaim{distinct(2, numa)}},
			{name: "numa-3", claims: []resourceapi.DeviceClaim{distinct(3, numa)}}},
			check: placedAndPending([]string{"numa-2"}, []string{"numa-3"}), verify: distinctValues("numa-2", numa)},
		// adminAccess: an admin's allocation does not consume its devices
		// (eight GPUs of node a with adminAccess, then eight for a plain
		// claim there), and it needs no free device (node b's only NIC in
		// use: an admin claim gets it, a plain one waits). A device whose
		// shared counters are taken stays refused even to adminAccess
		// (kube-scheduler's allocator checks counters for every request),
		// so the busy device here is a NIC.
		{name: "adminAccess", setup: allowAdminAccess, pods: []claimPod{
			{name: "admin-gpus", claims: []resourceapi.DeviceClaim{admin("gpu.gpud.io", 8)}, mod: onNode("a")},
			{name: "gpus-after-admin", claims: []resourceapi.DeviceClaim{eight}, mod: onNode("a"), after: []string{"admin-gpus"}},
			{name: "nic-busy", claims: []resourceapi.DeviceClaim{nic}},
			{name: "nic-admin", claims: []resourceapi.DeviceClaim{admin(nicDriver, 1)}, after: []string{"nic-busy"}},
			{name: "nic-plain", claims: []resourceapi.DeviceClaim{nic}, after: []string{"nic-busy"}}},
			check:  exactly(map[string]string{"admin-gpus": "a", "gpus-after-admin": "a", "nic-busy": "b", "nic-admin": "b", "nic-plain": ""}),
			verify: adminResults(map[string]int{"admin-gpus": 8, "nic-admin": 1})},
		// One claim, three pods: the second joins the first on the claim's
		// node; the third may only run on the other node, so it waits.
		{name: "claim shared by two pods", pods: []claimPod{
			{name: "owner", claims: []resourceapi.DeviceClaim{{Requests: []resourceapi.DeviceRequest{one("gpu", 1)}}}, mod: onNode("a")},
			{name: "sharer", shares: []string{"owner-0"}, after: []string{"owner"}},
			{name: "elsewhere", shares: []string{"owner-0"}, mod: onNode("b"), after: []string{"owner"}}},
			check:  exactly(map[string]string{"owner": "a", "sharer": "a", "elsewhere": ""}),
			verify: reservedFor("owner-0", "owner", "sharer")},
		// Claims made from a ResourceClaimTemplate by the resource claim
		// controller, one per pod; nine GPUs fit no node.
		{name: "ResourceClaimTemplate", pods: []claimPod{
			{name: "tmpl-0", templates: []resourceapi.DeviceClaim{{Requests: []resourceapi.DeviceRequest{one("gpu", 2)}}}},
			{name: "tmpl-1", templates: []resourceapi.DeviceClaim{{Requests: []resourceapi.DeviceRequest{one("gpu", 2)}}}},
			{name: "tmpl-9", templates: []resourceapi.DeviceClaim{{Requests: []resourceapi.DeviceRequest{one("gpu", 9)}}}}},
			check:  placedAndPending([]string{"tmpl-0", "tmpl-1"}, []string{"tmpl-9"}),
			verify: resultCounts(map[string]int{"tmpl-0": 2, "tmpl-1": 2})},
	}
}

// placedAndPending checks that the placed pods are bound (to any node) and
// the pending ones are not.
func placedAndPending(placed, pending []string) func(map[string]string) error {
	return func(got map[string]string) error {
		for _, p := range placed {
			if got[p] == "" {
				return fmt.Errorf("%s not placed: %v", p, got)
			}
		}
		for _, p := range pending {
			if got[p] != "" {
				return fmt.Errorf("%s placed on %s, want it pending: %v", p, got[p], got)
			}
		}
		return nil
	}
}

// onNode limits the pod to node x ("a", "b") of its pool.
func onNode(x string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Spec.NodeSelector[corev1.LabelHostname] = p.Spec.NodeSelector["pool"] + "-" + x }
}

// allowAdminAccess labels both pools' namespaces so that their claims may
// ask for adminAccess (the API server refuses them otherwise), and removes
// the label at cleanup.
func allowAdminAccess(t *testing.T, env *k8senv.Env) func() {
	t.Helper()
	label := func(value *string) {
		for _, pool := range []string{"gpud", "kube"} {
			ns, err := env.Client.CoreV1().Namespaces().Get(context.Background(), "rules-"+pool, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if value == nil {
				delete(ns.Labels, resourceapi.DRAAdminNamespaceLabelKey)
			} else {
				if ns.Labels == nil {
					ns.Labels = map[string]string{}
				}
				ns.Labels[resourceapi.DRAAdminNamespaceLabelKey] = *value
			}
			if _, err := env.Client.CoreV1().Namespaces().Update(context.Background(), ns, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	label(ptr.To("true"))
	return func() { label(nil) }
}

// distinctValues checks that pod's devices differ in attr (read from
// their ResourceSlices).
func distinctValues(pod string, attr resourceapi.FullyQualifiedName) func(*testing.T, *k8senv.Env, string) {
	return func(t *testing.T, env *k8senv.Env, ns string) {
		list, err := env.Client.ResourceV1().ResourceSlices().List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, name, _ := strings.Cut(string(attr), "/")
		value := map[string]string{} // driver/pool/device → attribute
		for _, sl := range list.Items {
			for _, d := range sl.Spec.Devices {
				if a, ok := d.Attributes[resourceapi.QualifiedName(name)]; ok && sl.Spec.Driver+"/"+name == string(attr) {
					value[sl.Spec.Driver+"/"+sl.Spec.Pool.Name+"/"+d.Name] = fmt.Sprint(ptr.Deref(a.IntValue, -1), ptr.Deref(a.StringValue, ""))
				}
			}
		}
		seen := map[string]string{}
		results := claimResults(t, env, ns, pod)
		for _, r := range results {
			v, ok := value[r.Driver+"/"+r.Pool+"/"+r.Device]
			if !ok {
				t.Fatalf("%s: device %s/%s has no %s", pod, r.Pool, r.Device, attr)
			}
			if other, dup := seen[v]; dup {
				t.Errorf("%s: devices %s and %s share %s %s", pod, other, r.Device, attr, v)
			}
			seen[v] = r.Device
		}
		if len(results) == 0 {
			t.Errorf("%s: no devices allocated", pod)
		}
	}
}

// adminResults checks that each pod got n devices, all with adminAccess.
func adminResults(want map[string]int) func(*testing.T, *k8senv.Env, string) {
	return func(t *testing.T, env *k8senv.Env, ns string) {
		for pod, n := range want {
			results := claimResults(t, env, ns, pod)
			if len(results) != n {
				t.Errorf("%s: %d devices, want %d", pod, len(results), n)
			}
			for _, r := range results {
				if !ptr.Deref(r.AdminAccess, false) {
					t.Errorf("%s: device %s allocated without adminAccess", pod, r.Device)
				}
			}
		}
	}
}

// reservedFor checks that claim is reserved for exactly these pods.
func reservedFor(claim string, pods ...string) func(*testing.T, *k8senv.Env, string) {
	return func(t *testing.T, env *k8senv.Env, ns string) {
		cl, err := env.Client.ResourceV1().ResourceClaims(ns).Get(t.Context(), claim, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range cl.Status.ReservedFor {
			got = append(got, r.Name)
		}
		slices.Sort(got)
		want := slices.Sorted(slices.Values(pods))
		if !slices.Equal(got, want) {
			t.Errorf("claim %s reserved for %v, want %v", claim, got, want)
		}
	}
}

// maintenanceTaint is the key of the DeviceTaintRule case's taint.
const maintenanceTaint = "example.com/maintenance"

// taintNodeAGPUs taints every gpud GPU of each pool's node a through a
// DeviceTaintRule (NoSchedule) and deletes the rules at cleanup.
func taintNodeAGPUs(t *testing.T, env *k8senv.Env) func() {
	t.Helper()
	c := env.Client
	var names []string
	for _, pool := range []string{"gpud", "kube"} {
		rule := &resourceapi.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{Name: "maintenance-" + pool + "-a"},
			Spec: resourceapi.DeviceTaintRuleSpec{
				DeviceSelector: &resourceapi.DeviceTaintSelector{Driver: ptr.To("gpu.gpud.io"), Pool: ptr.To(pool + "-a")},
				Taint:          resourceapi.DeviceTaint{Key: maintenanceTaint, Value: "planned", Effect: resourceapi.DeviceTaintEffectNoSchedule}}}
		if _, err := c.ResourceV1().DeviceTaintRules().Create(t.Context(), rule, metav1.CreateOptions{}); err != nil {
			t.Fatalf("DeviceTaintRule %s: %v", rule.Name, err)
		}
		names = append(names, rule.Name)
	}
	// Both schedulers learn of the rules through a watch: give the event
	// time to arrive before the pods do.
	time.Sleep(time.Second)
	return func() {
		for _, n := range names {
			if err := c.ResourceV1().DeviceTaintRules().Delete(context.Background(), n, metav1.DeleteOptions{}); err != nil {
				t.Errorf("delete DeviceTaintRule %s: %v", n, err)
			}
		}
		time.Sleep(time.Second)
	}
}

// runClaimCase creates the case's claims and pods for both schedulers,
// judges both, then deletes them and frees their claims as the resource
// claim controller would, so the next case finds every GPU free.
func runClaimCase(t *testing.T, env *k8senv.Env, tc claimCase) {
	if tc.setup != nil {
		defer tc.setup(t, env)()
	}
	got := map[string]map[string]string{}
	var rps []rulesPod
	for _, cp := range tc.pods {
		rps = append(rps, rulesPod{name: cp.name})
	}
	for _, pool := range []string{"gpud", "kube"} {
		for _, cp := range tc.pods {
			createClaimPod(t, env, pool, cp)
		}
	}
	for _, pool := range []string{"gpud", "kube"} {
		got[pool] = settle(t, env, pool, rps)
	}
	t.Logf("gpud scheduler %v, kube-scheduler %v", got["gpud"], got["kube"])
	for _, pool := range []string{"gpud", "kube"} {
		who := map[string]string{"gpud": "gpud scheduler", "kube": "kube-scheduler (oracle)"}[pool]
		if err := tc.check(got[pool]); err != nil {
			t.Errorf("%s: %v", who, err)
			for pod, node := range got[pool] {
				if node == "" {
					t.Logf("%s: %s waits: %s", who, pod, podMessage(t, env, "rules-"+pool, pod))
				}
			}
		}
		if tc.verify != nil {
			t.Run(who, func(t *testing.T) { tc.verify(t, env, "rules-"+pool) })
		}
	}
	for _, pool := range []string{"gpud", "kube"} {
		freeClaimPods(t, env, "rules-"+pool, tc.pods)
	}
}

func createClaimPod(t *testing.T, env *k8senv.Env, pool string, cp claimPod) {
	t.Helper()
	ns := "rules-" + pool
	var refs []corev1.PodResourceClaim
	for i, spec := range cp.claims {
		name := fmt.Sprintf("%s-%d", cp.name, i)
		c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: resourceapi.ResourceClaimSpec{Devices: spec}}
		if _, err := env.Client.ResourceV1().ResourceClaims(ns).Create(t.Context(), c, metav1.CreateOptions{}); err != nil {
			t.Fatalf("claim %s/%s: %v", ns, name, err)
		}
		refs = append(refs, corev1.PodResourceClaim{Name: fmt.Sprintf("c%d", i), ResourceClaimName: ptr.To(name)})
	}
	for i, spec := range cp.templates {
		name := fmt.Sprintf("%s-t%d", cp.name, i)
		tmpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: spec}}}
		if _, err := env.Client.ResourceV1().ResourceClaimTemplates(ns).Create(t.Context(), tmpl, metav1.CreateOptions{}); err != nil {
			t.Fatalf("claim template %s/%s: %v", ns, name, err)
		}
		refs = append(refs, corev1.PodResourceClaim{Name: fmt.Sprintf("t%d", i), ResourceClaimTemplateName: ptr.To(name)})
	}
	for i, name := range cp.shares {
		refs = append(refs, corev1.PodResourceClaim{Name: fmt.Sprintf("s%d", i), ResourceClaimName: ptr.To(name)})
	}
	createRulesPod(t, env, pool, rulesPod{name: cp.name, after: cp.after, mod: func(p *corev1.Pod) {
		p.Spec.ResourceClaims = refs
		if cp.mod != nil {
			cp.mod(p)
		}
	}})
}

// freeClaimPods deletes the pods, then deallocates and deletes their
// claims and templates, as the resource claim controller would (it runs
// here, and may get there first).
func freeClaimPods(t *testing.T, env *k8senv.Env, ns string, pods []claimPod) {
	t.Helper()
	c := env.Client
	var claims []string
	for _, cp := range pods {
		for i := range cp.claims {
			claims = append(claims, fmt.Sprintf("%s-%d", cp.name, i))
		}
		if len(cp.templates) > 0 {
			p, err := c.CoreV1().Pods(ns).Get(t.Context(), cp.name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, st := range p.Status.ResourceClaimStatuses {
				if st.ResourceClaimName != nil {
					claims = append(claims, *st.ResourceClaimName)
				}
			}
		}
	}
	for _, cp := range pods {
		if err := c.CoreV1().Pods(ns).Delete(t.Context(), cp.name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
		for i := range cp.templates {
			name := fmt.Sprintf("%s-t%d", cp.name, i)
			if err := c.ResourceV1().ResourceClaimTemplates(ns).Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
				t.Fatalf("delete claim template %s/%s: %v", ns, name, err)
			}
		}
	}
	for _, name := range claims {
		testwait.For(t, 10*time.Second, "claim "+ns+"/"+name+" freed", func() bool {
			cl, err := c.ResourceV1().ResourceClaims(ns).Get(t.Context(), name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true
			}
			if err != nil {
				return false
			}
			// A failed update (a conflict) is tried again on the next poll.
			switch {
			case len(cl.Status.ReservedFor) > 0:
				cl.Status.ReservedFor = nil
				_, _ = c.ResourceV1().ResourceClaims(ns).UpdateStatus(t.Context(), cl, metav1.UpdateOptions{})
				return false
			case cl.Status.Allocation != nil:
				cl.Status.Allocation = nil
				_, _ = c.ResourceV1().ResourceClaims(ns).UpdateStatus(t.Context(), cl, metav1.UpdateOptions{})
				return false
			case len(cl.Finalizers) > 0:
				cl.Finalizers = nil
				_, _ = c.ResourceV1().ResourceClaims(ns).Update(t.Context(), cl, metav1.UpdateOptions{})
				return false
			}
			err = c.ResourceV1().ResourceClaims(ns).Delete(t.Context(), name, metav1.DeleteOptions{})
			return err == nil || apierrors.IsNotFound(err)
		})
	}
}

// claimResults lists a bound pod's claims' device results.
func claimResults(t *testing.T, env *k8senv.Env, ns, pod string) []resourceapi.DeviceRequestAllocationResult {
	t.Helper()
	p, err := env.Client.CoreV1().Pods(ns).Get(t.Context(), pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []resourceapi.DeviceRequestAllocationResult
	for _, rc := range p.Spec.ResourceClaims {
		name := ptr.Deref(rc.ResourceClaimName, "")
		for _, st := range p.Status.ResourceClaimStatuses { // made from a template
			if st.Name == rc.Name && st.ResourceClaimName != nil {
				name = *st.ResourceClaimName
			}
		}
		if name == "" {
			t.Fatalf("%s: claim %s has no name yet", pod, rc.Name)
		}
		cl, err := env.Client.ResourceV1().ResourceClaims(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cl.Status.Allocation != nil {
			out = append(out, cl.Status.Allocation.Devices.Results...)
		}
	}
	return out
}

// resultCounts checks that each bound pod got n devices.
func resultCounts(want map[string]int) func(*testing.T, *k8senv.Env, string) {
	return func(t *testing.T, env *k8senv.Env, ns string) {
		for pod, n := range want {
			p, err := env.Client.CoreV1().Pods(ns).Get(t.Context(), pod, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if p.Spec.NodeName == "" {
				continue
			}
			if got := len(claimResults(t, env, ns, pod)); got != n {
				t.Errorf("%s: %d devices, want %d", pod, got, n)
			}
		}
	}
}

// requestNames checks each pod's results' request names, in order.
func requestNames(want map[string]string) func(*testing.T, *k8senv.Env, string) {
	return func(t *testing.T, env *k8senv.Env, ns string) {
		got := map[string]string{}
		for pod := range want {
			var names []string
			for _, r := range claimResults(t, env, ns, pod) {
				names = append(names, r.Request)
			}
			got[pod] = strings.Join(names, " ")
		}
		if !maps.Equal(got, want) {
			t.Errorf("requests %v, want %v", got, want)
		}
	}
}
