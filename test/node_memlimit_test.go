package test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpud/gpud/internal/testwait"
	"github.com/gpud/gpud/pkg/dra"
	"github.com/gpud/gpud/test/k8senv"
	"github.com/gpud/gpud/test/nodeenv"
)

// memlimitProfile is a dgx-h100 whose simulated driver is r615: its GPUs
// take per-cgroup memory limits (SetMemoryLimits_v1).
const memlimitProfile = `name: dgx-h100-r615
model: H100-SXM5-80GB
count: 8
numaNodes: 2
cpusPerNUMANode: 56
interconnect: nvswitch
gpusPerPCIeSwitch: 1
driverVersion: "615.40.01"
`

// simLimit is one cgroup's limits as the simulated driver keeps them in
// its state file (pkg/simnode's memoryLimits).
type simLimit struct {
	GPU       string
	Cgroup    string `json:"cgroup"`
	SoftBytes uint64 `json:"softBytes"`
	HardBytes uint64 `json:"hardBytes"`
}

// TestNodeMemoryLimits runs `gpud agent --kubelet-api dra` on a real node
// (kubelet, containerd with NRI, runc) over a simulated r615 dgx-h100, and
// a pod whose claim takes 20 GiB of a GPU with a 30 GiB memoryLimit in its
// opaque GPUConfig. The simulated driver's own record (its state file)
// shows soft 20 GiB, hard 30 GiB on exactly that container's cgroup (the
// path holding its pod UID and container ID) and nowhere else, and the
// agent's gpud_container_memory_limit_bytes agrees; a second pod whose
// spec sets CUDA_MPS_PINNED_DEVICE_MEM_LIMIT to the whole GPU gets the
// same driver limit; when the pods go, their limits go. It logs the time
// from the pod's creation to the limit on /metrics, and from containerd's
// creation of the container to the agent's "limits set" log line.
func TestNodeMemoryLimits(t *testing.T) {
	nodeenv.Require(t)
	k := k8senv.Start(t)
	n := nodeenv.Start(t, k, nodeenv.WithControllerManager())
	createDeviceClasses(t, k.Client)
	profile := filepath.Join(n.Dir, "dgx-h100-r615.yaml")
	if err := os.WriteFile(profile, []byte(memlimitProfile), 0o644); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(n.Dir, "sim-state.json")
	agent := startNodeAgent(t, n, "--kubelet-api=dra", "--simulate="+profile, "--sim-dev-root=/run/gpud/dev",
		"--sim-state-file="+state, "--kubeconfig="+k.Kubeconfig)
	waitGPUs(t, k, draTimeout, 8, n.Name)
	if body := httpGet(t, "http://"+agent.HTTP+"/readyz"); !strings.Contains(body, "memory limits: driver on GPUs 0,1,2,3,4,5,6,7") {
		t.Fatalf("/readyz does not put the r615 GPUs in driver mode:\n%s", body)
	}

	const gib = uint64(1) << 30
	check := func(t *testing.T, name string, env []corev1.EnvVar) {
		start := time.Now()
		pod := runBorrowingPod(t, n, name, env)
		_, cid, _ := strings.Cut(containerID(t, k, name), "://")
		var series map[string]float64
		testwait.For(t, time.Minute, "the limit of pod "+name+" on /metrics", func() bool {
			series = limitSeries(t, agent.HTTP, name)
			return len(series) == 2
		})
		t.Logf("pod %s: created to limit on /metrics (polled every 100 ms): %s (under the machine's load)", name, time.Since(start).Round(time.Millisecond))
		var uuid string
		for key, v := range series {
			u, kind, _ := strings.Cut(key, "/")
			uuid = u
			want := map[string]uint64{"soft": 20 * gib, "hard": 30 * gib}[kind]
			if uint64(v) != want {
				t.Errorf("gpud_container_memory_limit_bytes{pod=%s,kind=%s} = %v, want %d", name, kind, v, want)
			}
		}
		limits := simLimits(t, state)
		var mine []simLimit
		for _, l := range limits {
			if strings.Contains(l.Cgroup, cid) {
				mine = append(mine, l)
			}
		}
		if len(mine) != 1 || mine[0].GPU != uuid || mine[0].SoftBytes != 20*gib || mine[0].HardBytes != 30*gib {
			t.Fatalf("the simulated driver's limits on container %s's cgroup: %+v, want soft 20 GiB, hard 30 GiB on GPU %s (all limits: %+v)", cid, mine, uuid, limits)
		}
		uid := strings.ReplaceAll(string(pod.UID), "-", "_")
		if !strings.Contains(mine[0].Cgroup, uid) && !strings.Contains(mine[0].Cgroup, string(pod.UID)) {
			t.Errorf("limit on cgroup %s, not under pod %s's", mine[0].Cgroup, pod.UID)
		}
		t.Logf("pod %s: limit on %s (GPU %s); container env %s=%q", name, mine[0].Cgroup, uuid, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", probeEnv(t, n, name)["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"])
		set := agentLogTime(t, agent, "gpu memory limits set", name)
		created, err := containerCreated(n, cid)
		switch {
		case set.IsZero():
			t.Logf("pod %s: no \"gpu memory limits set\" line in the agent's log", name)
		case err != nil:
			t.Logf("pod %s: container creation time unknown: %v", name, err)
		default:
			t.Logf("pod %s: container created (containerd) %s, limit set (agent log) %s: %s from create to limit set (under the machine's load)",
				name, created.Format("15:04:05.000"), set.Format("15:04:05.000"), set.Sub(created).Round(time.Millisecond))
		}
	}
	t.Run("borrowing fraction", func(t *testing.T) { check(t, "borrow", nil) })
	t.Run("MPS environment does not lift it", func(t *testing.T) {
		check(t, "borrow-env", []corev1.EnvVar{
			{Name: "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", Value: "0=80G"},
			{Name: "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", Value: "100"},
		})
	})
	t.Run("cleared when the pods go", func(t *testing.T) {
		for _, name := range []string{"borrow", "borrow-env"} {
			deletePod(t, k, name)
		}
		testwait.For(t, 2*time.Minute, "no memory limits left in the simulated driver", func() bool {
			return len(simLimits(t, state)) == 0
		})
		testwait.For(t, time.Minute, "no gpud_container_memory_limit_bytes series left", func() bool {
			return len(limitSeries(t, agent.HTTP, "borrow"))+len(limitSeries(t, agent.HTTP, "borrow-env")) == 0
		})
	})
}

// runBorrowingPod runs the probe as pod name with a claim of 20 GiB of
// one GPU whose opaque GPUConfig sets memoryLimit 30Gi, and env added to
// its container, and returns the running pod.
func runBorrowingPod(t *testing.T, n *nodeenv.Node, name string, env []corev1.EnvVar) *corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var tmpl *resourceapi.ResourceClaimTemplate
	for _, obj := range draManifests(t, "../deploy/dra/examples/fraction-20gi.yaml") {
		if o, ok := obj.(*resourceapi.ResourceClaimTemplate); ok {
			tmpl = o
		}
	}
	if tmpl == nil {
		t.Fatal("fraction-20gi.yaml: no ResourceClaimTemplate")
	}
	tmpl.Name, tmpl.Namespace = name, "default"
	tmpl.Spec.Spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{{
		Requests: []string{tmpl.Spec.Spec.Devices.Requests[0].Name},
		DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver:     dra.DriverName,
			Parameters: runtime.RawExtension{Raw: []byte(`{"apiVersion":"gpu.gpud.io/v1alpha1","kind":"GPUConfig","memoryLimit":"30Gi"}`)},
		}},
	}}
	if _, err := n.K8s.Client.ResourceV1().ResourceClaimTemplates("default").Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	probe := n.ProbePod("default", name, nil)
	probe.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: &tmpl.Name}}
	probe.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
	probe.Spec.Containers[0].Env = env
	if _, err := n.K8s.Client.CoreV1().Pods("default").Create(ctx, probe, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err := n.WaitPodPhase("default", name, corev1.PodRunning, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

// limitSeries is the agent's gpud_container_memory_limit_bytes for pod,
// by "<UUID>/<kind>".
func limitSeries(t *testing.T, addr, pod string) map[string]float64 {
	t.Helper()
	mfs, err := monGather("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	mf := mfs["gpud_container_memory_limit_bytes"]
	if mf == nil {
		return out
	}
	for _, m := range mf.GetMetric() {
		if label(m, "pod") == pod {
			out[label(m, "UUID")+"/"+label(m, "kind")] = m.GetGauge().GetValue()
		}
	}
	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// simLimits reads the simulated driver's per-cgroup limits from its state
// file.
func simLimits(t *testing.T, path string) []simLimit {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		GPUs []struct {
			UUID         string     `json:"uuid"`
			MemoryLimits []simLimit `json:"memoryLimits"`
		} `json:"gpus"`
	}
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []simLimit
	for _, g := range st.GPUs {
		for _, l := range g.MemoryLimits {
			l.GPU = g.UUID
			out = append(out, l)
		}
	}
	return out
}

// probeEnv is the environment the probe container of pod reported.
func probeEnv(t *testing.T, n *nodeenv.Node, pod string) map[string]string {
	t.Helper()
	r, err := n.Probe("default", pod, "probe", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return r.Env
}

// agentLogTime is the time of the agent's last log line with msg that
// names pod; zero when there is none.
func agentLogTime(t *testing.T, agent *nodeAgent, msg, pod string) time.Time {
	t.Helper()
	var at time.Time
	for _, line := range strings.Split(agent.Tail(2000), "\n") {
		if !strings.Contains(line, `msg="`+msg) || !strings.Contains(line, "/"+pod+"/") {
			continue
		}
		ts, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		if v, err := time.Parse(time.RFC3339Nano, ts); err == nil {
			at = v
		}
	}
	return at
}

// containerCreated is when containerd created container id.
func containerCreated(n *nodeenv.Node, id string) (time.Time, error) {
	out, err := n.Command(n.Bins.Ctr, "--address", "/run/containerd/containerd.sock", "-n", "k8s.io", "containers", "info", id).Output()
	if err != nil {
		return time.Time{}, fmt.Errorf("ctr containers info %s: %w", id, err)
	}
	var info struct{ CreatedAt time.Time }
	if err := json.Unmarshal(out, &info); err != nil {
		return time.Time{}, fmt.Errorf("ctr containers info %s: %w", id, err)
	}
	return info.CreatedAt, nil
}

// httpGet is the body of a GET of url.
func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
