package test

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpud/gpud/pkg/devnodes"
	"github.com/gpud/gpud/pkg/dra"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/test/k8senv"
	"github.com/gpud/gpud/test/nodeenv"
)

// nodeMIGLayouts is the device plugin test's MIG layout: GPU 0 in three
// 1g.10gb slices and one 4g.40gb.
const nodeMIGLayouts = `version: v1
mig-configs:
  mixed:
    - devices: [0]
      mig-enabled: true
      mig-devices: {"1g.10gb": 3, "4g.40gb": 1}
`

// migSlice is a MIG slice of the agent's inventory.
type migSlice struct {
	gpuMinor int
	gpu.MIGDevice
}

// caps are the slice's access caps (nvidia-cap<N> minors).
func (m migSlice) caps() []int {
	gi, ci := devnodes.CapMinors(m.gpuMinor, m.GPUInstanceID, m.ComputeInstanceID)
	return []int{gi, ci}
}

func findMIG(inv gpu.Inventory, match func(g gpu.GPU, m gpu.MIGDevice) bool) (migSlice, bool) {
	for _, g := range inv.GPUs {
		for _, m := range g.MIGDevices {
			if match(g, m) {
				return migSlice{g.Minor, m}, true
			}
		}
	}
	return migSlice{}, false
}

// checkCaps asserts which MIG access caps a container may open: in its
// own /dev exactly want, and of the node's (withNodeDevices) exactly
// want, every other one EPERM.
func checkCaps(t *testing.T, what string, r *nodeenv.ProbeReport, want []int) {
	t.Helper()
	var own, node []int
	denied, other := 0, 0
	for p, res := range r.Opens {
		allowed := res == "ok" || res == "ENXIO"
		for prefix, into := range map[string]*[]int{"/dev/nvidia-caps/nvidia-cap": &own, hostDevDir + "/nvidia-caps/nvidia-cap": &node} {
			rest, ok := strings.CutPrefix(p, prefix)
			if !ok {
				continue
			}
			m, err := strconv.Atoi(rest)
			if err != nil {
				continue
			}
			if allowed {
				*into = append(*into, m)
			}
			if into == &node && !slices.Contains(want, m) {
				other++
				if res == "EPERM" {
					denied++
				}
			}
		}
	}
	slices.Sort(own)
	slices.Sort(node)
	if !slices.Equal(own, want) || !slices.Equal(node, want) {
		t.Errorf("%s: can open MIG caps %v in its /dev and %v of the node's, want %v in both", what, own, node, want)
	}
	if other == 0 || denied != other {
		t.Errorf("%s: %d of the node's %d other MIG caps give EPERM, want all", what, denied, other)
	}
}

