package test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/pkg/adminapi"
	"github.com/gpud/gpud/pkg/agentevents"
	"github.com/gpud/gpud/pkg/dra"
	"github.com/gpud/gpud/pkg/simnode/simapi"
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
//
// Then the containers' own processes allocate simulated GPU memory
// through the agent's admin socket (POST /v1/sim/memory/alloc, by the
// task's host PID: charged to the container's real cgroup): a container
// with a 10 GiB limit (8 GiB request) gets the driver's ERROR_MEMORY for
// 12 GiB and nothing is allocated, and so does a second process exec'd in
// it that sets CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=80G in its own
// environment, while its neighbour on the same GPU keeps its 16 GiB; the
// agent's per-process metrics name both pods on that GPU; the
// GPUMemoryLimitSet Event is on the limited pod. And a borrower (20 GiB
// request, 70 GiB limit) holding 60 GiB is evicted by the driver when its
// neighbour claims its 40 GiB request: the agent writes
// GPUMemoryBorrowerEvicted on the borrower's pod, read back from the API
// server.
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
	sock := filepath.Join(shortDir(t), "admin.sock")
	agent := startNodeAgent(t, n, "--kubelet-api=dra", "--simulate="+profile, "--sim-dev-root=/run/gpud/dev",
		"--sim-state-file="+state, "--kubeconfig="+k.Kubeconfig, "--admin-socket="+sock)
	admin := adminapi.NewClient(sock, 10*time.Second)
	waitGPUs(t, k, draTimeout, 8, n.Name)
	if body := httpGet(t, "http://"+agent.HTTP+"/readyz"); !strings.Contains(body, "memory limits: driver on GPUs 0,1,2,3,4,5,6,7") {
		t.Fatalf("/readyz does not put the r615 GPUs in driver mode:\n%s", body)
	}

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
	mem := memCaller{t: t, n: n, k: k, admin: admin}
	t.Run("12 GiB into a 10 GiB limit fails, the neighbour keeps its memory", func(t *testing.T) {
		mem.t = t
		runFractionPair(t, n, agent.HTTP,
			"limited", fractionSpec{Request: "8Gi", Limit: "10Gi", GPU: 3},
			"neighbour", fractionSpec{Request: "20Gi", GPU: 3})
		if r := mem.call(simapi.AllocRoute, "neighbour", 3, 16*gib); r.Result != "SUCCESS" {
			t.Fatalf("neighbour allocates 16 GiB of its 20 GiB: %+v", r)
		}
		r := mem.call(simapi.AllocRoute, "limited", 3, 12*gib)
		if r.Result != "ERROR_MEMORY" || r.HeldBytes != 0 {
			t.Fatalf("limited allocates 12 GiB past its 10 GiB limit: %+v, want ERROR_MEMORY and nothing held", r)
		}
		t.Logf("limited (cgroup %s) allocating 12 GiB: %s: %s", r.Cgroup, r.Result, r.Error)
		// A second process in the container sets its own MPS memory
		// limit to the whole GPU before CUDA starts: the driver's limit is
		// on the container's cgroup, out of its reach.
		lifted := liftedProcess(t, n, mem.containerID("limited"), "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=80G")
		if r := mem.callPID(simapi.AllocRoute, lifted, 3, 12*gib); r.Result != "ERROR_MEMORY" || r.HeldBytes != 0 {
			t.Fatalf("limited's process %d with CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=80G allocates 12 GiB: %+v, want ERROR_MEMORY", lifted, r)
		} else {
			t.Logf("limited's process %d (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=80G in its own environment) allocating 12 GiB: %s", lifted, r.Result)
		}
		if r := mem.call(simapi.AllocRoute, "limited", 3, 9*gib); r.Result != "SUCCESS" {
			t.Fatalf("limited allocates 9 GiB within its limit: %+v", r)
		}
		var uuid string
		testwait.For(t, time.Minute, "gpud_process_memory_used_bytes of both tenants of GPU 3", func() bool {
			got := processMemory(t, agent.HTTP)
			l, nb := got["limited"], got["neighbour"]
			if l.uuid == "" || l.uuid != nb.uuid || l.bytes != 9*gib || nb.bytes != 16*gib {
				return false
			}
			uuid = l.uuid
			return true
		})
		t.Logf("per-pod metrics on GPU %s: limited 9 GiB, neighbour 16 GiB", uuid)
		note := waitPodEvent(t, k, "limited", agentevents.ReasonGPUMemoryLimitSet)
		t.Logf("Event on pod limited: %s: %s", agentevents.ReasonGPUMemoryLimitSet, note)
		for _, name := range []string{"limited", "neighbour"} {
			mem.call(simapi.FreeRoute, name, 3, 0)
			deletePod(t, k, name)
		}
	})
	t.Run("a borrower is evicted when its neighbour claims its request", func(t *testing.T) {
		mem.t = t
		runFractionPair(t, n, agent.HTTP,
			"borrower", fractionSpec{Request: "20Gi", Limit: "70Gi", GPU: 4},
			"owner", fractionSpec{Request: "40Gi", GPU: 4})
		if r := mem.call(simapi.AllocRoute, "borrower", 4, 60*gib); r.Result != "SUCCESS" {
			t.Fatalf("borrower allocates 60 GiB (request 20, limit 70): %+v", r)
		}
		testwait.For(t, time.Minute, "the borrower's 60 GiB on /metrics", func() bool {
			return processMemory(t, agent.HTTP)["borrower"].bytes == 60*gib
		})
		// The agent sees an eviction by comparing two polls of the
		// driver's per-cgroup use (every --enforce-interval, 500 ms): let
		// one see the borrower above its request first.
		time.Sleep(1500 * time.Millisecond)
		if r := mem.call(simapi.AllocRoute, "owner", 4, 40*gib); r.Result != "SUCCESS" {
			t.Fatalf("owner allocates its 40 GiB request on a GPU the borrower filled: %+v, want SUCCESS (the borrower evicted)", r)
		}
		note := waitPodEvent(t, k, "borrower", agentevents.ReasonGPUMemoryBorrowerEvicted)
		t.Logf("Event on pod borrower (read from the API server): %s: %s", agentevents.ReasonGPUMemoryBorrowerEvicted, note)
		testwait.For(t, time.Minute, "the owner's 40 GiB and no borrower memory on /metrics", func() bool {
			got := processMemory(t, agent.HTTP)
			return got["owner"].bytes == 40*gib && got["borrower"].bytes == 0
		})
		for _, name := range []string{"borrower", "owner"} {
			deletePod(t, k, name)
		}
	})
}

