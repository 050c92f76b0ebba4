package test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpud/gpud/test/k8senv"
	"github.com/gpud/gpud/test/nodeenv"
)

// TestNodeDRA runs `gpud agent --kubelet-api dra --simulate dgx-h100` on a
// real node with kube-scheduler and kube-controller-manager, applies the
// shipped DeviceClasses and examples as a user would (the pods' container
// swapped for the probe), and checks what the user sees: a whole-GPU pod
// and a fraction pod run, each able to open exactly one GPU; a plain
// nvidia.com/gpu: 1 pod is served through the DRA class; after kubelet
// restarts and an agent restart (gpud's plugin registered exactly once
// each time) the pods run on and a new claim is served.
func TestNodeDRA(t *testing.T) {
	nodeenv.Require(t)
	k := k8senv.Start(t)
	n := nodeenv.Start(t, k, nodeenv.WithControllerManager())
	createDeviceClasses(t, k.Client)
	agentArgs := []string{"--kubelet-api=dra", "--simulate=dgx-h100", "--sim-dev-root=/run/gpud/dev", "--kubeconfig=" + k.Kubeconfig}
	agent := startNodeAgent(t, n, agentArgs...)
	waitGPUs(t, k, draTimeout, 8, n.Name)

	ran := map[string]bool{} // pods that ran, checked again after restarts
	run := func(t *testing.T, example, name string) {
		t.Helper()
		defer func() {
			if !ran[name] { // free its claim's GPU for the next subtests
				deletePod(t, k, name)
			}
		}()
		r := runDRAExample(t, n, example, name)
		ran[name] = true
		if got := openableGPUs(r); len(got) != 1 {
			t.Errorf("pod %s (%s) can open %v (all: %v), want exactly one GPU", name, example, got, r.Opens)
		}
		t.Logf("pod %s (%s) opens %v; env %v", name, example, openableGPUs(r), r.Env)
	}
	t.Run("whole GPU", func(t *testing.T) { run(t, "whole-gpu", "whole") })
	t.Run("fraction", func(t *testing.T) { run(t, "fraction-20gi", "fraction") })
	t.Run("extended resource", func(t *testing.T) {
		defer func() {
			if !ran["plain-gpu"] {
				deletePod(t, k, "plain-gpu")
			}
		}()
		r := runProbePod(t, n, "plain-gpu", gpus(1))
		ran["plain-gpu"] = true
		if got := openableGPUs(r); len(got) != 1 {
			t.Errorf("a pod with %s: 1 on a DRA node can open %v, want exactly one GPU", gpuResource, got)
		}
	})

	stillRunning := func(t *testing.T) {
		t.Helper()
		for name := range ran {
			p, err := k.Client.CoreV1().Pods("default").Get(t.Context(), name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if p.Status.Phase != corev1.PodRunning || p.Status.ContainerStatuses[0].RestartCount != 0 {
				t.Errorf("pod %s is %s with %d restarts, want Running, untouched", name, p.Status.Phase, p.Status.ContainerStatuses[0].RestartCount)
			}
		}
	}
	draCount := func(seg string) int { return draRegistrations(seg, draDriver) }
	if got := waitRegistrations(t, n, draCount, 1, time.Minute); got != 1 {
		t.Errorf("kubelet start 1: gpud's DRA plugin registered %d times, want once", got)
	}
	t.Run("kubelet restarts", func(t *testing.T) {
		for i := 1; i <= 3; i++ {
			if err := n.RestartKubelet(); err != nil {
				t.Fatal(err)
			}
			if err := n.WaitReady(2 * time.Minute); err != nil {
				t.Fatal(err)
			}
			if got := waitRegistrations(t, n, draCount, 1, time.Minute); got != 1 {
				t.Errorf("kubelet restart %d: gpud's DRA plugin registered %d times, want once", i, got)
			}
		}
		stillRunning(t)
		run(t, "whole-gpu", "after-kubelet-restarts")
	})
	t.Run("agent restart", func(t *testing.T) {
		agent.Stop(10 * time.Second)
		before := draCount(lastSegment(t, n))
		agent = startNodeAgent(t, n, agentArgs...)
		if got := waitRegistrations(t, n, draCount, before+1, time.Minute) - before; got != 1 {
			t.Errorf("a restarted agent's DRA plugin registered %d times, want once", got)
		}
		stillRunning(t)
		run(t, "whole-gpu", "after-agent-restart")
	})
}

// runDRAExample creates deploy/dra/examples/<example>.yaml's
// ResourceClaimTemplate and Pod (named name, its container the probe, on
// n, with host network), edits applied to the pod (its schedulerName,
// say), and waits until the pod runs and has reported.
func runDRAExample(t *testing.T, n *nodeenv.Node, example, name string, edits ...func(*corev1.Pod)) *nodeenv.ProbeReport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var tmpl *resourceapi.ResourceClaimTemplate
	var pod *corev1.Pod
	for _, obj := range draManifests(t, "../deploy/dra/examples/"+example+".yaml") {
		switch o := obj.(type) {
		case *resourceapi.ResourceClaimTemplate:
			tmpl = o
		case *corev1.Pod:
			pod = o
		}
	}
	if tmpl == nil || pod == nil || len(pod.Spec.ResourceClaims) != 1 {
		t.Fatalf("example %s: want a ResourceClaimTemplate and a Pod with one claim", example)
	}
	tmpl.Name, tmpl.Namespace = name, "default"
	probe := n.ProbePod("default", name, nil)
	probe.Spec.ResourceClaims = pod.Spec.ResourceClaims
	probe.Spec.ResourceClaims[0].ResourceClaimTemplateName = &tmpl.Name
	probe.Spec.Containers[0].Resources.Claims = pod.Spec.Containers[0].Resources.Claims
	for _, edit := range edits {
		edit(probe)
	}
	if _, err := n.K8s.Client.ResourceV1().ResourceClaimTemplates("default").Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.K8s.Client.CoreV1().Pods("default").Create(ctx, probe, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.WaitPodPhase("default", name, corev1.PodRunning, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	r, err := n.Probe("default", name, "probe", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
