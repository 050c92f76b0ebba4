package test

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/test/k8senv"
)

// testExtendedResource: pods asking for the extended resource
// nvidia.com/gpu, which no node advertises and gpud's DeviceClass
// gpu.gpud.io serves (extendedResourceName), as on a DRA node. Both
// schedulers must write each bound pod a claim for its GPUs and map the
// container's resource to it in the pod's status, which the kubelet reads.
// Three pods of 8 GPUs on two 8-GPU nodes: one per node, one pending.
func testExtendedResource(t *testing.T, env *k8senv.Env) {
	c := env.Client
	eight := func(p *corev1.Pod) {
		q := resource.MustParse("8")
		p.Spec.Containers[0].Resources.Requests["nvidia.com/gpu"] = q
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": q}
	}
	pods := []rulesPod{{name: "er-0", mod: eight}, {name: "er-1", mod: eight}, {name: "er-2", mod: eight}}
	for _, pool := range []string{"gpud", "kube"} {
		for _, p := range pods {
			createRulesPod(t, env, pool, p)
		}
	}
	for _, pool := range []string{"gpud", "kube"} {
		who := map[string]string{"gpud": "gpud scheduler", "kube": "kube-scheduler (oracle)"}[pool]
		ns := "rules-" + pool
		got := settle(t, env, pool, pods)
		t.Logf("%s: %v", who, got)
		if err := perNode("a=1 b=1 pending=1", true)(got); err != nil {
			t.Errorf("%s: %v", who, err)
		}
		for _, rp := range pods {
			if got[rp.name] == "" {
				continue
			}
			if err := extendedClaimOK(t, env, ns, rp.name, 8); err != nil {
				t.Errorf("%s: %v", who, err)
			}
		}
	}
	for _, pool := range []string{"gpud", "kube"} {
		ns := "rules-" + pool
		for _, rp := range pods {
			if err := c.CoreV1().Pods(ns).Delete(t.Context(), rp.name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
				t.Fatal(err)
			}
		}
		freeExtendedClaims(t, env, ns)
	}
}

// extendedClaimOK checks a bound pod's status names a claim of its own
// with the extended-resource annotation, allocated n devices and reserved
// for the pod, and maps container c's nvidia.com/gpu to its request.
func extendedClaimOK(t *testing.T, env *k8senv.Env, ns, name string, n int) error {
	t.Helper()
	var p *corev1.Pod
	// The mapping is written before the Binding; give the informer-fed
	// read a moment anyway.
	testwait.For(t, 10*time.Second, ns+"/"+name+" extendedResourceClaimStatus", func() bool {
		var err error
		p, err = env.Client.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
		return err == nil && p.Status.ExtendedResourceClaimStatus != nil
	})
	st := p.Status.ExtendedResourceClaimStatus
	if len(st.RequestMappings) != 1 || st.RequestMappings[0].ContainerName != "c" || st.RequestMappings[0].ResourceName != "nvidia.com/gpu" {
		return fmt.Errorf("%s: request mappings %+v, want container c's nvidia.com/gpu", name, st.RequestMappings)
	}
	cl, err := env.Client.ResourceV1().ResourceClaims(ns).Get(t.Context(), st.ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("%s: claim %s: %w", name, st.ResourceClaimName, err)
	}
	switch {
	case cl.Annotations[resourceapi.ExtendedResourceClaimAnnotation] != "true":
		return fmt.Errorf("%s: claim %s lacks the extended-resource annotation", name, cl.Name)
	case len(cl.OwnerReferences) != 1 || cl.OwnerReferences[0].UID != p.UID:
		return fmt.Errorf("%s: claim %s owners %+v, want the pod", name, cl.Name, cl.OwnerReferences)
	case cl.Status.Allocation == nil || len(cl.Status.Allocation.Devices.Results) != n:
		return fmt.Errorf("%s: claim %s allocation %+v, want %d devices", name, cl.Name, cl.Status.Allocation, n)
	case len(cl.Status.ReservedFor) != 1 || cl.Status.ReservedFor[0].UID != p.UID:
		return fmt.Errorf("%s: claim %s reservedFor %+v, want the pod", name, cl.Name, cl.Status.ReservedFor)
	case cl.Status.Allocation.Devices.Results[0].Request != st.RequestMappings[0].RequestName:
		return fmt.Errorf("%s: claim %s results for request %q, the status maps %q", name, cl.Name,
			cl.Status.Allocation.Devices.Results[0].Request, st.RequestMappings[0].RequestName)
	}
	return nil
}

// freeExtendedClaims deallocates and deletes every extended-resource
// claim in ns (the garbage collector would once their pods are gone; none
// runs here).
func freeExtendedClaims(t *testing.T, env *k8senv.Env, ns string) {
	t.Helper()
	c := env.Client
	testwait.For(t, 20*time.Second, "extended-resource claims in "+ns+" freed", func() bool {
		list, err := c.ResourceV1().ResourceClaims(ns).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			return false
		}
		left := 0
		for i := range list.Items {
			cl := &list.Items[i]
			if cl.Annotations[resourceapi.ExtendedResourceClaimAnnotation] != "true" {
				continue
			}
			left++
			// A failed update (a conflict) is tried again on the next poll.
			switch {
			case len(cl.Status.ReservedFor) > 0 || cl.Status.Allocation != nil:
				cl.Status.ReservedFor, cl.Status.Allocation = nil, nil
				_, _ = c.ResourceV1().ResourceClaims(ns).UpdateStatus(t.Context(), cl, metav1.UpdateOptions{})
			case len(cl.Finalizers) > 0:
				cl.Finalizers = nil
				_, _ = c.ResourceV1().ResourceClaims(ns).Update(t.Context(), cl, metav1.UpdateOptions{})
			default:
				_ = c.ResourceV1().ResourceClaims(ns).Delete(t.Context(), cl.Name, metav1.DeleteOptions{})
			}
		}
		return left == 0
	})
}

