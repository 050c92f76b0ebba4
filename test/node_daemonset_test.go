package test

import (
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpud/gpud/test/k8senv"
	"github.com/gpud/gpud/test/nodeenv"
)

// shippedImage is the image deploy/daemonset runs.
const shippedImage = "ghcr.io/gpud/gpud:0.1.0"

// TestNodeShippedDaemonSet installs deploy/daemonset on a real node as the
// README's install section says for a node without a GPU: the image built
// as `make image` builds it, imported into the runtime; the node labelled
// nvidia.com/gpu.present=true; the runtimeClassName line deleted (a
// simulated node needs no NVIDIA runtime); the agent's ConfigMap told to
// simulate a DGX H100. The agent pod must become Ready, the node show the
// GPUs the shipped config advertises (mixed MIG strategy; GPU 7 shared in
// 4 replicas), and a pod asking for one GPU run with one GPU.
func TestNodeShippedDaemonSet(t *testing.T) {
	nodeenv.Require(t)
	k := k8senv.Start(t)
	n := nodeenv.Start(t, k, nodeenv.WithControllerManager())
	ctx := t.Context()
	importImage(t, n, shippedImage)
	labelGPUNode(t, n)

	for _, f := range []string{"namespace.yaml", "serviceaccount.yaml", "configmap.yaml", "daemonset.yaml"} {
		for _, obj := range draManifests(t, filepath.Join("..", "deploy", "daemonset", f)) {
			var err error
			switch o := obj.(type) {
			case *corev1.Namespace:
				_, err = k.Client.CoreV1().Namespaces().Create(ctx, o, metav1.CreateOptions{})
			case *corev1.ServiceAccount:
				_, err = k.Client.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
			case *corev1.ConfigMap:
				o.Data["config.yaml"] += simulatedConfig
				_, err = k.Client.CoreV1().ConfigMaps(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
			case *appsv1.DaemonSet:
				o.Spec.Template.Spec.RuntimeClassName = nil
				_, err = k.Client.AppsV1().DaemonSets(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
			default:
				t.Fatalf("%s: %T not expected", f, obj)
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
		}
	}

	waitAgentPodReady(t, n, "gpud", "app.kubernetes.io/name=gpud", 3*time.Minute)
	// deploy/daemonset/configmap.yaml shares GPU 7 in 4 replicas.
	waitAllocatable(t, n, map[corev1.ResourceName]int64{gpuResource: 7, sharedResource: 4}, 2*time.Minute)
	r := runProbePod(t, n, "one-gpu", gpus(1))
	if got := openableGPUs(r); len(got) != 1 {
		t.Errorf("a pod with %s: 1 can open %v (all: %v), want exactly one GPU", gpuResource, got, r.Opens)
	}
}

// simulatedConfig is what the agent's config file gets on a node without
// a GPU: a simulated DGX H100 whose device files are under /run/gpud/dev
// (a directory every shipped agent mounts from the host).
const simulatedConfig = "simulate: dgx-h100\nsim-dev-root: /run/gpud/dev\n"

// importImage builds make image's image (hack/image, with the gpud binary
// this run built) tagged image, and imports it into n's containerd, as a
// user without a registry loads the tarball `make image` writes.
func importImage(t *testing.T, n *nodeenv.Node, image string) {
	t.Helper()
	tarball := filepath.Join(n.Dir, "gpud-image.tar")
	cmd := exec.Command("go", "run", "../hack/image", "--binary", buildGpud(t), "--image", image, "--tar", tarball)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/image: %v\n%s", err, out)
	}
	if out, err := n.Command(n.Bins.Ctr, "--address", "/run/containerd/containerd.sock", "-n", "k8s.io", "images", "import", tarball).CombinedOutput(); err != nil {
		t.Fatalf("ctr images import: %v\n%s", err, out)
	}
}

// labelGPUNode labels n nvidia.com/gpu.present=true, as the README says
// for a node without NFD or GFD (`kubectl label node`): the shipped agents
// select it. A merge patch, as kubectl sends: an update would race the
// kubelet's own writes to the Node.
func labelGPUNode(t *testing.T, n *nodeenv.Node) {
	t.Helper()
	patch := []byte(`{"metadata":{"labels":{"nvidia.com/gpu.present":"true"}}}`)
	if _, err := n.K8s.Client.CoreV1().Nodes().Patch(t.Context(), n.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitAgentPodReady waits until namespace holds exactly one pod that
// selector (a label selector) selects, a shipped agent DaemonSet's on the
// test's only node, and it is Ready, and returns its name; when the test
// fails, its container's log goes to the test log.
func waitAgentPodReady(t *testing.T, n *nodeenv.Node, namespace, selector string, timeout time.Duration) string {
	t.Helper()
	var agentPod string
	t.Cleanup(func() {
		if t.Failed() && agentPod != "" {
			log, err := n.ContainerLog(namespace, agentPod, "gpud")
			t.Logf("the agent pod's log (%v):\n%s", err, log)
		}
	})
	deadline := time.Now().Add(timeout)
	for {
		pods, err := n.K8s.Client.CoreV1().Pods(namespace).List(t.Context(), metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) == 1 {
			p := &pods.Items[0]
			agentPod = p.Name
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					return agentPod
				}
			}
			if _, err := n.WaitPodPhase(namespace, p.Name, corev1.PodRunning, time.Until(deadline)); err != nil {
				t.Fatalf("the agent pod: %v", err)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent pod in %s not Ready after %s: %d pods", namespace, timeout, len(pods.Items))
		}
		time.Sleep(time.Second)
	}
}
