package test

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpud/gpud/test/k8senv"
	"github.com/gpud/gpud/test/nodeenv"
)

// TestNodeDeviceIsolation checks, on a real node, that each container
// can open the GPUs it was given and gets EPERM on every other GPU's
// device file (all of the node's are mounted in): per container of a
// two-container pod, and for privileged containers, whose device cgroup
// the runtime opens to every device so that only gpud's filter stands
// between them and the other GPUs (one without any GPU opens none); in
// device-plugin mode and for DRA-allocated GPUs.
func TestNodeDeviceIsolation(t *testing.T) {
	nodeenv.Require(t)
	privileged := func(p *corev1.Pod) *corev1.Pod {
		p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptrTo(true)}
		return p
	}
	t.Run("device plugin", func(t *testing.T) {
		k := k8senv.Start(t)
		n := nodeenv.Start(t, k)
		a := startNodeAgent(t, n, "--simulate=dgx-h100", "--sim-dev-root="+simDevRoot)
		waitAllocatable(t, n, map[corev1.ResourceName]int64{gpuResource: 8}, time.Minute)
		inv := agentInventory(t, a)

		t.Run("two containers", func(t *testing.T) {
			p := withNodeDevices(n.ProbePod("default", "two", gpus(1)), 0)
			second := *p.Spec.Containers[0].DeepCopy()
			second.Name = "probe2"
			p.Spec.Containers = append(p.Spec.Containers, second)
			r1 := startPod(t, n, p)
			r2, err := n.Probe("default", "two", "probe2", 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			m1, m2 := devicePluginMinors(t, inv, r1), devicePluginMinors(t, inv, r2)
			checkIsolation(t, "container probe of pod two", r1, m1)
			checkIsolation(t, "container probe2 of pod two", r2, m2)
			if slices.Equal(m1, m2) {
				t.Errorf("both containers of pod two got GPU %v", m1)
			}
			t.Logf("pod two: container probe GPU %v, probe2 GPU %v", m1, m2)
		})
		t.Run("privileged", func(t *testing.T) {
			a.logEnforcementOnFailure(t, n)
			r := startPod(t, n, privileged(withNodeDevices(n.ProbePod("default", "priv", gpus(1)), time.Second)))
			m := devicePluginMinors(t, inv, r)
			checkIsolation(t, "privileged pod priv (nvidia.com/gpu: 1)", r, m)
			// The filter the NRI hook attached at start stays: the
			// cgroup poll finds the container too.
			checkIsolation(t, "privileged pod priv (nvidia.com/gpu: 1), a report later", reportAfter(t, n, "priv", r), m)
			t.Logf("privileged pod priv: GPU %v", m)
		})
		t.Run("privileged without GPUs", func(t *testing.T) {
			a.logEnforcementOnFailure(t, n)
			r := startPod(t, n, privileged(withNodeDevices(n.ProbePod("default", "priv-none", nil), time.Second)))
			checkIsolation(t, "privileged pod priv-none (no GPU)", r, nil)
			checkIsolation(t, "privileged pod priv-none (no GPU), a report later", reportAfter(t, n, "priv-none", r), nil)
		})
	})
	t.Run("DRA", func(t *testing.T) {
		k := k8senv.Start(t)
		n := nodeenv.Start(t, k, nodeenv.WithControllerManager())
		applyDeviceClasses(t, k)
		a := startNodeAgent(t, n, "--kubelet-api=dra", "--simulate=dgx-h100", "--sim-dev-root="+simDevRoot, "--kubeconfig="+k.Kubeconfig)
		waitDRAGPUs(t, k, n, 8)
		inv := agentInventory(t, a)

		t.Run("whole GPU", func(t *testing.T) {
			r := startDRAPod(t, n, "whole-gpu", "whole", 0, nil)
			checkIsolation(t, "pod whole (DRA whole-gpu)", r, claimMinors(t, k, n, inv, "whole"))
		})
		t.Run("privileged", func(t *testing.T) {
			r := startDRAPod(t, n, "whole-gpu", "priv", time.Second, privileged)
			m := claimMinors(t, k, n, inv, "priv")
			checkIsolation(t, "privileged pod priv (DRA whole-gpu)", r, m)
			checkIsolation(t, "privileged pod priv (DRA whole-gpu), a report later", reportAfter(t, n, "priv", r), m)
			t.Logf("privileged pod priv: GPU %v", m)
		})
		t.Run("privileged without GPUs", func(t *testing.T) {
			a.logEnforcementOnFailure(t, n)
			r := startPod(t, n, privileged(withNodeDevices(n.ProbePod("default", "priv-none", nil), time.Second)))
			checkIsolation(t, "privileged pod priv-none (no GPU, DRA node)", r, nil)
			checkIsolation(t, "privileged pod priv-none (no GPU, DRA node), a report later", reportAfter(t, n, "priv-none", r), nil)
		})
	})
}