// testExtendedResourcePerNode: node a of each pool becomes a device-plugin
// node (allocatable nvidia.com/gpu: 8, its ResourceSlices gone), node b
// stays a DRA node (gpud's slices, no nvidia.com/gpu in allocatable).
// kube-scheduler v1.37 decides per node: on a the device plugin's count
// serves the pod and no claim is made, on b the DeviceClass serves it
// through a claim. Six pods of 3 GPUs: two per node, two pending, and
// claims only for the pods on b — under both schedulers.
func testExtendedResourcePerNode(t *testing.T, env *k8senv.Env) {
	c := env.Client
	var saved []*resourceapi.ResourceSlice
	all, err := c.ResourceV1().ResourceSlices().List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pluginNodes := map[string]bool{"gpud-a": true, "kube-a": true}
	for i := range all.Items {
		s := &all.Items[i]
		if s.Spec.NodeName == nil || !pluginNodes[*s.Spec.NodeName] {
			continue
		}
		if err := c.ResourceV1().ResourceSlices().Delete(t.Context(), s.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		cp := s.DeepCopy()
		cp.ObjectMeta = metav1.ObjectMeta{Name: s.Name, Labels: s.Labels, OwnerReferences: s.OwnerReferences}
		saved = append(saved, cp)
	}
	if len(saved) == 0 {
		t.Fatal("no ResourceSlices on nodes a to take away")
	}
	setPluginGPUs := func(n int64) {
		for name := range pluginNodes {
			node, err := c.CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if n > 0 {
				node.Status.Capacity["nvidia.com/gpu"] = *resource.NewQuantity(n, resource.DecimalSI)
				node.Status.Allocatable["nvidia.com/gpu"] = *resource.NewQuantity(n, resource.DecimalSI)
			} else {
				delete(node.Status.Capacity, "nvidia.com/gpu")
				delete(node.Status.Allocatable, "nvidia.com/gpu")
			}
			if _, err := c.CoreV1().Nodes().UpdateStatus(t.Context(), node, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	setPluginGPUs(8)
	defer func() {
		setPluginGPUs(0)
		for _, s := range saved {
			if _, err := c.ResourceV1().ResourceSlices().Create(t.Context(), s, metav1.CreateOptions{}); err != nil {
				t.Errorf("restore slice %s: %v", s.Name, err)
			}
		}
	}()
	// Both schedulers see the device-plugin node before the pods come.
	time.Sleep(3 * time.Second)

	three := func(p *corev1.Pod) {
		q := resource.MustParse("3")
		p.Spec.Containers[0].Resources.Requests["nvidia.com/gpu"] = q
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": q}
	}
	var pods []rulesPod
	for i := range 6 {
		pods = append(pods, rulesPod{name: fmt.Sprintf("dp-%d", i), mod: three})
	}
	for _, pool := range []string{"gpud", "kube"} {
		for _, p := range pods {
			createRulesPod(t, env, pool, p)
		}
	}
	for _, pool := range []string{"gpud", "kube"} {
		who := map[string]string{"gpud": "gpud scheduler", "kube": "kube-scheduler (oracle)"}[pool]
		ns := "rules-" + pool
		got := settle(t, env, pool, pods)
		t.Logf("%s: %v", who, got)
		if err := perNode("a=2 b=2 pending=2", false)(got); err != nil {
			t.Errorf("%s: %v", who, err)
		}
		claims, err := c.ResourceV1().ResourceClaims(ns).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, rp := range pods {
			switch got[rp.name] {
			case "b":
				if err := extendedClaimOK(t, env, ns, rp.name, 3); err != nil {
					t.Errorf("%s: %v", who, err)
				}
			case "a":
				p, err := c.CoreV1().Pods(ns).Get(t.Context(), rp.name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if p.Status.ExtendedResourceClaimStatus != nil {
					t.Errorf("%s: %s on the device-plugin node has extendedResourceClaimStatus %+v, want none", who, rp.name, p.Status.ExtendedResourceClaimStatus)
				}
				for _, cl := range claims.Items {
					if len(cl.OwnerReferences) > 0 && cl.OwnerReferences[0].UID == p.UID {
						t.Errorf("%s: %s on the device-plugin node owns claim %s, want none", who, rp.name, cl.Name)
					}
				}
			}
		}
	}
	for _, pool := range []string{"gpud", "kube"} {
		ns := "rules-" + pool
		for _, rp := range pods {
			if err := c.CoreV1().Pods(ns).Delete(t.Context(), rp.name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
				t.Fatal(err)
			}
		}
		freeExtendedClaims(t, env, ns)
	}
}
