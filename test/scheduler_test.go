package test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/utils/ptr"

	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/pkg/scheduler/view"
	"github.com/gpud/gpud/test/k8senv"
)

// The scheduler end-to-end test runs two simulated gpud agents in DRA mode
// (a DGX H100 and a DGX A100 with two GPUs in MIG mode) and two
// `gpud scheduler` replicas with leader election against a real
// kube-apiserver without kube-scheduler, under the RBAC of
// deploy/scheduler. Pods of every request kind are bound by the scheduler;
// the leader is SIGKILLed while it works and the other replica finishes;
// the claims are checked for over-allocation and prepared by the agents
// through the kubelet's gRPC API.

const (
	schedName    = "gpud-scheduler"
	schedTimeout = 120 * time.Second
)

// schedNode is one simulated node and its agent.
type schedNode struct {
	name, profile, migProf string
	pluginsDir, registry   string
}

func TestSchedulerEndToEnd(t *testing.T) {
	t.Parallel() // only its own etcd, API server and processes: see TestMain
	if testing.Short() {
		t.Skip("runs kube-apiserver, two gpud agents and two gpud schedulers")
	}
	begin := time.Now()
	bin := buildGpud(t)
	env := k8senv.Start(t, k8senv.WithoutScheduler())
	c := env.Client

	createDeviceClasses(t, c)
	schedKubeconfig := schedulerIdentity(t, env)

	nodes := []*schedNode{{name: "node-h100", profile: "dgx-h100", migProf: "1g.10gb"}, {name: "node-a100", profile: "dgx-a100", migProf: "1g.5gb"}}
	for _, n := range nodes {
		startSchedAgent(t, env, bin, n)
	}
	for _, n := range nodes {
		testwait.For(t, schedTimeout, n.name+": gpud's ResourceSlices with GPUs and "+n.migProf+" placements", func() bool {
			gpus, migs := 0, 0
			for _, d := range draDevices(t, env, n.name) {
				switch draAttr(d, "type") {
				case "gpu":
					gpus++
				case "mig":
					if draAttr(d, "profile") == n.migProf {
						migs++
					}
				}
			}
			return gpus >= 6 && migs > 0
		})
	}
	t.Logf("agents published their slices %s after the start", time.Since(begin).Round(time.Millisecond))

	dir := shortDir(t)
	var scheds []*schedProc
	for _, name := range []string{"a", "b"} {
		scheds = append(scheds, startSchedulerProc(t, bin, filepath.Join(dir, name), schedKubeconfig))
	}
	leader := waitForLeader(t, scheds, nil)
	t.Logf("scheduler %s leads", leader.name)

	// Batch 1: every request kind.
	batch1 := []schedPod{
		{name: "whole-1", example: "whole-gpu"}, {name: "whole-2", example: "whole-gpu"},
		{name: "frac-1", example: "fraction-20gi"}, {name: "frac-2", example: "fraction-20gi"}, {name: "frac-3", example: "fraction-20gi"},
		{name: "mig-h100-1", example: "mig-1g10gb", migProf: "1g.10gb"}, {name: "mig-a100-1", example: "mig-1g10gb", migProf: "1g.5gb"},
		{name: "nvlink-1", example: "two-gpus-nvlink"},
	}
	created := time.Now()
	for _, p := range batch1 {
		createSchedPod(t, env, p)
	}
	for _, p := range batch1 {
		env.WaitForPodBound(t, metav1.NamespaceDefault, p.name, schedTimeout)
	}
	t.Logf("batch 1: %d pods bound in %s", len(batch1), time.Since(created).Round(time.Millisecond))

	// Batch 2, and the leader killed while it works on it.
	batch2 := []schedPod{
		{name: "whole-3", example: "whole-gpu"}, {name: "whole-4", example: "whole-gpu"}, {name: "frac-4", example: "fraction-20gi"},
		{name: "frac-5", example: "fraction-20gi"}, {name: "mig-h100-2", example: "mig-1g10gb", migProf: "1g.10gb"},
		{name: "mig-a100-2", example: "mig-1g10gb", migProf: "1g.5gb"}, {name: "nvlink-2", example: "two-gpus-nvlink"},
	}
	// The leader binds the first three, then dies while the rest arrive.
	for _, p := range batch2[:3] {
		createSchedPod(t, env, p)
	}
	for _, p := range batch2[:3] {
		env.WaitForPodBound(t, metav1.NamespaceDefault, p.name, schedTimeout)
	}
	for _, p := range batch2[3:] {
		createSchedPod(t, env, p)
	}
	leader.kill(t)
	killed := time.Now()
	before := 0
	for _, p := range batch2[3:] {
		if pod, err := c.CoreV1().Pods(metav1.NamespaceDefault).Get(t.Context(), p.name, metav1.GetOptions{}); err == nil && pod.Spec.NodeName != "" {
			before++
		}
	}
	t.Logf("leader %s SIGKILLed with %d of the last %d pods bound", leader.name, before, len(batch2)-3)
	next := waitForLeader(t, scheds, leader)
	t.Logf("scheduler %s took over %s after the SIGKILL of %s", next.name, time.Since(killed).Round(time.Millisecond), leader.name)
	for _, p := range batch2 {
		env.WaitForPodBound(t, metav1.NamespaceDefault, p.name, schedTimeout)
	}
	t.Logf("batch 2: %d pods bound %s after the SIGKILL", len(batch2), time.Since(killed).Round(time.Millisecond))

	// Pods that cannot be placed: their reasons, and nothing crashes.
	tooBig, _ := draExample(t, "two-gpus-nvlink", "too-big")
	tooBig.Spec.Devices.Requests[0].Exactly.Count = 9
	badClass, _ := draExample(t, "whole-gpu", "bad-class")
	badClass.Spec.Devices.Requests[0].Exactly.DeviceClassName = "no-such-class.gpud.io"
	for _, cl := range []*resourceapi.ResourceClaim{tooBig, badClass} {
		if _, err := c.ResourceV1().ResourceClaims(cl.Namespace).Create(t.Context(), cl, metav1.CreateOptions{}); err != nil {
			t.Fatalf("claim %s: %v", cl.Name, err)
		}
		_, pod := draExample(t, "whole-gpu", cl.Name)
		pod.Spec.SchedulerName = schedName
		if _, err := c.CoreV1().Pods(pod.Namespace).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
			t.Fatalf("pod %s: %v", pod.Name, err)
		}
	}
	_, noClaim := draExample(t, "whole-gpu", "no-claim")
	noClaim.Spec.SchedulerName = schedName
	if _, err := c.CoreV1().Pods(noClaim.Namespace).Create(t.Context(), noClaim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"too-big": "", "bad-class": "no-such-class.gpud.io", "no-claim": "waiting for ResourceClaim default/no-claim"} {
		msg := env.WaitForPodUnschedulable(t, metav1.NamespaceDefault, name, schedTimeout)
		t.Logf("pending %s: %s", name, msg)
		if msg == "" || strings.HasPrefix(msg, "0/") || !strings.Contains(msg, want) {
			t.Errorf("pod %s: PodScheduled message %q, want the allocator's reason with %q", name, msg, want)
		}
		if !schedEvent(t, env, name) {
			t.Errorf("pod %s: no FailedScheduling event from %s", name, schedName)
		}
	}
	if next.exited() {
		t.Fatalf("scheduler %s exited after the unplaceable pods", next.name)
	}

	// Gangs (scheduling.k8s.io/v1beta1 PodGroups, members naming theirs in
	// spec.schedulingGroup): one that fits binds whole; one that cannot
	// fit holds nothing.
	gangFit := []schedPod{{name: "gang-fit-0", example: "fraction-20gi"}, {name: "gang-fit-1", example: "fraction-20gi"}}
	gangNoFit := []schedPod{{name: "gang-nofit-0", example: "two-gpus-nvlink", count: 8}, {name: "gang-nofit-1", example: "two-gpus-nvlink", count: 8},
		{name: "gang-nofit-2", example: "two-gpus-nvlink", count: 8}}
	createGang(t, env, "gang-fit", gangFit)
	createGang(t, env, "gang-nofit", gangNoFit)
	for _, p := range gangFit {
		env.WaitForPodBound(t, metav1.NamespaceDefault, p.name, schedTimeout)
	}
	for _, p := range gangNoFit {
		msg := env.WaitForPodUnschedulable(t, metav1.NamespaceDefault, p.name, schedTimeout)
		t.Logf("pending %s: %s", p.name, msg)
		cl, err := c.ResourceV1().ResourceClaims(metav1.NamespaceDefault).Get(t.Context(), p.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cl.Status.Allocation != nil || len(cl.Status.ReservedFor) > 0 {
			t.Errorf("claim %s of a gang that does not fit holds %+v", p.name, cl.Status)
		}
	}

	// Nothing lost, nothing doubled: every claim allocated once, reserved
	// for its pod only, and no device over-allocated.
	all := append(append(slices.Clone(batch1), batch2...), gangFit...)
	claims := checkSchedAllocations(t, env, all)

	// The agents prepare what the scheduler allocated.
	for _, n := range nodes {
		prepareAsKubelet(t, n, claims)
	}
	// The metrics follow the view: a pool the agent is republishing (its
	// MIG slices just created by prepare) is left out until it is whole.
	h100 := draAttr(draDevices(t, env, "node-h100")["gpu-7"], "productName")
	wants := []string{"gpud_scheduler_leader 1", "gpud_scheduler_binds_total", `gpud_scheduler_gpu_memory_bytes{model="` + h100 + `",state="allocated"}`,
		`gpud_scheduler_pending_pods{reason="invalid"} 1`, `gpud_scheduler_pending_pods{reason="claim-missing"} 1`}
	testwait.ForErr(t, 30*time.Second, "the new leader's metrics", func() error {
		metrics := scrape(t, next.addr)
		for _, want := range wants {
			if !strings.Contains(metrics, want) {
				return fmt.Errorf("no %s", want)
			}
		}
		return nil
	})

	// An API-server outage longer than the lease: the leader cannot renew
	// and exits; the standby (a replacement replica, as its Deployment
	// would start) takes over once the server is back, and its informers,
	// which failed all along, must not keep it waiting (client-go's
	// backoff alone took up to 32 s here).
	standby := startSchedulerProc(t, bin, filepath.Join(dir, "c"), schedKubeconfig)
	testwait.For(t, schedTimeout, "the standby's informers synced", func() bool { return standby.readyz() == "not the leader" })
	env.StopAPIServer(t)
	time.Sleep(20 * time.Second)
	env.StartAPIServer(t)
	back := time.Now()
	createSchedPod(t, env, schedPod{name: "after-outage", example: "fraction-20gi"})
	env.WaitForPodBound(t, metav1.NamespaceDefault, "after-outage", schedTimeout)
	tookAfter := time.Since(back)
	t.Logf("after a 20 s API-server outage: pod bound %s after the server was ready again (leader %s exited: %v)",
		tookAfter.Round(time.Millisecond), next.name, next.exited())
	if tookAfter > 15*time.Second {
		t.Errorf("pod bound %s after the API server returned, want within seconds (lease 4 s, retry 500 ms, informer reads retried every 1 s)", tookAfter.Round(time.Millisecond))
	}
	t.Logf("total %s", time.Since(begin).Round(time.Millisecond))
}

