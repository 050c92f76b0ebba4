package test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpud/gpud/test/k8senv"
	"github.com/gpud/gpud/test/nodeenv"
)

// The helpers of the real-node tests (node_*_test.go): gpud runs there as
// a node's agent does, inside the node's mount namespace with the
// kubelet's and the runtime's default paths, and tests look at what a user
// looks at: the Node and Pod objects, and what a probe container reports
// of its own view.

// nodeAgent is a `gpud agent` process on a node.
type nodeAgent struct {
	*k8senv.Proc
	HTTP string // its --http-addr
}

// startNodeAgent runs `gpud agent args...` on n (the gpud binary built
// once per run, or $GPUD_NODE_TEST_BIN: another build to compare with, say
// the last release's) and waits for its /healthz.
func startNodeAgent(t *testing.T, n *nodeenv.Node, args ...string) *nodeAgent {
	t.Helper()
	bin := os.Getenv("GPUD_NODE_TEST_BIN")
	if bin == "" {
		bin = buildGpud(t)
	}
	addr := k8senv.FreeAddr(t)
	p, err := n.StartProc("gpud-agent", bin, append([]string{"agent", "--http-addr=" + addr, "--node-name=" + n.Name}, args...))
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := hc.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if done, werr := p.Exited(); done {
			t.Fatalf("gpud agent exited (%v):\n%s", werr, p.Tail(40))
		}
		if time.Now().After(deadline) {
			t.Fatalf("gpud agent's /healthz not OK after 1m (%v):\n%s", err, p.Tail(40))
		}
		time.Sleep(200 * time.Millisecond)
	}
	return &nodeAgent{Proc: p, HTTP: addr}
}

// logEnforcementOnFailure logs, when t fails (or always, with
// GPUD_TEST_ENFORCE_LOG=1), the agent's lines about device filters and
// the runtime's NRI hooks: what a failed isolation check needs to say why
// (the agent's log is gone with the test's dir).
func (a *nodeAgent) logEnforcementOnFailure(t *testing.T, n *nodeenv.Node) {
	t.Cleanup(func() {
		if !t.Failed() && os.Getenv("GPUD_TEST_ENFORCE_LOG") != "1" {
			return
		}
		var keep []string
		for _, l := range strings.Split(a.Tail(2000), "\n") {
			if strings.Contains(l, "filter") || strings.Contains(l, "NRI") || strings.Contains(l, "nri") || strings.Contains(l, "pod resources") {
				keep = append(keep, l)
			}
		}
		if len(keep) > 60 {
			keep = keep[len(keep)-60:]
		}
		t.Logf("gpud agent's enforcement log (last %d lines):\n%s", len(keep), strings.Join(keep, "\n"))
		if b, err := os.ReadFile(filepath.Join(n.Dir, "containerd.log")); err == nil {
			keep = keep[:0]
			for _, l := range strings.Split(string(b), "\n") {
				if strings.Contains(l, "plugin") && strings.Contains(l, "gpud") {
					keep = append(keep, l)
				}
			}
			t.Logf("containerd's lines about gpud's NRI plugin:\n%s", strings.Join(keep, "\n"))
		}
	})
}

// waitAllocatable waits until the Node's allocatable counts of the given
// resources are exactly want (a missing resource counts 0).
func waitAllocatable(t *testing.T, n *nodeenv.Node, want map[corev1.ResourceName]int64, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var got map[corev1.ResourceName]int64
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		node, err := n.K8s.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		cancel()
		if err == nil {
			got = map[corev1.ResourceName]int64{}
			ok := true
			for r, w := range want {
				q := node.Status.Allocatable[r]
				got[r] = q.Value()
				ok = ok && q.Value() == w
			}
			if ok {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s allocatable %v after %s, want %v", n.Name, got, timeout, want)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// runProbePod creates a probe pod on n with limits and waits until it is
// Running and has reported.
func runProbePod(t *testing.T, n *nodeenv.Node, name string, limits corev1.ResourceList) *nodeenv.ProbeReport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := n.K8s.Client.CoreV1().Pods("default").Create(ctx, n.ProbePod("default", name, limits), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.WaitPodPhase("default", name, corev1.PodRunning, 90*time.Second); err != nil {
		t.Fatal(err)
	}
	r, err := n.Probe("default", name, "probe", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// gpuFile matches a whole GPU's device file (not nvidiactl, nvidia-uvm...).
var gpuFile = regexp.MustCompile(`^/dev/nvidia[0-9]+$`)

// openableGPUs are the whole-GPU device files a probe could open.
func openableGPUs(r *nodeenv.ProbeReport) []string {
	var out []string
	for _, p := range r.Openable() {
		if gpuFile.MatchString(p) {
			out = append(out, p)
		}
	}
	return out
}

// logSegments splits a process log that StartProc appended to across
// restarts into one part per start (each begins with its "+ cmd" line).
func logSegments(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var segs []string
	for _, part := range strings.Split("\n"+string(b), "\n+ ") {
		if strings.TrimSpace(part) != "" {
			segs = append(segs, part)
		}
	}
	return segs
}

// registrations counts the kubelet's "Got registration request" lines for
// resource in a log segment.
func registrations(seg, resource string) int {
	return strings.Count(seg, fmt.Sprintf("Got registration request from device plugin with resource\" resourceName=%q", resource))
}

// draRegistrations counts the kubelet's "Registered DRA plugin" lines for
// driver in a log segment (the kubelet logs them at -v=3).
func draRegistrations(seg, driver string) int {
	n := 0
	for _, line := range strings.Split(seg, "\n") {
		// klog puts a named logger's logger="..." between the two.
		if strings.Contains(line, `"Registered DRA plugin"`) && strings.Contains(line, fmt.Sprintf("driverName=%q", driver)) {
			n++
		}
	}
	return n
}

// waitRegistrations waits until count, over the kubelet's current log
// segment, reaches want, then a little longer: a second registration
// (a defect) follows the first within a poll or two. It returns the count.
func waitRegistrations(t *testing.T, n *nodeenv.Node, count func(seg string) int, want int, timeout time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for count(lastSegment(t, n)) < want && time.Now().Before(deadline) {
		time.Sleep(250 * time.Millisecond)
	}
	time.Sleep(3 * time.Second)
	return count(lastSegment(t, n))
}