// TestNodeDevicePluginKinds runs the device plugin with a MIG layout
// (mixed strategy) and a GPU shared in two replicas on a real node, and
// checks what each container sees: a nvidia.com/mig-1g.10gb pod gets its
// slice's UUID, its parent GPU's device file and exactly its slice's two
// access caps (every other GPU and cap EPERM); two nvidia.com/gpu.shared
// pods get the same shared GPU, and only it, with half its SMs
// (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50).
func TestNodeDevicePluginKinds(t *testing.T) {
	nodeenv.Require(t)
	k := k8senv.Start(t)
	n := nodeenv.Start(t, k)
	layouts, sharing := filepath.Join(n.Dir, "layouts.yaml"), filepath.Join(n.Dir, "sharing.yaml")
	if err := os.WriteFile(layouts, []byte(nodeMIGLayouts), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sharing, []byte("devices:\n  \"1\": {replicas: 2}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := startNodeAgent(t, n, "--simulate=dgx-h100", "--sim-dev-root="+simDevRoot, "--sharing-config="+sharing,
		"--mig-strategy=mixed", "--mig-config-file="+layouts, "--mig-config=mixed", "--mig-reset-gpus")
	mig1g, mig4g := corev1.ResourceName("nvidia.com/mig-1g.10gb"), corev1.ResourceName("nvidia.com/mig-4g.40gb")
	waitAllocatable(t, n, map[corev1.ResourceName]int64{gpuResource: 6, sharedResource: 2, mig1g: 3, mig4g: 1}, 2*time.Minute)
	inv := agentInventory(t, a)

	t.Run("MIG slice", func(t *testing.T) {
		limits := corev1.ResourceList{mig1g: *resource.NewQuantity(1, resource.DecimalSI)}
		r := startPod(t, n, withNodeDevices(n.ProbePod("default", "mig", limits), 0))
		uuid := r.Env["NVIDIA_VISIBLE_DEVICES"]
		s, ok := findMIG(inv, func(_ gpu.GPU, m gpu.MIGDevice) bool { return m.UUID == uuid })
		if !ok {
			t.Fatalf("pod mig: NVIDIA_VISIBLE_DEVICES=%q is no MIG slice of the agent's inventory (env %v)", uuid, r.Env)
		}
		if s.Profile != "1g.10gb" {
			t.Errorf("pod mig got a %s slice, want 1g.10gb", s.Profile)
		}
		checkIsolation(t, "pod mig ("+string(mig1g)+": 1)", r, []int{s.gpuMinor})
		checkCaps(t, "pod mig", r, s.caps())
		t.Logf("pod mig: slice %s (GPU %d, GI %d, CI %d), caps %v", s.UUID, s.gpuMinor, s.GPUInstanceID, s.ComputeInstanceID, s.caps())
	})
	t.Run("shared replicas", func(t *testing.T) {
		limits := corev1.ResourceList{sharedResource: *resource.NewQuantity(1, resource.DecimalSI)}
		var got [][]int
		for _, name := range []string{"shared-a", "shared-b"} {
			r := startPod(t, n, withNodeDevices(n.ProbePod("default", name, limits), 0))
			m := devicePluginMinors(t, inv, r)
			checkIsolation(t, "pod "+name+" ("+string(sharedResource)+": 1)", r, m)
			// Two replicas: each gets half the GPU's SMs through MPS.
			if got := r.Env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"]; got != "50" {
				t.Errorf("pod %s: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%q, want 50 (one of 2 replicas; env %v)", name, got, r.Env)
			}
			got = append(got, m)
			t.Logf("pod %s: GPU %v, env %v", name, m, r.Env)
		}
		if !slices.Equal(got[0], []int{1}) || !slices.Equal(got[1], []int{1}) {
			t.Errorf("the two shared pods got GPUs %v and %v, want both the shared GPU 1", got[0], got[1])
		}
	})
}

// TestNodeDRAKinds applies the shipped DRA examples on a real node (the
// pods' container swapped for the probe) and checks what each container
// sees: a 20Gi fraction gets one GPU and its MPS memory limit; a dynamic
// 1g.10gb MIG slice gets its parent GPU and exactly the access caps of the
// slice the agent created (a privileged container too: gpud's filter
// alone refuses the other caps); an NVLink pair gets two GPUs of one
// nvlinkDomain; every other GPU and cap gives EPERM.
func TestNodeDRAKinds(t *testing.T) {
	nodeenv.Require(t)
	k := k8senv.Start(t)
	n := nodeenv.Start(t, k, nodeenv.WithControllerManager())
	applyDeviceClasses(t, k)
	a := startNodeAgent(t, n, "--kubelet-api=dra", "--simulate=dgx-h100", "--sim-dev-root="+simDevRoot, "--kubeconfig="+k.Kubeconfig)
	waitDRAGPUs(t, k, n, 8)
	runDRAKinds(t, k, n, a, "")
}

// TestNodeDRAKindsGpudScheduler is TestNodeDRAKinds with `gpud
// scheduler` (the shipped RBAC, leader-elected) placing the pods and
// allocating their claims instead of kube-scheduler, which does not run.
func TestNodeDRAKindsGpudScheduler(t *testing.T) {
	nodeenv.Require(t)
	k := k8senv.Start(t, k8senv.WithoutScheduler())
	n := nodeenv.Start(t, k, nodeenv.WithControllerManager())
	applyDeviceClasses(t, k)
	a := startNodeAgent(t, n, "--kubelet-api=dra", "--simulate=dgx-h100", "--sim-dev-root="+simDevRoot, "--kubeconfig="+k.Kubeconfig)
	waitDRAGPUs(t, k, n, 8)
	sched := startSchedulerProc(t, buildGpud(t), filepath.Join(shortDir(t), "sched"), schedulerIdentity(t, k))
	waitForLeader(t, []*schedProc{sched}, nil)
	runDRAKinds(t, k, n, a, schedName)
}