const gib = uint64(1) << 30

// memCaller calls the agent's simulated memory routes as a pod's
// container process.
type memCaller struct {
	t     *testing.T
	n     *nodeenv.Node
	k     *k8senv.Env
	admin *adminapi.Client
}

// call allocates (or frees) bytes on GPU gpu as the process of pod's
// container, by its host PID.
func (m memCaller) call(route, pod string, gpu int, bytes uint64) simapi.MemoryResponse {
	m.t.Helper()
	return m.callPID(route, taskPID(m.t, m.n, m.containerID(pod)), gpu, bytes)
}

// callPID allocates (or frees) bytes on GPU gpu as host process pid.
func (m memCaller) callPID(route string, pid uint32, gpu int, bytes uint64) simapi.MemoryResponse {
	m.t.Helper()
	var r simapi.MemoryResponse
	if err := m.admin.Call(m.t.Context(), "POST", route, simapi.MemoryRequest{GPU: strconv.Itoa(gpu), PID: pid, Bytes: bytes}, &r); err != nil {
		m.t.Fatalf("%s as pid %d: %v", route, pid, err)
	}
	return r
}

// containerID is containerd's ID of pod's one container.
func (m memCaller) containerID(pod string) string {
	m.t.Helper()
	_, cid, _ := strings.Cut(containerID(m.t, m.k, pod), "://")
	return cid
}

// liftedProcess starts, in container id, a second probe process that
// sets env (KEY=VALUE) in its own environment (test/nodeenv/probe's "env"),
// and returns its host PID once /proc/<pid>/environ shows it.
func liftedProcess(t *testing.T, n *nodeenv.Node, id, env string) uint32 {
	t.Helper()
	ctr := func(args ...string) ([]byte, error) {
		return n.Command(n.Bins.Ctr, append([]string{"--address", "/run/containerd/containerd.sock", "-n", "k8s.io"}, args...)...).CombinedOutput()
	}
	if out, err := ctr("tasks", "exec", "-d", "--exec-id", "lift-env", id, "/probe", "env", env); err != nil {
		t.Fatalf("ctr tasks exec: %v: %s", err, out)
	}
	main := taskPID(t, n, id)
	var pid uint32
	testwait.For(t, 30*time.Second, "a second process in container "+id+" with "+env, func() bool {
		out, err := ctr("tasks", "ps", id)
		if err != nil {
			t.Fatalf("ctr tasks ps: %v: %s", err, out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) == 0 {
				continue
			}
			p, err := strconv.ParseUint(f[0], 10, 32)
			if err != nil || uint32(p) == main {
				continue
			}
			data, err := os.ReadFile("/proc/" + f[0] + "/environ")
			if err == nil && strings.Contains("\x00"+string(data), "\x00"+env+"\x00") {
				pid = uint32(p)
				return true
			}
		}
		return false
	})
	return pid
}