// schedulerIdentity applies deploy/scheduler/rbac.yaml and returns a
// kubeconfig of its service account, so the schedulers run with exactly
// the shipped permissions.
func schedulerIdentity(t *testing.T, env *k8senv.Env) string {
	t.Helper()
	applyRBAC(t, env, "../deploy/scheduler/rbac.yaml")
	return env.WriteKubeconfig(t, "gpud-scheduler", env.ServiceAccountConfig(t, "gpud", "gpud-scheduler"))
}

// startSchedAgent registers the node and runs its agent in DRA mode with
// the admin identity (the agent's own RBAC is the DRA test's subject).
func startSchedAgent(t *testing.T, env *k8senv.Env, bin string, n *schedNode) {
	t.Helper()
	env.CreateNode(t, n.name, nil)
	dir := shortDir(t)
	n.pluginsDir, n.registry = filepath.Join(dir, "plugins"), filepath.Join(dir, "registry")
	if err := os.MkdirAll(n.registry, 0o755); err != nil {
		t.Fatal(err)
	}
	args := []string{"--kubelet-api", "dra", "--simulate", n.profile, "--node-name", n.name, "--kubeconfig", env.Kubeconfig,
		"--kubelet-plugins-dir", n.pluginsDir, "--kubelet-registry-dir", n.registry, "--cdi-dir", filepath.Join(dir, "cdi"),
		"--http-addr", k8senv.FreeAddr(t)}
	if n.profile == "dgx-a100" {
		// GPUs 0 and 1 in MIG mode without slices: MIG claims create them.
		layouts := filepath.Join(dir, "layouts.yaml")
		data := "version: v1\nmig-configs:\n  dra:\n    - devices: [0, 1]\n      mig-enabled: true\n      mig-devices: {}\n"
		if err := os.WriteFile(layouts, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--mig-config-file", layouts, "--mig-config", "dra", "--mig-reset-gpus")
	}
	startAgent(t, bin, dir, args...)
}

// schedProc is one `gpud scheduler` process.
type schedProc struct {
	name, addr, logPath string
	cmd                 *exec.Cmd
	done                chan struct{}
}

// startSchedulerProc runs `gpud scheduler` with the tests' lease timings
// and extra flags.
func startSchedulerProc(t *testing.T, bin, dir, kubeconfig string, extra ...string) *schedProc {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := &schedProc{name: filepath.Base(dir), addr: k8senv.FreeAddr(t), logPath: filepath.Join(dir, "scheduler.log"), done: make(chan struct{})}
	logFile, err := os.Create(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	args := gpudArgs(t, bin, dir, append([]string{"scheduler", "--kubeconfig", kubeconfig, "--metrics-addr", p.addr,
		"--leader-elect-namespace", "gpud", "--leader-elect-lease-duration", "4s", "--leader-elect-renew-deadline", "3s",
		"--leader-elect-retry-period", "500ms", "--resync-period", "2s", "--log-level", "debug"}, extra...)...)
	// args come from gpudArgs, the sandbox every gpud run goes through.
	// The command is an exec.Cmd value rather than exec.Command (which
	// TestProcessesOnlyThroughSandbox keeps to gpud_test.go) because the
	// test must SIGKILL this process, and gpud_test.go's startAgent runs
	// only `gpud agent` and hands out no process.
	p.cmd = &exec.Cmd{Path: bin, Args: append([]string{bin}, args...)}
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		_ = logFile.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.exited() {
			_ = p.cmd.Process.Signal(os.Interrupt)
			select {
			case <-p.done:
			case <-time.After(10 * time.Second):
				_ = p.cmd.Process.Kill()
				<-p.done
			}
		}
		data, _ := os.ReadFile(p.logPath)
		if strings.Contains(string(data), "WARNING: DATA RACE") { // built with GOFLAGS=-race
			t.Errorf("scheduler %s: data race", p.name)
		}
		if t.Failed() {
			if len(data) > 64<<10 {
				data = data[len(data)-64<<10:]
			}
			t.Logf("scheduler %s log (tail):\n%s", p.name, data)
		}
	})
	return p
}

