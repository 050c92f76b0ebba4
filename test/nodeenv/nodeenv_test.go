package nodeenv

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpud/gpud/test/k8senv"
)

// TestScriptBuildsVersion keeps hack/node-bins.sh's default containerd
// version and ContainerdVersion in step: the tests look where the script
// builds.
func TestScriptBuildsVersion(t *testing.T) {
	b, err := os.ReadFile("../../hack/node-bins.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`GPUD_CONTAINERD_VERSION:-(v[0-9.]+)\}`).FindSubmatch(b)
	if m == nil || string(m[1]) != ContainerdVersion {
		t.Fatalf("hack/node-bins.sh builds containerd %q by default, nodeenv looks for %s", m, ContainerdVersion)
	}
}

func TestHostPath(t *testing.T) {
	n := &Node{Dir: "/tmp/x"}
	for in, want := range map[string]string{
		"/var/lib/kubelet/device-plugins/kubelet.sock": "/tmp/x/root/var/lib/kubelet/device-plugins/kubelet.sock",
		"/var/run/cdi":  "/tmp/x/root/run/cdi",
		"/run":          "/tmp/x/root/run",
		"/var/log/pods": "/tmp/x/root/var/log/pods",
		"/var/libx":     "/var/libx",
		"/etc/hosts":    "/etc/hosts",
	} {
		if got := n.HostPath(in); got != want {
			t.Errorf("HostPath(%s) = %s, want %s", in, got, want)
		}
	}
}

// TestNodeRunsPods starts a node and runs a probe pod on it through
// kube-scheduler: the pod gets Running, its container reports no GPU, and
// nothing of the node shows on the host. The node's runtime reports its
// release as a released containerd does ("containerd://2.2.9", not a
// development build's "2.2.9+unknown"): NRI plugins, gpud's among them,
// infer the runtime's NRI version from it.
func TestNodeRunsPods(t *testing.T) {
	Require(t)
	k := k8senv.Start(t)
	n := Start(t, k)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node, err := k.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := "containerd://" + strings.TrimPrefix(filepath.Base(n.Bins.ContainerdDir), "containerd-v")
	if got := node.Status.NodeInfo.ContainerRuntimeVersion; got != want {
		t.Errorf("the node's runtime is %q, want %q (hack/node-bins.sh stamps the release as containerd's Makefile does)", got, want)
	}
	pod := n.ProbePod("default", "probe", nil)
	if _, err := k.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.WaitPodPhase("default", "probe", corev1.PodRunning, time.Minute); err != nil {
		t.Fatal(err)
	}
	r, err := n.Probe("default", "probe", "probe", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Opens) != 0 {
		t.Errorf("a pod without GPUs sees device files %v", r.Opens)
	}
	for _, p := range []string{"/var/lib/kubelet", "/var/log/pods", "/run/containerd"} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s exists on the host", p)
		}
	}
}