// taskPID is the host PID of container id's task.
func taskPID(t *testing.T, n *nodeenv.Node, id string) uint32 {
	t.Helper()
	out, err := n.Command(n.Bins.Ctr, "--address", "/run/containerd/containerd.sock", "-n", "k8s.io", "tasks", "ls").Output()
	if err != nil {
		t.Fatalf("ctr tasks ls: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == id {
			pid, err := strconv.ParseUint(f[1], 10, 32)
			if err != nil {
				t.Fatalf("ctr tasks ls: %q: %v", line, err)
			}
			return uint32(pid)
		}
	}
	t.Fatalf("ctr tasks ls: no task %s in:\n%s", id, out)
	return 0
}

// procUse is what one pod's processes hold on one GPU.
type procUse struct {
	uuid  string
	bytes uint64
}

// processMemory is the agent's gpud_process_memory_used_bytes by pod.
func processMemory(t *testing.T, addr string) map[string]procUse {
	t.Helper()
	mfs, err := monGather("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]procUse{}
	for _, m := range mfs["gpud_process_memory_used_bytes"].GetMetric() {
		if pod := label(m, "pod"); pod != "" {
			u := out[pod]
			u.uuid = label(m, "UUID")
			u.bytes += uint64(m.GetGauge().GetValue())
			out[pod] = u
		}
	}
	return out
}

// waitPodEvent waits for an Event with reason on pod (namespace default)
// in the API server and returns its note.
func waitPodEvent(t *testing.T, k *k8senv.Env, pod, reason string) string {
	t.Helper()
	var note string
	testwait.For(t, time.Minute, "Event "+reason+" on pod "+pod, func() bool {
		list, err := k.Client.EventsV1().Events("default").List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range list.Items {
			if e.Reason == reason && e.Regarding.Kind == "Pod" && e.Regarding.Name == pod {
				note = e.Note
				return true
			}
		}
		return false
	})
	return note
}

// runBorrowingPod runs the probe as pod name with a claim of 20 GiB of
// one GPU whose opaque GPUConfig sets memoryLimit 30Gi, and env added to
// its container, and returns the running pod.
func runBorrowingPod(t *testing.T, n *nodeenv.Node, name string, env []corev1.EnvVar) *corev1.Pod {
	t.Helper()
	return runFractionPod(t, n, name, fractionSpec{Limit: "30Gi", GPU: -1}, env)
}

// runFractionPair runs two fraction pods on one node and waits until the
// agent at addr shows both pods' memory limits (soft and hard) on /metrics.
func runFractionPair(t *testing.T, n *nodeenv.Node, addr, a string, fa fractionSpec, b string, fb fractionSpec) {
	t.Helper()
	runFractionPod(t, n, a, fa, nil)
	runFractionPod(t, n, b, fb, nil)
	for _, name := range []string{a, b} {
		testwait.For(t, time.Minute, "the limits of pod "+name+" on /metrics", func() bool { return len(limitSeries(t, addr, name)) == 2 })
	}
}

// fractionSpec is a probe pod's claim on one GPU's memory.
type fractionSpec struct {
	// Request is the claim's memory ("" keeps fraction-20gi.yaml's 20Gi)
	// and Limit its opaque GPUConfig memoryLimit ("": none, no
	// borrowing).
	Request, Limit string
	// GPU is the index of the GPU the claim must take (a CEL selector on
	// the "index" attribute); -1 takes any.
	GPU int
}

// runFractionPod runs the probe as pod name with a claim from
// fraction-20gi.yaml changed as f says, and env added to its container,
// and returns the running pod.
func runFractionPod(t *testing.T, n *nodeenv.Node, name string, f fractionSpec, env []corev1.EnvVar) *corev1.Pod {
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
	req := tmpl.Spec.Spec.Devices.Requests[0].Exactly
	if f.Request != "" {
		req.Capacity.Requests["memory"] = resource.MustParse(f.Request)
	}
	if f.GPU >= 0 {
		req.Selectors = append(req.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf(`device.attributes["%s"].index == %d`, dra.DriverName, f.GPU)}})
	}
	if f.Limit != "" {
		tmpl.Spec.Spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{{
			Requests: []string{tmpl.Spec.Spec.Devices.Requests[0].Name},
			DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
				Driver:     dra.DriverName,
				Parameters: runtime.RawExtension{Raw: []byte(`{"apiVersion":"gpu.gpud.io/v1alpha1","kind":"GPUConfig","memoryLimit":"` + f.Limit + `"}`)},
			}},
		}}
	}
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
