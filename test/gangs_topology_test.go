package test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpud/gpud/test/k8senv"
)

// TestGangTopologyRequiredRack runs gangs that name a topology level on
// the real API server, on two simulated DGX H100 nodes labelled with two
// racks (topology.gpud.io/rack, the default --rack-label). A gang of two
// 6-GPU pods whose PodGroup requires the rack level
// (gpud.io/gang-topology: rack) cannot fit in one rack: it waits, its
// pods' PodScheduled condition naming the level and the annotation, where
// gpud's own order would spread it over both racks. A PodGroup with a bad
// mode waits with a reason naming the annotation and the values allowed.
// Once both nodes are labelled into one rack the required gang binds.
func TestGangTopologyRequiredRack(t *testing.T) {
	t.Parallel() // only its own etcd, API server and processes: see TestMain
	if testing.Short() {
		t.Skip("runs kube-apiserver, two gpud agents and gpud scheduler")
	}
	bin := buildGpud(t)
	env := k8senv.Start(t, k8senv.WithoutScheduler())
	c := env.Client
	ctx := t.Context()
	createDeviceClasses(t, c)
	kubeconfig := schedulerIdentity(t, env)
	nodes := []*schedNode{{name: "node-r1", profile: "dgx-h100"}, {name: "node-r2", profile: "dgx-h100"}}
	for i, n := range nodes {
		startSchedAgent(t, env, bin, n)
		setRack(t, env, n.name, fmt.Sprint("r", i+1))
	}
	for _, n := range nodes {
		waitGPUs(t, env, schedTimeout, 8, n.name)
	}
	sched := startSchedulerProc(t, bin, filepath.Join(shortDir(t), "s"), kubeconfig)
	waitForLeader(t, []*schedProc{sched}, nil)

	createTopoGang(t, env, "racked", map[string]string{"gpud.io/gang-topology": "rack"})
	for _, name := range []string{"racked-0", "racked-1"} {
		// A cycle may see the first member alone ("1 of minMember 2 pods
		// exist"); the reason once both exist names the rack level.
		msg := env.WaitForPodUnschedulableWith(t, metav1.NamespaceDefault, name, schedTimeout, "within one rack", "annotation gpud.io/gang-topology on")
		t.Logf("%s: %s", name, msg)
	}
	createTopoGang(t, env, "bad", map[string]string{"gpud.io/gang-topology": "rack", "gpud.io/gang-topology-mode": "hard"})
	msg := env.WaitForPodUnschedulable(t, metav1.NamespaceDefault, "bad-0", schedTimeout)
	t.Logf("bad-0: %s", msg)
	if !strings.Contains(msg, "gpud.io/gang-topology-mode") || !strings.Contains(msg, "required (the default) or preferred") {
		t.Errorf("bad-0 pending with %q, want the annotation and its allowed values", msg)
	}
	if err := c.SchedulingV1beta1().PodGroups(metav1.NamespaceDefault).Delete(ctx, "bad", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"bad-0", "bad-1"} {
		if err := c.CoreV1().Pods(metav1.NamespaceDefault).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// Both nodes in rack r1: the required gang fits within one rack.
	setRack(t, env, "node-r2", "r1")
	for _, name := range []string{"racked-0", "racked-1"} {
		env.WaitForPodBound(t, metav1.NamespaceDefault, name, schedTimeout)
	}
	checkSchedAllocations(t, env, []schedPod{{name: "racked-0"}, {name: "racked-1"}})
}

// createTopoGang creates a scheduling.k8s.io PodGroup of minCount 2 with
// annotations, and its two 6-GPU pods (<name>-0, <name>-1).
func createTopoGang(t *testing.T, env *k8senv.Env, name string, annotations map[string]string) {
	t.Helper()
	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name, Annotations: annotations},
		Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
			Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 2}}}}
	if _, err := env.Client.SchedulingV1beta1().PodGroups(pg.Namespace).Create(t.Context(), pg, metav1.CreateOptions{}); err != nil {
		t.Fatalf("PodGroup %s: %v", name, err)
	}
	for i := range 2 {
		createSchedPod(t, env, schedPod{name: fmt.Sprintf("%s-%d", name, i), example: "whole-gpu", count: 6, group: name})
	}
}

// setRack labels node with rack (topology.gpud.io/rack).
func setRack(t *testing.T, env *k8senv.Env, node, rack string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"labels":{"topology.gpud.io/rack":%q}}}`, rack)
	if _, err := env.Client.CoreV1().Nodes().Patch(t.Context(), node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}
