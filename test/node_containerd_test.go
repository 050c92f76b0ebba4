package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/test/k8senv"
	"github.com/gpud/gpud/test/nodeenv"
)

// simDevRoot is where the node tests' agents create the simulated GPUs'
// device files (--sim-dev-root), inside the node's namespace.
const simDevRoot = "/run/gpud/dev"

// hostDevDir is where withNodeDevices mounts simDevRoot in a probe.
const hostDevDir = "/hostdev"

// withNodeDevices mounts the node's GPU device files (all of them) into
// the probe pod at hostDevDir and has the probe try each, so a test sees
// what the container's device cgroup says of the GPUs it was not given;
// with interval > 0 the probe reports again every interval.
func withNodeDevices(p *corev1.Pod, interval time.Duration) *corev1.Pod {
	p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "node-dev", VolumeSource: corev1.VolumeSource{
		HostPath: &corev1.HostPathVolumeSource{Path: simDevRoot}}})
	c := &p.Spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "node-dev", MountPath: hostDevDir})
	c.Env = append(c.Env, corev1.EnvVar{Name: "PROBE_DEV_DIR", Value: hostDevDir})
	if interval > 0 {
		c.Env = append(c.Env, corev1.EnvVar{Name: "PROBE_INTERVAL", Value: interval.String()})
	}
	return p
}