func (p *schedProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill SIGKILLs the process and waits for it.
func (p *schedProc) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.done
}

// ready reports whether the scheduler's /readyz says ready (it leads).
func (p *schedProc) ready() bool {
	hc := http.Client{Timeout: 2 * time.Second}
	resp, err := hc.Get("http://" + p.addr + "/readyz")
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// readyz returns the body of the scheduler's /readyz ("ok", "not the
// leader", "informers not synced"), or "" when it does not answer.
func (p *schedProc) readyz() string {
	hc := http.Client{Timeout: 2 * time.Second}
	resp, err := hc.Get("http://" + p.addr + "/readyz")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(b))
}

// waitForLeader waits until exactly one live scheduler other than not is
// ready, and returns it.
func waitForLeader(t *testing.T, scheds []*schedProc, not *schedProc) *schedProc {
	t.Helper()
	var leader *schedProc
	testwait.For(t, schedTimeout, "exactly one gpud scheduler ready (leading)", func() bool {
		leader = nil
		n := 0
		for _, s := range scheds {
			if s != not && !s.exited() && s.ready() {
				leader = s
				n++
			}
		}
		return n == 1
	})
	return leader
}

func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
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

// schedPod is one pod of the test: a deploy/dra example as a claim by name.
type schedPod struct {
	name, example string
	// migProf replaces the example's 1g.10gb profile.
	migProf string
	// count, if set, replaces the example's device count.
	count int64
	// group names the pod's scheduling.k8s.io PodGroup.
	group string
	// priorityClass names the pod's PriorityClass.
	priorityClass string
}

