package test

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	schedulingv1 "k8s.io/api/scheduling/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/test/k8senv"
)

// TestElasticGangPreemption runs an elastic gang on the real API server:
// a PodGroup of minCount 2 whose four 2-GPU pods fill a simulated DGX
// H100. A high-priority pod that needs the room of two members preempts
// exactly two of them through the Eviction API; the gang's other two (its
// minimum) keep running, and nothing else is evicted once the preemptor
// is bound. The test acts as the kubelet (victims deleted) and as the
// resourceclaim controller (their claims released).
func TestElasticGangPreemption(t *testing.T) {
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

	// The elastic gang: minCount 2, four members of 2 GPUs each.
	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "elastic"},
		Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
			Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 2}}}}
	if _, err := c.SchedulingV1beta1().PodGroups(pg.Namespace).Create(ctx, pg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var members []schedPod
	for i := range 4 {
		members = append(members, schedPod{name: fmt.Sprintf("elastic-%d", i), example: "whole-gpu", count: 2,
			group: "elastic", priorityClass: "low"})
	}
	for _, p := range members {
		createSchedPod(t, env, p)
	}
	for _, p := range members {
		env.WaitForPodBound(t, metav1.NamespaceDefault, p.name, schedTimeout)
	}

	high := schedPod{name: "high", example: "two-gpus-nvlink", count: 4, priorityClass: "high"}
	createSchedPod(t, env, high)
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
	t.Logf("preempted for the high-priority pod: %v", victims)
	if len(victims) != 2 {
		t.Errorf("%d victims, want exactly 2 (the room of two members, beyond the gang's minCount 2)", len(victims))
	}
	var kept []schedPod
	for _, p := range members {
		if !victims[p.name] {
			kept = append(kept, p)
		}
	}
	for v := range victims {
		if !slices.ContainsFunc(members, func(p schedPod) bool { return p.name == v }) {
			t.Errorf("victim %s is not a member of the elastic gang", v)
		}
		if !eventFor(t, env, v, "Preempted") {
			t.Errorf("no Preempted event for victim %s", v)
		}
	}
	// Cycles run every resync (2s): the gang's minimum runs on through
	// several of them.
	time.Sleep(5 * time.Second)
	for _, p := range kept {
		pod, err := c.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, p.name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("gang member %s: %v", p.name, err)
		}
		if pod.Spec.NodeName == "" || pod.DeletionTimestamp != nil {
			t.Errorf("gang member %s (the gang's minimum) on %q, deleting %v: want it running", p.name, pod.Spec.NodeName, pod.DeletionTimestamp != nil)
		}
	}
	checkSchedAllocations(t, env, append([]schedPod{high}, kept...))
}
