package test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpud/gpud/test/k8senv"
	"github.com/gpud/gpud/test/nodeenv"
)

const (
	gpuResource    corev1.ResourceName = "nvidia.com/gpu"
	sharedResource corev1.ResourceName = "nvidia.com/gpu.shared"
)

func gpus(n int64) corev1.ResourceList {
	return corev1.ResourceList{gpuResource: *resource.NewQuantity(n, resource.DecimalSI)}
}

// TestNodeDevicePlugin runs `gpud agent --simulate dgx-h100` in
// device-plugin mode on a real node (kubelet + containerd + runc) and
// checks what a user sees: 8 allocatable GPUs; a pod asking for one runs
// and can open exactly one GPU device file; after five kubelet restarts
// gpud has registered exactly once per restart, the running pod is
// untouched and the kubelet still follows gpud's device list (a sharing
// change moves allocatable, and a pod for the 6 remaining whole GPUs is
// admitted); after an agent restart the same holds.
func TestNodeDevicePlugin(t *testing.T) {
	nodeenv.Require(t)
	k := k8senv.Start(t)
	n := nodeenv.Start(t, k)
	sharing := filepath.Join(n.Dir, "sharing.yaml")
	if err := os.WriteFile(sharing, []byte("devices: {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// --sim-dev-root: the simulated GPUs get fake device files (in the
	// node's /run) that the CDI specs name, so containers start and
	// their device opens are observable.
	agentArgs := []string{"--simulate=dgx-h100", "--sim-dev-root=/run/gpud/dev", "--sharing-config=" + sharing}
	agent := startNodeAgent(t, n, agentArgs...)

	waitAllocatable(t, n, map[corev1.ResourceName]int64{gpuResource: 8}, time.Minute)
	// The kubelet's log is one segment per start; gpud registered once.
	assertRegistrations := func(t *testing.T, want int) {
		t.Helper()
		// A second registration (the defect) follows the first within a
		// poll or two: give it the time to show.
		time.Sleep(3 * time.Second)
		segs := logSegments(t, n.Kubelet().LogPath)
		if got := registrations(segs[len(segs)-1], string(gpuResource)); got != want {
			t.Errorf("kubelet start %d: gpud registered %s %d times, want %d", len(segs), gpuResource, got, want)
		}
	}
	assertRegistrations(t, 1)

	held := -1 // the GPU the one-gpu pod holds, once it runs
	t.Run("pod with one GPU", func(t *testing.T) {
		defer func() {
			if held < 0 { // free its GPU for the next subtests
				deletePod(t, k, "one-gpu")
			}
		}()
		r := runProbePod(t, n, "one-gpu", gpus(1))
		got := openableGPUs(r)
		if len(got) != 1 {
			t.Fatalf("a pod with %s: 1 can open %v (all: %v), want exactly one GPU", gpuResource, got, r.Opens)
		}
		held, _ = strconv.Atoi(strings.TrimPrefix(got[0], "/dev/nvidia"))
		t.Logf("one-gpu pod opens %v; env %v", got, r.Env)
	})

	stillRunning := func(t *testing.T) {
		t.Helper()
		if held < 0 {
			return // it never ran: "pod with one GPU" failed
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p, err := k.Client.CoreV1().Pods("default").Get(ctx, "one-gpu", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase != corev1.PodRunning || p.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("one-gpu pod is %s with %d restarts, want Running, untouched", p.Status.Phase, p.Status.ContainerStatuses[0].RestartCount)
		}
	}

	t.Run("kubelet restarts", func(t *testing.T) {
		for i := 1; i <= 5; i++ {
			begin := time.Now()
			if err := n.RestartKubelet(); err != nil {
				t.Fatal(err)
			}
			if err := n.WaitReady(2 * time.Minute); err != nil {
				t.Fatal(err)
			}
			waitAllocatable(t, n, map[corev1.ResourceName]int64{gpuResource: 8}, time.Minute)
			assertRegistrations(t, 1)
			t.Logf("kubelet restart %d: Ready with %s 8 in %s", i, gpuResource, time.Since(begin).Round(time.Millisecond))
		}
		stillRunning(t)
		// The kubelet follows gpud's device list still: sharing a GPU
		// (not the one-gpu pod's) in two replicas takes it from the
		// whole GPUs.
		share := fmt.Sprintf("devices:\n  \"%d\": {replicas: 2}\n", (held+1+8)%8)
		if err := os.WriteFile(sharing, []byte(share), 0o644); err != nil {
			t.Fatal(err)
		}
		waitAllocatable(t, n, map[corev1.ResourceName]int64{gpuResource: 7, sharedResource: 2}, time.Minute)
	})

	t.Run("pod for the remaining GPUs after kubelet restarts", func(t *testing.T) {
		want := int64(7)
		if held >= 0 {
			want = 6
		}
		r := runProbePod(t, n, "rest", gpus(want))
		if got := openableGPUs(r); int64(len(got)) != want {
			t.Errorf("a pod with %s: %d can open %v, want %d GPUs", gpuResource, want, got, want)
		}
		deletePod(t, k, "rest")
	})
	if err := os.WriteFile(sharing, []byte("devices: {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitAllocatable(t, n, map[corev1.ResourceName]int64{gpuResource: 8, sharedResource: 0}, time.Minute)

	t.Run("agent restart", func(t *testing.T) {
		agent.Stop(10 * time.Second)
		before := registrations(lastSegment(t, n), string(gpuResource))
		agent = startNodeAgent(t, n, agentArgs...)
		waitAllocatable(t, n, map[corev1.ResourceName]int64{gpuResource: 8}, time.Minute)
		time.Sleep(3 * time.Second)
		if got := registrations(lastSegment(t, n), string(gpuResource)) - before; got != 1 {
			t.Errorf("a restarted agent registered %s %d times, want once", gpuResource, got)
		}
		stillRunning(t)
		r := runProbePod(t, n, "after-agent-restart", gpus(1))
		if got := openableGPUs(r); len(got) != 1 {
			t.Errorf("after an agent restart a pod with %s: 1 can open %v, want exactly one GPU", gpuResource, got)
		}
	})
}

func lastSegment(t *testing.T, n *nodeenv.Node) string {
	segs := logSegments(t, n.Kubelet().LogPath)
	return segs[len(segs)-1]
}

func deletePod(t *testing.T, k *k8senv.Env, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := k.Client.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil && !strings.Contains(err.Error(), "not found") {
		t.Fatal(err)
	}
}
