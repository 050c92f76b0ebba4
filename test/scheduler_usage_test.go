package test

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	telemetryv1 "github.com/gpud/gpud/api/telemetry/v1"
	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/pkg/scheduler/learn"
	"github.com/gpud/gpud/pkg/stream"
	"github.com/gpud/gpud/test/k8senv"
)

// TestSchedulerOvercommitsOnLearnedUsage: `gpud scheduler --overcommit`
// (deploy/scheduler's RBAC) against a real kube-apiserver, a simulated DGX
// H100's DRA agent publishing its slices, and the node's stream from this
// process reporting each claim's GPU memory (as the agent attributes it).
// Two pods of one workload (20 GiB fractions) peak at 70 GiB and succeed:
// the leader learns that peak (ConfigMap gpud/gpud-scheduler-usage). A
// third pod of the workload using 5 GiB now then counts at 70 GiB: a
// 20 GiB fraction of another workload is not packed next to it, where,
// counted at its measured use as before learning, such fractions pack.
func TestSchedulerOvercommitsOnLearnedUsage(t *testing.T) {
	t.Parallel() // only its own etcd, API server and processes: see TestMain
	if testing.Short() {
		t.Skip("runs kube-apiserver, a gpud agent and gpud scheduler")
	}
	bin := buildGpud(t)
	env := k8senv.Start(t, k8senv.WithoutScheduler())
	createDeviceClasses(t, env.Client)
	kubeconfig := schedulerIdentity(t, env)
	const node = "node-u"
	startSchedAgent(t, env, bin, &schedNode{name: node, profile: "dgx-h100"})
	testwait.For(t, schedTimeout, "the agent's ResourceSlices", func() bool { return len(draDevices(t, env, node)) >= 8 })
	devices := draDevices(t, env, node)
	var uuids []string
	for _, d := range devices {
		if draAttr(d, "type") == "gpu" {
			uuids = append(uuids, draAttr(d, "uuid"))
		}
	}

	dir := shortDir(t)
	ca, err := stream.NewCA("gpud-usage-test", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	server := issueFiles(t, dir, ca, "scheduler", stream.Leaf{CommonName: "gpud-scheduler", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true})
	agentFiles := issueFiles(t, dir, ca, "agent", stream.Leaf{CommonName: stream.AgentCommonName, Client: true})
	createSA(t, env, "gpud", "gpud")
	token := boundToken(t, env, createPodOn(t, env, "gpud", "gpud-"+node, "gpud", node), "gpud-telemetry")
	telAddr := k8senv.FreeAddr(t)
	sched := startSchedulerProc(t, bin, filepath.Join(dir, "s"), kubeconfig, "--telemetry-addr", telAddr,
		"--tls-cert", server.Cert, "--tls-key", server.Key, "--tls-ca", server.CA, "--overcommit",
		"--learn-usage-min-samples", "2", "--learn-runtimes-persist-interval", "1s")
	waitForLeader(t, []*schedProc{sched}, nil)

	// The node's stream: its GPUs, and each claim's memory as set here.
	var mu sync.Mutex
	use := map[string]map[string]uint64{} // GPU uuid -> claim UID -> bytes
	certs, err := stream.LoadCerts(agentFiles, nil)
	if err != nil {
		t.Fatal(err)
	}
	hello := func() *telemetryv1.Hello {
		h := &telemetryv1.Hello{}
		for _, u := range uuids {
			h.Devices = append(h.Devices, &telemetryv1.Device{Uuid: u, Model: "NVIDIA H100 80GB HBM3", MemoryTotalBytes: 80 << 30, Health: telemetryv1.Health_HEALTH_HEALTHY})
		}
		return h
	}
	samples := func() *telemetryv1.Samples {
		mu.Lock()
		defer mu.Unlock()
		s := &telemetryv1.Samples{TakenUnixNanos: time.Now().UnixNano()}
		for _, u := range uuids {
			d := &telemetryv1.DeviceSample{Uuid: u}
			var used uint64
			for c, b := range use[u] {
				used += b
				d.Claims = append(d.Claims, &telemetryv1.ClaimMemory{ClaimUid: c, UsedBytes: b})
			}
			d.MemoryUsedBytes = &used
			s.Devices = append(s.Devices, d)
		}
		return s
	}
	c, err := stream.NewClient(stream.Config{Addr: telAddr, Node: node, Certs: certs, Token: func() (string, error) { return token, nil }, ServerName: "127.0.0.1",
		Interval: streamInterval, Hello: hello, Samples: samples})
	if err != nil {
		t.Fatal(err)
	}
	testwait.Run(t, "stream client", c.Run)
	testwait.ForErr(t, 30*time.Second, "the node streaming", func() error {
		if m := scrape(t, sched.addr); !strings.Contains(m, "gpud_scheduler_telemetry_streams 1") {
			return errorString("no stream yet")
		}
		return nil
	})

	// place binds a fraction and returns its GPU's uuid and claim UID.
	place := func(name string) (string, string) {
		t.Helper()
		createSchedPod(t, env, schedPod{name: name, example: "fraction-20gi"})
		env.WaitForPodBound(t, metav1.NamespaceDefault, name, schedTimeout)
		cl, err := env.Client.ResourceV1().ResourceClaims(metav1.NamespaceDefault).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil || cl.Status.Allocation == nil || len(cl.Status.Allocation.Devices.Results) != 1 {
			t.Fatalf("claim %s: %v, %+v", name, err, cl.Status)
		}
		return draAttr(devices[cl.Status.Allocation.Devices.Results[0].Device], "uuid"), string(cl.UID)
	}
	report := func(gpu, claim string, b uint64) {
		mu.Lock()
		defer mu.Unlock()
		if use[gpu] == nil {
			use[gpu] = map[string]uint64{}
		}
		use[gpu][claim] = b
	}
	observations := func() string {
		return grepLines(scrape(t, sched.addr), "gpud_scheduler_usage_observations_total ")
	}

	// Before learning: fractions measured at 5 GiB pack onto one GPU.
	g, claim := place("ctl-1")
	report(g, claim, 5<<30)
	time.Sleep(3 * streamInterval)
	if g2, _ := place("ctl-2"); g2 != g {
		t.Fatalf("two fractions on GPUs %s and %s before learning: the check below needs packing", g, g2)
	}

	// Learning: two pods of workload "use" peak at 70 GiB and succeed
	// (each sample seen by a cycle: --resync-period 2s).
	for i := 1; i <= 2; i++ {
		name := fmt.Sprintf("use-%d", i)
		g, claim := place(name)
		report(g, claim, 5<<30)
		time.Sleep(2500 * time.Millisecond)
		report(g, claim, 70<<30)
		time.Sleep(2500 * time.Millisecond)
		report(g, claim, 10<<30)
		time.Sleep(2500 * time.Millisecond)
		succeedPod(t, env, name, time.Minute)
		want := fmt.Sprintf("gpud_scheduler_usage_observations_total %d", i)
		testwait.ForErr(t, 30*time.Second, "the scheduler to learn "+name+"'s peak", func() error {
			if o := observations(); o != want {
				return errorString("metrics say " + o)
			}
			return nil
		})
		report(g, claim, 0)
	}
	testwait.ForErr(t, 30*time.Second, "the learned usage in ConfigMap gpud/"+learn.DefaultUsageConfigMap, func() error {
		cm, err := env.Client.CoreV1().ConfigMaps("gpud").Get(t.Context(), learn.DefaultUsageConfigMap, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !strings.Contains(cm.Data[learn.UsageDataKey], "owner=Pod/use") {
			return errorString("no key of workload use in " + cm.Data[learn.UsageDataKey])
		}
		return nil
	})

	// The pods and claims go (as the kubelet and the resourceclaim
	// controller would have it), so that the node is empty again.
	for _, name := range []string{"ctl-1", "ctl-2", "use-1", "use-2"} {
		p, err := env.Client.CoreV1().Pods(metav1.NamespaceDefault).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		releaseClaims(t, env, p)
		if err := env.Client.CoreV1().Pods(p.Namespace).Delete(t.Context(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
		if err := env.Client.ResourceV1().ResourceClaims(p.Namespace).Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	clear(use)
	mu.Unlock()
	testwait.For(t, schedTimeout, "the claims gone", func() bool {
		l, err := env.Client.ResourceV1().ResourceClaims(metav1.NamespaceDefault).List(t.Context(), metav1.ListOptions{})
		return err == nil && len(l.Items) == 0
	})

	// A new pod of the workload uses 5 GiB now, learned 70: a fraction of
	// another workload is not packed next to it.
	g, claim = place("use-3")
	report(g, claim, 5<<30)
	time.Sleep(3 * streamInterval)
	other, _ := place("other-1")
	t.Logf("use-3 on %s at 5 GiB measured, learned peak 70 GiB; the next 20 GiB fraction bound to %s", g, other)
	if other == g {
		t.Errorf("a 20 GiB fraction packed next to a pod whose workload peaks at 70 GiB of 80 (--overcommit counted 5 GiB measured, not the learned peak)")
	}
}