// runDRAKinds runs TestNodeDRAKinds' pods, with spec.schedulerName
// scheduler ("": the default).
func runDRAKinds(t *testing.T, k *k8senv.Env, n *nodeenv.Node, a *nodeAgent, scheduler string) {
	inv := agentInventory(t, a)
	schedule := func(edit func(*corev1.Pod) *corev1.Pod) func(*corev1.Pod) *corev1.Pod {
		return func(p *corev1.Pod) *corev1.Pod {
			p.Spec.SchedulerName = scheduler
			if edit != nil {
				p = edit(p)
			}
			return p
		}
	}
	t.Run("fraction", func(t *testing.T) {
		r := startDRAPod(t, n, "fraction-20gi", "fraction", 0, schedule(nil))
		m := claimMinors(t, k, n, inv, "fraction")
		checkIsolation(t, "pod fraction (DRA fraction-20gi)", r, m)
		if got := r.Env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"]; got != "0=20480M" {
			t.Errorf("pod fraction: CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=%q, want 0=20480M (env %v)", got, r.Env)
		}
		t.Logf("pod fraction: GPU %v, env %v", m, r.Env)
	})
	for _, priv := range []bool{false, true} {
		name := "mig"
		var edit func(*corev1.Pod) *corev1.Pod
		if priv {
			name = "mig-privileged"
			edit = func(p *corev1.Pod) *corev1.Pod {
				p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptrTo(true)}
				return p
			}
		}
		t.Run(name, func(t *testing.T) {
			a.logEnforcementOnFailure(t, n)
			r := startDRAPod(t, n, "mig-1g10gb", name, 0, schedule(edit))
			dev := claimDevices(t, k, name)
			if len(dev) != 1 {
				t.Fatalf("pod %s: claim devices %v, want one MIG slice", name, dev)
			}
			s, ok := findMIG(agentInventory(t, a), func(g gpu.GPU, m gpu.MIGDevice) bool {
				return dev[0] == dra.MIGDeviceName(g.Index, m.Profile, m.PlacementStart)
			})
			if !ok {
				t.Fatalf("pod %s: claim device %s is no MIG slice of the agent's inventory", name, dev[0])
			}
			checkIsolation(t, "pod "+name+" (DRA mig-1g10gb)", r, []int{s.gpuMinor})
			checkCaps(t, "pod "+name, r, s.caps())
			t.Logf("pod %s: %s = slice %s (GPU %d, GI %d, CI %d), caps %v", name, dev[0], s.UUID, s.gpuMinor, s.GPUInstanceID, s.ComputeInstanceID, s.caps())
		})
	}
	t.Run("NVLink pair", func(t *testing.T) {
		r := startDRAPod(t, n, "two-gpus-nvlink", "pair", 0, schedule(nil))
		m := claimMinors(t, k, n, inv, "pair")
		if len(m) != 2 {
			t.Fatalf("pod pair: GPUs %v, want 2", m)
		}
		checkIsolation(t, "pod pair (DRA two-gpus-nvlink)", r, m)
		devs := draDevices(t, k, n.Name)
		var domains []string
		for _, d := range claimDevices(t, k, "pair") {
			domains = append(domains, draAttr(devs[d], "nvlinkDomain"))
		}
		if len(domains) != 2 || domains[0] == "" || domains[0] != domains[1] {
			t.Errorf("pod pair: nvlinkDomains %v, want one domain", domains)
		}
		t.Logf("pod pair: GPUs %v, nvlinkDomains %v", m, domains)
	})
}

// claimDevices are the device names allocated to a pod's claims.
func claimDevices(t *testing.T, k *k8senv.Env, pod string) []string {
	t.Helper()
	p, err := k.Client.CoreV1().Pods("default").Get(t.Context(), pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range p.Status.ResourceClaimStatuses {
		if s.ResourceClaimName == nil {
			continue
		}
		c, err := k.Client.ResourceV1().ResourceClaims("default").Get(t.Context(), *s.ResourceClaimName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if c.Status.Allocation != nil {
			for _, res := range c.Status.Allocation.Devices.Results {
				out = append(out, res.Device)
			}
		}
	}
	return out
}
