package test

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpud/gpud/internal/testwait"
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
	for _, obj := range draManifests(t, "../deploy/dra/deviceclasses.yaml") {
		if dc, ok := obj.(*resourceapi.DeviceClass); ok {
			if _, err := c.ResourceV1().DeviceClasses().Create(t.Context(), dc, metav1.CreateOptions{}); err != nil {
				t.Fatalf("DeviceClass %s: %v", dc.Name, err)
			}
		}
	}
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
	return []claimCase{
		{name: "allocationMode All", pods: []claimPod{{"all-0", []resourceapi.DeviceClaim{all}}, {"all-1", []resourceapi.DeviceClaim{all}},
			{"all-2", []resourceapi.DeviceClaim{all}}},
			check: perNode("a=1 b=1 pending=1", true), verify: resultCounts(map[string]int{"all-0": 8, "all-1": 8, "all-2": 8})},
		{name: "firstAvailable", pods: []claimPod{{"fa", []resourceapi.DeviceClaim{{Requests: []resourceapi.DeviceRequest{{Name: "gpu",
			FirstAvailable: []resourceapi.DeviceSubRequest{
				{Name: "sixteen", DeviceClassName: "gpu.gpud.io", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 16},
				{Name: "two", DeviceClassName: "gpu.gpud.io", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 2}}}}}}}},
			check: perNode("a=1", true), verify: requestNames(map[string]string{"fa": "gpu/two gpu/two"})},
		{name: "matchAttribute across requests", pods: []claimPod{{"pair", []resourceapi.DeviceClaim{{
			Requests:    []resourceapi.DeviceRequest{one("first", 1), one("second", 1)},
			Constraints: []resourceapi.DeviceConstraint{{MatchAttribute: &domain}}}}}},
			check: perNode("a=1", true), verify: requestNames(map[string]string{"pair": "first second"})},
		{name: "GPU and another driver's NIC", pods: []claimPod{
			{"gn-0", []resourceapi.DeviceClaim{{Requests: []resourceapi.DeviceRequest{one("gpu", 1)}},
				{Requests: []resourceapi.DeviceRequest{claimReq("nic", nicDriver, 1, resourceapi.DeviceAllocationModeExactCount)}}}},
			{"gn-1", []resourceapi.DeviceClaim{{Requests: []resourceapi.DeviceRequest{one("gpu", 1)}},
				{Requests: []resourceapi.DeviceRequest{claimReq("nic", nicDriver, 1, resourceapi.DeviceAllocationModeExactCount)}}}}},
			check: perNode("b=1 pending=1", false)},
		// An admin's DeviceTaintRule on node a's GPUs: a pod whose request
		// does not tolerate the taint may not get them...
		{name: "DeviceTaintRule", setup: taintNodeAGPUs, pods: []claimPod{{"untol-0", []resourceapi.DeviceClaim{eight}},
			{"untol-1", []resourceapi.DeviceClaim{eight}}},
			check: func(got map[string]string) error {
				if got["untol-0"] == "a" || got["untol-1"] == "a" {
					return fmt.Errorf("a pod that does not tolerate the taint got node a's tainted GPUs: %v", got)
				}
				return perNode("b=1 pending=1", false)(got)
			}},
		// ...and one whose request tolerates it may.
		{name: "DeviceTaintRule tolerated", setup: taintNodeAGPUs, pods: []claimPod{{"tol-0", []resourceapi.DeviceClaim{eightTolerating}},
			{"tol-1", []resourceapi.DeviceClaim{eightTolerating}}},
			check: perNode("a=1 b=1", false)},
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
	createRulesPod(t, env, pool, rulesPod{name: cp.name, mod: func(p *corev1.Pod) { p.Spec.ResourceClaims = refs }})
}

// freeClaimPods deletes the pods, then deallocates and deletes their
// claims (no resource claim controller runs here).
func freeClaimPods(t *testing.T, env *k8senv.Env, ns string, pods []claimPod) {
	t.Helper()
	c := env.Client
	for _, cp := range pods {
		if err := c.CoreV1().Pods(ns).Delete(t.Context(), cp.name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, cp := range pods {
		for i := range cp.claims {
			name := fmt.Sprintf("%s-%d", cp.name, i)
			testwait.For(t, 10*time.Second, "claim "+ns+"/"+name+" freed", func() bool {
				cl, err := c.ResourceV1().ResourceClaims(ns).Get(t.Context(), name, metav1.GetOptions{})
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
				return c.ResourceV1().ResourceClaims(ns).Delete(t.Context(), name, metav1.DeleteOptions{}) == nil
			})
		}
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
		cl, err := env.Client.ResourceV1().ResourceClaims(ns).Get(t.Context(), *rc.ResourceClaimName, metav1.GetOptions{})
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
