package test

import (
	"context"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/pkg/adminapi"
	"github.com/gpud/gpud/pkg/nodetaint"
	"github.com/gpud/gpud/pkg/simnode/simapi"
	"github.com/gpud/gpud/pkg/stream"
	"github.com/gpud/gpud/test/k8senv"
)

// TestSchedulerHealsGangFromStream is self-healing through the telemetry
// stream, end to end: a real kube-apiserver, `gpud scheduler` with its
// telemetry listener (mutual TLS, the agents' pod-bound tokens) and, per
// simulated DGX H100 node, two real `gpud agent --simulate` processes of
// the same profile and node name (so the same GPU UUIDs): the DRA agent,
// which publishes the node's ResourceSlices, and the node's streaming
// agent (--scheduler-addr, --node-taint), whose admin socket's POST
// /v1/sim/xid makes a GPU fail as the driver reports it. On a real node
// one agent does both; split, the DRA agent never sees the Xid, so the
// slices stay healthy (checked) and whatever evicts came through the
// stream alone.
//
// A gang of two 4-GPU pods runs; Xid 79 on one of its GPUs; both members
// are evicted within seconds with Warning Events naming the GPU and the
// Xid; the recreated gang binds on healthy GPUs, never on the failed one;
// a second GPU of that node failing taints the Node (the agent's
// --node-taint, 2 GPUs within the window by default), the first alone did
// not. With `--heal=false` on the scheduler the evictions never come and
// the test fails.
func TestSchedulerHealsGangFromStream(t *testing.T) {
	t.Parallel() // only its own etcd, API server and processes: see TestMain
	if testing.Short() {
		t.Skip("runs kube-apiserver, four gpud agents and gpud scheduler")
	}
	bin := buildGpud(t)
	env := k8senv.Start(t, k8senv.WithoutScheduler())
	c := env.Client
	ctx := t.Context()
	createDeviceClasses(t, c)
	kubeconfig := schedulerIdentity(t, env) // creates namespace gpud
	nodes := []*schedNode{{name: "node-a", profile: "dgx-h100"}, {name: "node-b", profile: "dgx-h100"}}
	for _, n := range nodes {
		startSchedAgent(t, env, bin, n)
	}

	// The stream's certificates: a CA, the scheduler's (127.0.0.1), the
	// agents' client certificate.
	dir := shortDir(t)
	ca, err := stream.NewCA("gpud-heal-test", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	server := issueFiles(t, dir, ca, "scheduler", stream.Leaf{CommonName: "gpud-scheduler", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true})
	agentCert := issueFiles(t, dir, ca, "agent", stream.Leaf{CommonName: stream.AgentCommonName, Client: true})
	telAddr := k8senv.FreeAddr(t)
	sched := startSchedulerProc(t, bin, filepath.Join(dir, "s"), kubeconfig, "--telemetry-addr", telAddr,
		"--tls-cert", server.Cert, "--tls-key", server.Key, "--tls-ca", server.CA)

	// Each node's streaming agent, with the token the kubelet would
	// project into its pod (ServiceAccount gpud/gpud, on the node).
	createSA(t, env, "gpud", "gpud")
	admin := map[string]*adminapi.Client{}
	for _, n := range nodes {
		token := boundToken(t, env, createPodOn(t, env, "gpud", "gpud-"+n.name, "gpud", n.name), "gpud-telemetry")
		adir := shortDir(t)
		tokenFile := filepath.Join(adir, "token")
		if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
			t.Fatal(err)
		}
		sock := filepath.Join(adir, "admin.sock")
		startAgent(t, bin, adir, "--simulate", n.profile, "--node-name", n.name, "--kubeconfig", env.Kubeconfig,
			"--device-plugin-dir", "", "--http-addr", "", "--node-labels=false", "--admin-socket", sock,
			"--scheduler-addr", telAddr, "--tls-cert", agentCert.Cert, "--tls-key", agentCert.Key, "--tls-ca", agentCert.CA,
			"--stream-token-file", tokenFile, "--stream-interval", streamInterval.String(), "--node-taint")
		admin[n.name] = adminapi.NewClient(sock, 10*time.Second)
	}
	for _, n := range nodes {
		waitGPUs(t, env, schedTimeout, 8, n.name)
	}
	waitForLeader(t, []*schedProc{sched}, nil)
	testwait.ForErr(t, 60*time.Second, "both nodes streaming to the scheduler", func() error {
		m := scrape(t, sched.addr)
		for _, want := range []string{"gpud_scheduler_telemetry_streams 2", `gpud_scheduler_telemetry_age_seconds{node="node-a"}`, `gpud_scheduler_telemetry_age_seconds{node="node-b"}`} {
			if !strings.Contains(m, want) {
				return errorString("no " + want + " in:\n" + grepLines(m, "gpud_scheduler_telemetry_"))
			}
		}
		return nil
	})

	gang := []schedPod{{name: "train-0", example: "two-gpus-nvlink", count: 4}, {name: "train-1", example: "two-gpus-nvlink", count: 4}}
	createGang(t, env, "train", gang)
	for _, p := range gang {
		env.WaitForPodBound(t, metav1.NamespaceDefault, p.name, schedTimeout)
	}
	claims := checkSchedAllocations(t, env, gang)

	// GPU failure: Xid 79 on one GPU of train-1, on that node only.
	res := claims["train-1"].Status.Allocation.Devices.Results[1]
	failedNode := res.Pool
	uuid := draAttr(draDevices(t, env, failedNode)[res.Device], "uuid")
	if uuid == "" {
		t.Fatalf("device %s/%s has no uuid attribute", failedNode, res.Device)
	}
	xid := func(node, uuid string) time.Time {
		t.Helper()
		at := time.Now()
		var got simapi.XidResponse
		if err := admin[node].Call(ctx, "POST", simapi.XidRoute, simapi.XidRequest{GPU: uuid, Xid: 79}, &got); err != nil {
			t.Fatalf("Xid 79 on %s of %s: %v", uuid, node, err)
		}
		if got.UUID != uuid || !got.Lost {
			t.Fatalf("Xid 79 on %s of %s answered %+v, want that GPU lost", uuid, node, got)
		}
		return at
	}
	injected := xid(failedNode, uuid)
	uids := map[string]string{}
	testwait.For(t, healEvictTimeout, "both gang members evicted after the GPU failed", func() bool {
		n := 0
		for _, p := range gang {
			pod, err := c.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, p.name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			uids[p.name] = string(pod.UID)
			if pod.DeletionTimestamp != nil {
				n++
			}
		}
		return n == len(gang)
	})
	seen := time.Since(injected)
	// The Events' times (microseconds, set by the scheduler right after
	// each eviction) give the latency without the polling's.
	var evictedAt []time.Duration
	testwait.For(t, healEvictTimeout, "a GPUFailed Event on each member naming the node, GPU and Xid", func() bool {
		list, err := c.EventsV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		evictedAt = evictedAt[:0]
		for _, p := range gang {
			i := slices.IndexFunc(list.Items, func(e eventsv1.Event) bool {
				return e.Regarding.Name == p.name && e.Reason == "GPUFailed" && e.Type == corev1.EventTypeWarning &&
					e.ReportingController == schedName && strings.Contains(e.Note, "GPU "+uuid+" on node "+failedNode) &&
					strings.Contains(strings.ToLower(e.Note), "xid 79")
			})
			if i < 0 {
				return false
			}
			evictedAt = append(evictedAt, list.Items[i].EventTime.Sub(injected))
		}
		return true
	})
	t.Logf("Xid 79 on GPU %s (%s/%s): gang of 2 evicted %v after the injection by the Events' times, seen by polling after %s (stream interval %s; machine shared with other builds)",
		uuid, failedNode, res.Device, roundAll(evictedAt), seen.Round(time.Millisecond), streamInterval)
	// The slices never said so: the stream alone told the scheduler.
	if d := draDevices(t, env, failedNode)[res.Device]; len(d.Taints) > 0 {
		t.Errorf("the failed GPU's ResourceSlice device has taints %+v: the eviction may not have come from the stream", d.Taints)
	}
	if m := scrape(t, sched.addr); !strings.Contains(m, `gpud_heal_evictions_total{action="evict",reason="device"} 1`) ||
		!strings.Contains(m, `gpud_heal_evictions_total{action="evict",reason="gang"} 1`) {
		t.Errorf("metrics lack one device and one gang eviction:\n%s", grepLines(m, "gpud_heal_"))
	}
	if tn := nodeTaint(t, env, failedNode); tn != nil {
		t.Errorf("node %s tainted %+v after one GPU failed", failedNode, tn)
	}

	// The kubelet ends the evicted pods, the resourceclaim controller
	// frees their claims, the gang's controller creates new ones.
	for _, p := range gang {
		pod, err := c.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, p.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		releaseClaims(t, env, pod)
		if err := c.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		if err := c.ResourceV1().ResourceClaims(pod.Namespace).Delete(ctx, p.name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	testwait.For(t, schedTimeout, "the evicted pods and their claims gone", func() bool {
		for _, p := range gang {
			if _, err := c.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, p.name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false
			}
			if _, err := c.ResourceV1().ResourceClaims(metav1.NamespaceDefault).Get(ctx, p.name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false
			}
		}
		return true
	})
	recreated := time.Now()
	for _, p := range gang {
		p.group = "train"
		createSchedPod(t, env, p)
	}
	for _, p := range gang {
		env.WaitForPodBound(t, metav1.NamespaceDefault, p.name, schedTimeout)
	}
	t.Logf("new gang bound %s after it was recreated", time.Since(recreated).Round(time.Millisecond))
	claims = checkSchedAllocations(t, env, gang)
	held := map[string]bool{}
	for _, p := range gang {
		pod, err := c.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, p.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if string(pod.UID) == uids[p.name] {
			t.Fatalf("pod %s is the evicted one", p.name)
		}
		for _, r := range claims[p.name].Status.Allocation.Devices.Results {
			held[r.Pool+"/"+r.Device] = true
			if r.Pool == failedNode && r.Device == res.Device {
				t.Errorf("pod %s placed on the failed GPU %s/%s (its slice says healthy: only the stream knows)", p.name, r.Pool, r.Device)
			}
		}
	}

	// A second GPU of that node fails (one nobody holds): the node is
	// tainted; the new gang, on healthy GPUs, stays.
	var second, secondDev string
	devs := draDevices(t, env, failedNode)
	for _, name := range slices.Sorted(maps.Keys(devs)) {
		d := devs[name]
		if draAttr(d, "type") == "gpu" && name != res.Device && !held[failedNode+"/"+name] {
			second, secondDev = draAttr(d, "uuid"), name
			break
		}
	}
	if second == "" {
		t.Fatalf("no free GPU left on %s for the second failure", failedNode)
	}
	injected = xid(failedNode, second)
	var tn *corev1.Taint
	testwait.For(t, 30*time.Second, "node "+failedNode+" tainted after its second GPU failed", func() bool {
		tn = nodeTaint(t, env, failedNode)
		return tn != nil
	})
	tainted := time.Since(injected)
	node, err := c.CoreV1().Nodes().Get(ctx, failedNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reason := node.Annotations[nodetaint.ReasonAnnotation]
	t.Logf("Xid 79 on a second GPU %s (%s): node tainted %s=%s:%s within %s (%s)", second, secondDev, tn.Key, tn.Value, tn.Effect, tainted.Round(time.Millisecond), reason)
	if tn.Value != nodetaint.ValueMultiple || tn.Effect != corev1.TaintEffectNoSchedule || !strings.Contains(reason, second) {
		t.Errorf("taint %+v, reason %q: want %s=%s:NoSchedule naming GPU %s", tn, reason, nodetaint.TaintKey, nodetaint.ValueMultiple, second)
	}
	for _, p := range gang {
		pod, err := c.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, p.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pod.DeletionTimestamp != nil {
			t.Errorf("new pod %s evicted although its GPUs are healthy", p.name)
		}
	}
	if m := scrape(t, sched.addr); !strings.Contains(m, `gpud_heal_evictions_total{action="evict",reason="device"} 1`) {
		t.Errorf("evictions after the new gang bound:\n%s", grepLines(m, "gpud_heal_"))
	}
}

// nodeTaint is the agent's node taint (nodetaint.TaintKey) on node, nil
// when there is none.
func nodeTaint(t *testing.T, env *k8senv.Env, node string) *corev1.Taint {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	n, err := env.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n.Spec.Taints {
		if n.Spec.Taints[i].Key == nodetaint.TaintKey {
			return &n.Spec.Taints[i]
		}
	}
	return nil
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}