// startPod creates p and waits until it is Running and its probe has
// reported.
func startPod(t *testing.T, n *nodeenv.Node, p *corev1.Pod) *nodeenv.ProbeReport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := n.K8s.Client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.WaitPodPhase(p.Namespace, p.Name, corev1.PodRunning, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	r, err := n.Probe(p.Namespace, p.Name, "probe", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// agentInventory is the agent's /inventory.
func agentInventory(t *testing.T, a *nodeAgent) gpu.Inventory {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get("http://" + a.HTTP + "/inventory")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var inv gpu.Inventory
	if err := json.NewDecoder(resp.Body).Decode(&inv); err != nil {
		t.Fatalf("agent /inventory: %v", err)
	}
	return inv
}

// minorsOf are the device minors of the GPUs with these UUIDs, sorted.
func minorsOf(t *testing.T, inv gpu.Inventory, uuids []string) []int {
	t.Helper()
	var out []int
	for _, u := range uuids {
		i := slices.IndexFunc(inv.GPUs, func(g gpu.GPU) bool { return g.UUID == u })
		if i < 0 {
			t.Fatalf("GPU %s is not in the agent's inventory", u)
		}
		out = append(out, inv.GPUs[i].Minor)
	}
	slices.Sort(out)
	return out
}

// checkIsolation asserts what a container given the GPUs with these
// minors sees: its /dev has exactly their device files and it can open
// them; of the node's device files (withNodeDevices) it can open exactly
// those, and opening any other GPU's is refused with EPERM.
func checkIsolation(t *testing.T, what string, r *nodeenv.ProbeReport, minors []int) {
	t.Helper()
	var want []string
	for _, m := range minors {
		want = append(want, "/dev/nvidia"+strconv.Itoa(m))
	}
	if got := openableGPUs(r); !slices.Equal(got, want) {
		t.Errorf("%s: can open %v in its /dev, want %v (opens %v)", what, got, want, r.Opens)
	}
	seen := 0
	for p, res := range r.Opens {
		rest, ok := strings.CutPrefix(p, hostDevDir+"/nvidia")
		if !ok {
			continue
		}
		m, err := strconv.Atoi(rest)
		if err != nil {
			continue // nvidiactl, nvidia-uvm...
		}
		seen++
		allowed := res == "ok" || res == "ENXIO"
		switch {
		case slices.Contains(minors, m) && !allowed:
			t.Errorf("%s: opening its own GPU's node %s gives %s, want ENXIO (allowed)", what, p, res)
		case !slices.Contains(minors, m) && res != "EPERM":
			t.Errorf("%s: opening another GPU's node %s gives %s, want EPERM", what, p, res)
		}
	}
	if seen < 8 {
		t.Errorf("%s: the probe tried %d of the node's GPU device files, want 8 (opens %v)", what, seen, r.Opens)
	}
}

// devicePluginMinors are the minors of the GPUs the device plugin gave a
// container (its NVIDIA_VISIBLE_DEVICES).
func devicePluginMinors(t *testing.T, inv gpu.Inventory, r *nodeenv.ProbeReport) []int {
	t.Helper()
	v := r.Env["NVIDIA_VISIBLE_DEVICES"]
	if v == "" {
		t.Fatalf("no NVIDIA_VISIBLE_DEVICES in the container (env %v)", r.Env)
	}
	return minorsOf(t, inv, strings.Split(v, ","))
}

// claimMinors are the minors of the GPUs allocated to a pod's claims (the
// claims' allocation results, through the ResourceSlices' uuid attribute).
func claimMinors(t *testing.T, k *k8senv.Env, n *nodeenv.Node, inv gpu.Inventory, pod string) []int {
	t.Helper()
	p, err := k.Client.CoreV1().Pods("default").Get(t.Context(), pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	devs := draDevices(t, k, n.Name)
	var uuids []string
	for _, s := range p.Status.ResourceClaimStatuses {
		if s.ResourceClaimName == nil {
			continue
		}
		c, err := k.Client.ResourceV1().ResourceClaims("default").Get(t.Context(), *s.ResourceClaimName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if c.Status.Allocation == nil {
			t.Fatalf("claim %s of running pod %s is not allocated", c.Name, pod)
		}
		for _, res := range c.Status.Allocation.Devices.Results {
			d, ok := devs[res.Device]
			if !ok {
				t.Fatalf("claim %s: device %s is in no ResourceSlice of node %s", c.Name, res.Device, n.Name)
			}
			uuids = append(uuids, draAttr(d, "uuid"))
		}
	}
	if len(uuids) == 0 {
		t.Fatalf("pod %s has no allocated claim", pod)
	}
	return minorsOf(t, inv, uuids)
}

// podUntouched asserts the pod still runs the same container, not
// restarted.
func podUntouched(t *testing.T, k *k8senv.Env, name, containerID string) {
	t.Helper()
	p, err := k.Client.CoreV1().Pods("default").Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cs := p.Status.ContainerStatuses
	if p.Status.Phase != corev1.PodRunning || len(cs) != 1 || cs[0].RestartCount != 0 || cs[0].ContainerID != containerID {
		t.Errorf("pod %s: %s, want Running, container %s untouched", name, podSummary(p), containerID)
	}
}

func podSummary(p *corev1.Pod) string {
	s := string(p.Status.Phase)
	for _, cs := range p.Status.ContainerStatuses {
		s += fmt.Sprintf("; container %s %s restarts %d ready %t", cs.Name, cs.ContainerID, cs.RestartCount, cs.Ready)
	}
	return s
}

func containerID(t *testing.T, k *k8senv.Env, name string) string {
	t.Helper()
	p, err := k.Client.CoreV1().Pods("default").Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].ContainerID == "" {
		t.Fatalf("pod %s: no container ID yet: %s", name, podSummary(p))
	}
	return p.Status.ContainerStatuses[0].ContainerID
}

// nriLines counts, in the agent's log since offset, its NRI plugin's
// registrations and its warnings.
func nriLines(t *testing.T, a *nodeAgent, offset int) (registered, warnings int, log string) {
	t.Helper()
	b, err := os.ReadFile(a.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	log = string(b[min(offset, len(b)):])
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, "nri") {
			continue
		}
		if strings.Contains(line, "nri plugin registered") {
			registered++
		}
		if strings.Contains(line, "level=WARN") {
			warnings++
		}
	}
	return registered, warnings, log
}

func logSize(t *testing.T, path string) int {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return int(st.Size())
}

// restartContainerd restarts the node's containerd and asserts what the
// agent does about it: its NRI plugin registers again exactly once, and
// says so without a warning loop (at most one warning for the outage, none
// once it is back, over two of its 5s retry periods).
func restartContainerd(t *testing.T, n *nodeenv.Node, a *nodeAgent) {
	t.Helper()
	off := logSize(t, a.LogPath)
	if reg, _, log := nriLines(t, a, 0); reg == 0 {
		t.Fatalf("the agent's NRI plugin never registered before the restart; log:\n%s", log)
	}
	begin := time.Now()
	if err := n.RestartContainerd(); err != nil {
		t.Fatal(err)
	}
	if err := n.WaitReady(2 * time.Minute); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, time.Minute, "the agent's NRI plugin to register again", func() bool {
		reg, _, _ := nriLines(t, a, off)
		return reg >= 1
	})
	t.Logf("containerd restarted, node Ready and NRI plugin registered again in %s", time.Since(begin).Round(time.Millisecond))
	time.Sleep(11 * time.Second) // two retry periods: a loop would show
	reg, warns, log := nriLines(t, a, off)
	t.Logf("agent after the containerd restart: %d NRI registration(s), %d NRI warning(s)", reg, warns)
	if reg != 1 || warns > 2 {
		t.Errorf("after a containerd restart the agent's NRI plugin registered %d times with %d warnings, want once with at most 2 (connection ended; socket not answering once); log since the restart:\n%s", reg, warns, log)
	}
}

// TestNodeContainerdRestart restarts containerd on a real node under
// running GPU pods, in device-plugin mode and in DRA mode, and checks what
// a user sees: the pods run on in the same containers with the same GPUs
// (and the same device isolation: their own GPU opens, every other one
// gives EPERM), gpud's NRI plugin registers with the new containerd once,
// without a warning loop, and a new GPU pod is admitted afterwards and
// gets the GPU it was allocated, and only that one.
func TestNodeContainerdRestart(t *testing.T) {
	nodeenv.Require(t)
	t.Run("device plugin", func(t *testing.T) {
		k := k8senv.Start(t)
		n := nodeenv.Start(t, k)
		a := startNodeAgent(t, n, "--simulate=dgx-h100", "--sim-dev-root="+simDevRoot)
		waitAllocatable(t, n, map[corev1.ResourceName]int64{gpuResource: 8}, time.Minute)
		inv := agentInventory(t, a)

		r := startPod(t, n, withNodeDevices(n.ProbePod("default", "held", gpus(2)), 2*time.Second))
		held := devicePluginMinors(t, inv, r)
		checkIsolation(t, "pod held (nvidia.com/gpu: 2)", r, held)
		id := containerID(t, k, "held")

		restartContainerd(t, n, a)
		podUntouched(t, k, "held", id)
		// The container reports again after the restart: same GPUs, same
		// filter.
		after := reportAfter(t, n, "held", r)
		if got := devicePluginMinors(t, inv, after); !slices.Equal(got, held) {
			t.Errorf("pod held's GPUs after the restart: %v, want %v", got, held)
		}
		checkIsolation(t, "pod held after the containerd restart", after, held)

		waitAllocatable(t, n, map[corev1.ResourceName]int64{gpuResource: 8}, time.Minute)
		r2 := startPod(t, n, withNodeDevices(n.ProbePod("default", "new", gpus(1)), 0))
		got := devicePluginMinors(t, inv, r2)
		checkIsolation(t, "pod new (nvidia.com/gpu: 1) after the containerd restart", r2, got)
		if len(got) == 1 && slices.Contains(held, got[0]) {
			t.Errorf("pod new got GPU %d, which pod held holds (%v)", got[0], held)
		}
		t.Logf("held: GPUs %v; new: GPU %v", held, got)
	})
	t.Run("DRA", func(t *testing.T) {
		k := k8senv.Start(t)
		n := nodeenv.Start(t, k, nodeenv.WithControllerManager())
		applyDeviceClasses(t, k)
		a := startNodeAgent(t, n, "--kubelet-api=dra", "--simulate=dgx-h100", "--sim-dev-root="+simDevRoot, "--kubeconfig="+k.Kubeconfig)
		waitDRAGPUs(t, k, n, 8)
		inv := agentInventory(t, a)

		r := startDRAPod(t, n, "whole-gpu", "held", 2*time.Second, nil)
		held := claimMinors(t, k, n, inv, "held")
		checkIsolation(t, "pod held (DRA whole-gpu)", r, held)
		id := containerID(t, k, "held")

		restartContainerd(t, n, a)
		podUntouched(t, k, "held", id)
		after := reportAfter(t, n, "held", r)
		checkIsolation(t, "pod held after the containerd restart", after, held)

		r2 := startDRAPod(t, n, "whole-gpu", "new", 0, nil)
		got := claimMinors(t, k, n, inv, "new")
		checkIsolation(t, "pod new (DRA whole-gpu) after the containerd restart", r2, got)
		if slices.ContainsFunc(got, func(m int) bool { return slices.Contains(held, m) }) {
			t.Errorf("pod new got GPUs %v, pod held holds %v", got, held)
		}
		t.Logf("held: GPUs %v; new: GPUs %v", held, got)
	})
}

// reportAfter waits for a probe report other than prev (the probe
// reports every PROBE_INTERVAL) and returns it.
func reportAfter(t *testing.T, n *nodeenv.Node, pod string, prev *nodeenv.ProbeReport) *nodeenv.ProbeReport {
	t.Helper()
	log0, err := n.ContainerLog("default", pod, "probe")
	if err != nil {
		t.Fatal(err)
	}
	count := strings.Count(log0, "PROBE ")
	testwait.For(t, 30*time.Second, "a new probe report from "+pod, func() bool {
		log, err := n.ContainerLog("default", pod, "probe")
		return err == nil && strings.Count(log, "PROBE ") > count
	})
	r, err := n.Probe("default", pod, "probe", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// applyDeviceClasses creates the shipped DeviceClasses.
func applyDeviceClasses(t *testing.T, k *k8senv.Env) {
	t.Helper()
	for _, obj := range draManifests(t, filepath.Join("..", "deploy", "dra", "deviceclasses.yaml")) {
		if dc, ok := obj.(*resourceapi.DeviceClass); ok {
			if _, err := k.Client.ResourceV1().DeviceClasses().Create(t.Context(), dc, metav1.CreateOptions{}); err != nil {
				t.Fatalf("DeviceClass %s: %v", dc.Name, err)
			}
		}
	}
}

// waitDRAGPUs waits for gpud's ResourceSlices to list want whole GPUs on
// the real node n.
func waitDRAGPUs(t *testing.T, k *k8senv.Env, n *nodeenv.Node, want int) {
	t.Helper()
	waitGPUs(t, k, draTimeout, want, n.Name)
}

// startDRAPod is runDRAExample with the node's device files mounted in
// the probe (withNodeDevices), edited by edit (nil: as it is).
func startDRAPod(t *testing.T, n *nodeenv.Node, example, name string, interval time.Duration, edit func(*corev1.Pod) *corev1.Pod) *nodeenv.ProbeReport {
	t.Helper()
	tmpl, pod := draTemplateExample(t, example)
	tmpl.Name, tmpl.Namespace = name, "default"
	probe := withNodeDevices(n.ProbePod("default", name, nil), interval)
	probe.Spec.ResourceClaims = pod.Spec.ResourceClaims
	for i := range probe.Spec.ResourceClaims {
		probe.Spec.ResourceClaims[i].ResourceClaimTemplateName = &tmpl.Name
	}
	probe.Spec.Containers[0].Resources.Claims = pod.Spec.Containers[0].Resources.Claims
	if edit != nil {
		probe = edit(probe)
	}
	if _, err := n.K8s.Client.ResourceV1().ResourceClaimTemplates("default").Create(t.Context(), tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return startPod(t, n, probe)
}

// draTemplateExample is deploy/dra/examples/<example>.yaml's
// ResourceClaimTemplate and Pod (one claim from that template).
func draTemplateExample(t *testing.T, example string) (*resourceapi.ResourceClaimTemplate, *corev1.Pod) {
	t.Helper()
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
	return tmpl, pod
}
