package test

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/test/k8senv"
)

// TestSchedulerPreemption fills a simulated DGX H100 with low-priority
// whole-GPU pods, then submits a high-priority pod of two GPUs on one
// NVLink domain: the scheduler evicts exactly two victims through the
// Eviction API, nominates the node, and binds the pod once the victims are
// gone. Then a gang of two 3-GPU pods holds nothing while only one member
// fits, and binds whole when the node frees. The test acts as the kubelet (victims deleted) and as
// kube-controller-manager's resourceclaim controller (their claims
// released), which the environment lacks.
func TestSchedulerPreemption(t *testing.T) {
	t.Parallel() // only its own etcd, API server and processes: see TestMain
	if testing.Short() {
		t.Skip("runs kube-apiserver, a gpud agent and gpud scheduler")
	}
	bin := buildGpud(t)
	env := k8senv.Start(t, k8senv.WithoutScheduler())
	c := env.Client
	ctx := t.Context()
	createDeviceClasses(t, c)
	for name, value := range map[string]int32{"low": 10, "high": 1000} {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
		if _, err := c.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	kubeconfig := schedulerIdentity(t, env)
	n := &schedNode{name: "node-h100", profile: "dgx-h100", migProf: "1g.10gb"}
	startSchedAgent(t, env, bin, n)
	waitGPUs(t, env, schedTimeout, 8, n.name)
	sched := startSchedulerProc(t, bin, filepath.Join(shortDir(t), "s"), kubeconfig)
	waitForLeader(t, []*schedProc{sched}, nil)

	var low []schedPod
	for i := range 8 {
		low = append(low, schedPod{name: fmt.Sprintf("low-%d", i), example: "whole-gpu", priorityClass: "low"})
	}
	for _, p := range low {
		createSchedPod(t, env, p)
	}
	for _, p := range low {
		env.WaitForPodBound(t, metav1.NamespaceDefault, p.name, schedTimeout)
	}
	high := schedPod{name: "high", example: "two-gpus-nvlink", priorityClass: "high"}
	createSchedPod(t, env, high)

	// The victims terminate (no kubelet finishes them), the preemptor
	// waits nominated to their node.
	var nominated string
	testwait.For(t, schedTimeout, "the high-priority pod nominated", func() bool {
		p, err := c.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, "high", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Spec.NodeName != "" {
			t.Fatalf("high-priority pod bound to %s while its victims still run", p.Spec.NodeName)
		}
		nominated = p.Status.NominatedNodeName
		return nominated != ""
	})

	// The kubelet and the resourceclaim controller: victims go, their
	// claims are released.
	victims := map[string]bool{}
	testwait.For(t, schedTimeout, "the high-priority pod bound", func() bool {
		pods, err := c.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.Name == "high" && p.Spec.NodeName != "" {
				return true
			}
			if p.DeletionTimestamp == nil {
				continue
			}
			victims[p.Name] = true
			releaseClaims(t, env, p)
			if err := c.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
		}
		return false
	})
	t.Logf("preempted %d pods for the high-priority pod (nominated to %q): %v", len(victims), nominated, victims)
	if len(victims) != 2 {
		t.Errorf("%d victims, want exactly 2 (two GPUs)", len(victims))
	}
	if nominated != n.name {
		t.Errorf("nominatedNodeName seen %q, want %s", nominated, n.name)
	}
	for v := range victims {
		if !eventFor(t, env, v, "Preempted") {
			t.Errorf("no Preempted event for victim %s", v)
		}
	}
	checkSchedAllocations(t, env, []schedPod{high})

	// A gang of two 3-GPU pods on the full node: it holds nothing while
	// only one member fits (3 GPUs freed), and binds whole once the other
	// 3 are free.
	gang := []schedPod{{name: "gang-0", example: "two-gpus-nvlink", count: 3, priorityClass: "low"},
		{name: "gang-1", example: "two-gpus-nvlink", count: 3, priorityClass: "low"}}
	createGang(t, env, "gang", gang)
	var rest []string
	for _, p := range low {
		if !victims[p.name] {
			rest = append(rest, p.name)
		}
	}
	release := func(names []string) {
		for _, name := range names {
			p, err := c.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			releaseClaims(t, env, p)
			if err := c.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	release(rest[:3])
	for _, p := range gang {
		msg := env.WaitForPodUnschedulable(t, metav1.NamespaceDefault, p.name, schedTimeout)
		if !strings.Contains(msg, "gang") {
			t.Errorf("gang pod %s pending with %q, want the gang's reason", p.name, msg)
		}
	}
	// Two more cycles with the room for one member: still nothing held.
	time.Sleep(3 * time.Second)
	for _, p := range gang {
		pod, err := c.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, p.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cl, err := c.ResourceV1().ResourceClaims(metav1.NamespaceDefault).Get(ctx, p.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pod.Spec.NodeName != "" || cl.Status.Allocation != nil {
			t.Fatalf("gang member %s bound to %q / claim allocated while only one member fits", p.name, pod.Spec.NodeName)
		}
	}
	freed := time.Now()
	release(rest[3:])
	for _, p := range gang {
		env.WaitForPodBound(t, metav1.NamespaceDefault, p.name, schedTimeout)
	}
	t.Logf("gang of 2 bound %s after the node freed", time.Since(freed).Round(time.Millisecond))
	checkSchedAllocations(t, env, append([]schedPod{high}, gang...))
}

// releaseClaims does what kube-controller-manager's resourceclaim
// controller does for a pod that is going away: the pod leaves its claims'
// reservedFor, and a claim nobody reserves any more is deallocated.
func releaseClaims(t *testing.T, env *k8senv.Env, pod *corev1.Pod) {
	t.Helper()
	for _, rc := range pod.Spec.ResourceClaims {
		if rc.ResourceClaimName == nil {
			continue
		}
		cl, err := env.Client.ResourceV1().ResourceClaims(pod.Namespace).Get(t.Context(), *rc.ResourceClaimName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cl.Status.ReservedFor = slices.DeleteFunc(cl.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool { return r.UID == pod.UID })
		if len(cl.Status.ReservedFor) == 0 {
			cl.Status.Allocation = nil
		}
		cl, err = env.Client.ResourceV1().ResourceClaims(pod.Namespace).UpdateStatus(t.Context(), cl, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cl.Status.Allocation == nil {
			cl.Finalizers = slices.DeleteFunc(cl.Finalizers, func(f string) bool { return f == resourceapi.Finalizer })
			if _, err := env.Client.ResourceV1().ResourceClaims(pod.Namespace).Update(t.Context(), cl, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// eventFor reports whether the scheduler reported an event with reason
// for pod.
func eventFor(t *testing.T, env *k8senv.Env, pod, reason string) bool {
	t.Helper()
	list, err := env.Client.EventsV1().Events(metav1.NamespaceDefault).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(list.Items, func(e eventsv1.Event) bool {
		return e.Regarding.Name == pod && e.Reason == reason && e.ReportingController == schedName
	})
}