// createGang creates a gang PodGroup of all the pods (minCount = their
// number), then the pods in it.
func createGang(t *testing.T, env *k8senv.Env, name string, pods []schedPod) {
	t.Helper()
	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name},
		Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
			Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: int32(len(pods))}}}}
	if _, err := env.Client.SchedulingV1beta1().PodGroups(pg.Namespace).Create(t.Context(), pg, metav1.CreateOptions{}); err != nil {
		t.Fatalf("PodGroup %s: %v", name, err)
	}
	for _, p := range pods {
		p.group = name
		createSchedPod(t, env, p)
	}
}

func createSchedPod(t *testing.T, env *k8senv.Env, p schedPod) {
	t.Helper()
	claim, pod := draExample(t, p.example, p.name)
	if p.migProf != "" {
		sel := &claim.Spec.Devices.Requests[0].Exactly.Selectors[0].CEL.Expression
		*sel = strings.ReplaceAll(*sel, "1g.10gb", p.migProf)
	}
	if p.count > 0 {
		claim.Spec.Devices.Requests[0].Exactly.Count = p.count
	}
	pod.Spec.SchedulerName = schedName
	pod.Spec.PriorityClassName = p.priorityClass
	if p.group != "" {
		pod.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(p.group)}
	}
	if _, err := env.Client.ResourceV1().ResourceClaims(claim.Namespace).Create(t.Context(), claim, metav1.CreateOptions{}); err != nil {
		t.Fatalf("claim %s: %v", claim.Name, err)
	}
	if _, err := env.Client.CoreV1().Pods(pod.Namespace).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("pod %s: %v", pod.Name, err)
	}
}

// schedEvent reports whether the scheduler reported a FailedScheduling
// event (events.k8s.io) for pod.
func schedEvent(t *testing.T, env *k8senv.Env, pod string) bool {
	t.Helper()
	found := false
	testwait.For(t, 30*time.Second, "a FailedScheduling event for "+pod, func() bool {
		list, err := env.Client.EventsV1().Events(metav1.NamespaceDefault).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range list.Items {
			if e.Regarding.Name == pod && e.Reason == "FailedScheduling" && e.ReportingController == schedName {
				found = true
			}
		}
		return found
	})
	return found
}

// checkSchedAllocations checks that each pod's claim is allocated on the
// pod's node, reserved for the pod alone, and that all claims together
// over-allocate nothing (view.Check on the API server's objects). It
// returns the claims by name.
func checkSchedAllocations(t *testing.T, env *k8senv.Env, pods []schedPod) map[string]*resourceapi.ResourceClaim {
	t.Helper()
	ctx := t.Context()
	c := env.Client
	claimList, err := c.ResourceV1().ResourceClaims(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sliceList, err := c.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	classList, err := c.ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodeList, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var in view.Inputs
	claims := map[string]*resourceapi.ResourceClaim{}
	for i := range claimList.Items {
		cl := &claimList.Items[i]
		in.Claims = append(in.Claims, cl)
		claims[cl.Name] = cl
	}
	for i := range sliceList.Items {
		in.Slices = append(in.Slices, &sliceList.Items[i])
	}
	for i := range classList.Items {
		in.Classes = append(in.Classes, &classList.Items[i])
	}
	for i := range nodeList.Items {
		in.Nodes = append(in.Nodes, &nodeList.Items[i])
	}
	v, skips := view.Build(in)
	for _, s := range skips {
		if s.Kind == "ResourceClaim" {
			t.Errorf("claim left out of the view: %s", s)
		}
	}
	if err := view.Check(v); err != nil {
		t.Errorf("over-allocation: %v", err)
	}
	for _, p := range pods {
		pod, err := c.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, p.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cl := claims[p.name]
		switch {
		case cl == nil || cl.Status.Allocation == nil:
			t.Errorf("pod %s bound to %s, its claim not allocated", p.name, pod.Spec.NodeName)
			continue
		case len(cl.Status.ReservedFor) != 1 || cl.Status.ReservedFor[0].UID != pod.UID:
			t.Errorf("claim %s reservedFor %+v, want pod %s alone", p.name, cl.Status.ReservedFor, pod.UID)
		case !slices.Contains(cl.Finalizers, resourceapi.Finalizer):
			t.Errorf("claim %s: finalizers %v, want %s", p.name, cl.Finalizers, resourceapi.Finalizer)
		}
		for _, r := range cl.Status.Allocation.Devices.Results {
			if r.Driver != draDriver || r.Pool != pod.Spec.NodeName {
				t.Errorf("claim %s: device %s/%s of %s, pod on %s", p.name, r.Pool, r.Device, r.Driver, pod.Spec.NodeName)
			}
		}
		t.Logf("%s -> %s: %v", p.name, pod.Spec.NodeName, schedDevices(cl))
	}
	return claims
}

func schedDevices(cl *resourceapi.ResourceClaim) []string {
	var out []string
	for _, r := range cl.Status.Allocation.Devices.Results {
		out = append(out, r.Device+draConsumed(r))
	}
	return out
}

// prepareAsKubelet registers with node n's agent and prepares every claim
// allocated on it, as the kubelet does before starting the pods.
func prepareAsKubelet(t *testing.T, n *schedNode, claims map[string]*resourceapi.ResourceClaim) {
	t.Helper()
	reg := registerapi.NewRegistrationClient(draDial(t, filepath.Join(n.registry, draDriver+"-reg.sock")))
	info, err := reg.GetInfo(t.Context(), &registerapi.InfoRequest{})
	if err != nil {
		t.Fatalf("%s: GetInfo: %v", n.name, err)
	}
	if _, err := reg.NotifyRegistrationStatus(t.Context(), &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatalf("%s: NotifyRegistrationStatus: %v", n.name, err)
	}
	var req []*drapb.Claim
	for _, cl := range claims {
		if cl.Status.Allocation != nil && len(cl.Status.Allocation.Devices.Results) > 0 && cl.Status.Allocation.Devices.Results[0].Pool == n.name {
			req = append(req, &drapb.Claim{Namespace: cl.Namespace, Name: cl.Name, Uid: string(cl.UID)})
		}
	}
	if len(req) == 0 {
		t.Fatalf("%s: no claims allocated on the node", n.name)
	}
	kubelet := drapb.NewDRAPluginClient(draDial(t, info.Endpoint))
	resp, err := kubelet.NodePrepareResources(t.Context(), &drapb.NodePrepareResourcesRequest{Claims: req})
	if err != nil {
		t.Fatalf("%s: NodePrepareResources: %v", n.name, err)
	}
	for _, r := range req {
		got := resp.Claims[r.Uid]
		if got == nil || got.Error != "" || len(got.Devices) == 0 {
			t.Errorf("%s: prepare %s: %+v", n.name, r.Name, got)
		}
	}
	t.Logf("%s: the agent prepared %d claims allocated by gpud scheduler", n.name, len(req))
}
