package test

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	telemetryv1 "github.com/gpud/gpud/api/telemetry/v1"
	"github.com/gpud/gpud/internal/manifest"
	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/simnode"
	"github.com/gpud/gpud/pkg/stream"
	"github.com/gpud/gpud/test/k8senv"
)

// The telemetry stream end-to-end test: a real kube-apiserver, a simulated
// DGX H100 node whose DRA agent (a `gpud agent` process) publishes its
// ResourceSlices, a `gpud scheduler` process with --telemetry-addr over
// mutual TLS (certificates made here) and the node's agent pod's token
// (TokenRequest, bound to a pod on the node), and the node's telemetry half in
// this process on a simulated node of the same profile and node name (so
// the same GPU UUIDs: they derive from both),
// so that the test can inject an Xid and GPU memory use into it: discovery
// store, NVML health monitor and a stream.Client. The DRA agent process
// never sees the Xid, so its ResourceSlices stay healthy: whatever keeps
// the next pod off the GPU came through the stream.

const streamInterval = 500 * time.Millisecond

func TestTelemetryStreamEndToEnd(t *testing.T) {
	t.Parallel() // only its own etcd, API server and processes: see TestMain
	if testing.Short() {
		t.Skip("runs kube-apiserver, a gpud agent and a gpud scheduler")
	}
	bin := buildGpud(t)
	env := k8senv.Start(t, k8senv.WithoutScheduler())
	createDeviceClasses(t, env.Client)
	kubeconfig := schedulerIdentity(t, env)
	const node = "node-h100" // not the profile's name: the GPU UUIDs derive from the node's name
	startSchedAgent(t, env, bin, &schedNode{name: node, profile: "dgx-h100"})
	testwait.For(t, schedTimeout, "the agent's ResourceSlices", func() bool { return len(draDevices(t, env, node)) >= 8 })

	// Certificates: a CA, the scheduler's (127.0.0.1) and the node's.
	dir := shortDir(t)
	ca, err := stream.NewCA("gpud-telemetry-test", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caFile := write("ca.crt", ca.CertPEM)
	issue := func(name string, leaf stream.Leaf) stream.CertFiles {
		leaf.NotBefore, leaf.Validity = time.Now(), time.Hour
		c, k, err := ca.Issue(leaf)
		if err != nil {
			t.Fatal(err)
		}
		return stream.CertFiles{Cert: write(name+".crt", c), Key: write(name+".key", k), CA: caFile}
	}
	server := issue("scheduler", stream.Leaf{CommonName: "gpud-scheduler", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true})
	agentFiles := issue("agent", stream.Leaf{CommonName: stream.AgentCommonName, Client: true})
	// The node's agent pod (ServiceAccount gpud/gpud, on the node) and
	// the token the kubelet would project into it.
	createSA(t, env, "gpud", "gpud")
	agentToken := boundToken(t, env, createPodOn(t, env, "gpud", "gpud-"+node, "gpud", node), "gpud-telemetry")

	// Two replicas, each with its telemetry listener; the agent reaches
	// them through a proxy that, like a Service, sends each new connection
	// to the ready replica (only the leader is ready).
	var scheds []*schedProc
	telAddrs := map[*schedProc]string{}
	for _, name := range []string{"a", "b"} {
		addr := k8senv.FreeAddr(t)
		p := startSchedulerProc(t, bin, filepath.Join(dir, name), kubeconfig, "--telemetry-addr", addr,
			"--tls-cert", server.Cert, "--tls-key", server.Key, "--tls-ca", server.CA)
		scheds = append(scheds, p)
		telAddrs[p] = addr
	}
	sched := waitForLeader(t, scheds, nil)
	telAddr := serviceProxy(t, func() string {
		for _, p := range scheds {
			if !p.exited() && p.ready() {
				return telAddrs[p]
			}
		}
		return ""
	})

	// The node's telemetry half, on its own simulated node.
	sim, store := startTelemetryAgent(t, node, telAddr, agentFiles, agentToken)
	streaming := func(p *schedProc) error {
		m := scrape(t, p.addr)
		for _, want := range []string{"gpud_scheduler_telemetry_streams 1", `gpud_scheduler_telemetry_age_seconds{node="` + node + `"}`} {
			if !strings.Contains(m, want) {
				return errorString("no " + want)
			}
		}
		return nil
	}
	testwait.ForErr(t, 30*time.Second, "the leader's telemetry metrics for the node", func() error { return streaming(sched) })

	devices := draDevices(t, env, node)
	gpuOf := func(pod string) (uuid string, index int) {
		t.Helper()
		cl, err := env.Client.ResourceV1().ResourceClaims(metav1.NamespaceDefault).Get(t.Context(), pod, metav1.GetOptions{})
		if err != nil || cl.Status.Allocation == nil || len(cl.Status.Allocation.Devices.Results) != 1 {
			t.Fatalf("claim %s: %v, %+v", pod, err, cl.Status)
		}
		uuid = draAttr(devices[cl.Status.Allocation.Devices.Results[0].Device], "uuid")
		for _, g := range store.Current().GPUs {
			if g.UUID == uuid {
				return uuid, g.Index
			}
		}
		t.Fatalf("claim %s: device %s (uuid %q) is not one of the node's GPUs", pod, cl.Status.Allocation.Devices.Results[0].Device, uuid)
		return "", 0
	}
	place := func(name string) string {
		t.Helper()
		createSchedPod(t, env, schedPod{name: name, example: "fraction-20gi"})
		env.WaitForPodBound(t, metav1.NamespaceDefault, name, schedTimeout)
		u, _ := gpuOf(name)
		return u
	}

	// Without telemetry to the contrary, fractions pack onto one GPU.
	g := place("tel-frac-1")
	if g2 := place("tel-frac-2"); g2 != g {
		t.Fatalf("two fractions on GPUs %s and %s: the check below needs packing", g, g2)
	}
	_, gIndex := gpuOf("tel-frac-1")

	// Health first: an Xid on that GPU, and the next fraction lands
	// elsewhere although the ResourceSlice still says healthy.
	testwait.For(t, 20*time.Second, "Xid 48 to make the GPU unhealthy on the node", func() bool {
		if err := sim.InjectXid(gIndex, 48); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
		for _, d := range store.Current().GPUs {
			if d.UUID == g {
				return d.Health != gpu.Healthy
			}
		}
		return false
	})
	seen := time.Now()
	createSchedPod(t, env, schedPod{name: "tel-frac-3", example: "fraction-20gi"})
	env.WaitForPodBound(t, metav1.NamespaceDefault, "tel-frac-3", schedTimeout)
	h, hIndex := gpuOf("tel-frac-3")
	t.Logf("Xid on %s; the next fraction bound to %s %s after the node saw the Xid", g, h, time.Since(seen).Round(time.Millisecond))
	if h == g {
		t.Errorf("the fraction created right after the Xid landed on the GPU that had it (%s)", g)
	}

	// Real usage: tenants of GPU h use 70 GiB of its 80 although they
	// asked for 20: a new fraction must not be offered it.
	if err := sim.AddProcess(hIndex, 4242, 70<<30); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * streamInterval) // a sample or two reaches the scheduler
	h2 := place("tel-frac-4")
	t.Logf("GPU %s measured at 70 GiB used; the next fraction bound to %s", h, h2)
	if h2 == h {
		t.Errorf("a fraction landed on GPU %s whose measured memory (70 GiB of 80 used) leaves no room for its 20 GiB", h)
	}
	if h2 == g {
		t.Errorf("a fraction landed on GPU %s, still unhealthy after its Xid", g)
	}

	// Leader change: the leader dies, the other replica takes the Lease
	// and becomes ready, and the agent streams to it within seconds.
	sched.kill(t)
	next := waitForLeader(t, scheds, sched)
	took := time.Now()
	testwait.ForErr(t, 10*time.Second, "the agent to stream to the new leader", func() error { return streaming(next) })
	t.Logf("the agent streamed to the new leader %s after it became ready", time.Since(took).Round(time.Millisecond))
}

// serviceProxy forwards each TCP connection to target() at the time it
// arrives (none: the connection is closed), as a Service routes to ready
// endpoints; it returns its address.
func serviceProxy(t *testing.T, target func() string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				addr := target()
				if addr == "" {
					return
				}
				up, err := net.DialTimeout("tcp", addr, 2*time.Second)
				if err != nil {
					return
				}
				defer up.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
				go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	return ln.Addr().String()
}

type errorString string

func (e errorString) Error() string { return string(e) }

// startTelemetryAgent runs the node's telemetry half in this process: a
// simulated DGX H100 named node (so its GPU UUIDs are the agent process's), its inventory store and NVML health monitor, and a
// stream.Client that sends the GPUs, their measured memory every
// streamInterval, and each health change as it happens.
func startTelemetryAgent(t *testing.T, node, addr string, files stream.CertFiles, token string) (*simnode.Node, *discovery.Store) {
	t.Helper()
	p, err := simnode.LoadProfile("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	sim, err := simnode.New(p, simnode.WithNodeName(node))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	store := discovery.NewStore(discovery.New(sim, node, nil), nil)
	if _, err := store.Rediscover(); err != nil {
		t.Fatal(err)
	}
	health := discovery.NewHealthMonitor(sim, discovery.HealthConfig{}, store.SetHealth, nil)
	testwait.Run(t, "health monitor", health.Run)
	certs, err := stream.LoadCerts(files, nil)
	if err != nil {
		t.Fatal(err)
	}
	devices := func(inv gpu.Inventory) []*telemetryv1.Device {
		var out []*telemetryv1.Device
		for _, g := range inv.GPUs {
			h := telemetryv1.Health_HEALTH_HEALTHY
			if g.Health != gpu.Healthy {
				h = telemetryv1.Health_HEALTH_UNHEALTHY
			}
			out = append(out, &telemetryv1.Device{Uuid: g.UUID, Model: g.Name, MemoryTotalBytes: g.MemoryBytes, Health: h, HealthReason: g.HealthReason})
		}
		return out
	}
	samples := func() *telemetryv1.Samples {
		s := &telemetryv1.Samples{TakenUnixNanos: time.Now().UnixNano()}
		for _, g := range store.Current().GPUs {
			dev, ret := sim.DeviceGetHandleByUUID(g.UUID)
			if ret != nvml.SUCCESS {
				continue
			}
			mem, ret := dev.GetMemoryInfo()
			if ret != nvml.SUCCESS {
				continue
			}
			used := mem.Used
			s.Devices = append(s.Devices, &telemetryv1.DeviceSample{Uuid: g.UUID, MemoryUsedBytes: &used})
		}
		return s
	}
	c, err := stream.NewClient(stream.Config{Addr: addr, Node: node, Certs: certs, Token: func() (string, error) { return token, nil }, ServerName: "127.0.0.1", Interval: streamInterval,
		Hello: func() *telemetryv1.Hello { return &telemetryv1.Hello{Devices: devices(store.Current())} }, Samples: samples})
	if err != nil {
		t.Fatal(err)
	}
	testwait.Run(t, "stream client", c.Run)
	testwait.Run(t, "health events", func(ctx context.Context) error {
		prev := devices(store.Current())
		for {
			ch := store.InventoryChanged()
			select {
			case <-ctx.Done():
				return nil
			case <-ch:
			}
			cur := devices(store.Current())
			for i, d := range cur {
				if i < len(prev) && prev[i].GetHealth() != d.GetHealth() {
					c.Event(&telemetryv1.Event{Kind: telemetryv1.Event_KIND_HEALTH, DeviceUuid: d.GetUuid(), Health: d.GetHealth(), Reason: d.GetHealthReason()})
				}
			}
			prev = cur
		}
	})
	return sim, store
}

// TestHelmSchedulerTelemetryMatchesOverlay renders the chart with
// scheduler.telemetry.enabled and compares the scheduler's args, ports,
// mounts and volumes with deploy/scheduler/telemetry's patch applied to
// deploy/scheduler/deployment.yaml, and its telemetry Service with the
// overlay's.
func TestHelmSchedulerTelemetryMatchesOverlay(t *testing.T) {
	objs := helmMustRender(t, map[string]any{"mode": "dra", "scheduler": map[string]any{"enabled": true, "telemetry": map[string]any{"enabled": true}}}, false)
	got := objs["Deployment/gpud-scheduler"].(*appsv1.Deployment)
	var want appsv1.Deployment
	patchFile(t, helmManifest(t, "../deploy/scheduler/deployment.yaml", "Deployment/gpud-scheduler"), "../deploy/scheduler/telemetry/deployment-patch.yaml", &want)
	gc, wc := got.Spec.Template.Spec.Containers[0], want.Spec.Template.Spec.Containers[0]
	for _, f := range []struct {
		name      string
		got, want any
	}{
		{"args", gc.Args, wc.Args},
		{"ports", gc.Ports, wc.Ports},
		{"volumeMounts", gc.VolumeMounts, wc.VolumeMounts},
		{"volumes", got.Spec.Template.Spec.Volumes, want.Spec.Template.Spec.Volumes},
	} {
		if !reflect.DeepEqual(f.got, f.want) {
			gj, _ := json.Marshal(f.got)
			wj, _ := json.Marshal(f.want)
			t.Errorf("scheduler %s with telemetry differs from deploy/scheduler/telemetry:\nchart:   %s\noverlay: %s", f.name, gj, wj)
		}
	}
	svc, ok := objs["Service/gpud-scheduler-telemetry"].(*corev1.Service)
	if !ok {
		t.Fatal("no Service gpud-scheduler-telemetry in the chart")
	}
	wsvc := helmManifest(t, "../deploy/scheduler/telemetry/service.yaml", "Service/gpud-scheduler-telemetry").(*corev1.Service)
	if !reflect.DeepEqual(svc.Spec.Ports, wsvc.Spec.Ports) || svc.Spec.PublishNotReadyAddresses {
		t.Errorf("telemetry Service ports %+v (publishNotReady %v), overlay %+v", svc.Spec.Ports, svc.Spec.PublishNotReadyAddresses, wsvc.Spec.Ports)
	}
	// Off by default: the render equals deploy/scheduler (TestHelmChartSchedulerMatchesManifests).
	if _, ok := helmMustRender(t, map[string]any{"mode": "dra", "scheduler": map[string]any{"enabled": true}}, false)["Service/gpud-scheduler-telemetry"]; ok {
		t.Error("a telemetry Service without scheduler.telemetry.enabled")
	}
}

// TestHelmAgentStreamMatchesPatch renders the chart with
// agent.stream.enabled and compares the agent's args, mounts and volumes
// with deploy/daemonset/stream's patch applied to deploy/daemonset.
func TestHelmAgentStreamMatchesPatch(t *testing.T) {
	objs := helmMustRender(t, map[string]any{"agent": map[string]any{"stream": map[string]any{"enabled": true}}}, false)
	got := objs["DaemonSet/gpud"].(*appsv1.DaemonSet)
	var want appsv1.DaemonSet
	patchFile(t, helmManifest(t, "../deploy/daemonset/daemonset.yaml", "DaemonSet/gpud"), "../deploy/daemonset/stream/daemonset-patch.yaml", &want)
	gc, wc := got.Spec.Template.Spec.Containers[0], want.Spec.Template.Spec.Containers[0]
	for _, f := range []struct {
		name      string
		got, want any
	}{
		{"args", gc.Args, wc.Args},
		{"volumeMounts", gc.VolumeMounts, wc.VolumeMounts},
		{"volumes", got.Spec.Template.Spec.Volumes, want.Spec.Template.Spec.Volumes},
	} {
		if !reflect.DeepEqual(f.got, f.want) {
			gj, _ := json.Marshal(f.got)
			wj, _ := json.Marshal(f.want)
			t.Errorf("agent %s with the stream differs from deploy/daemonset/stream:\nchart: %s\npatch: %s", f.name, gj, wj)
		}
	}
}

// patchFile applies a deploy/ JSON patch file to obj into out.
func patchFile(t *testing.T, obj any, patchPath string, out any) {
	t.Helper()
	if err := manifest.PatchFile(obj, patchPath, out); err != nil {
		t.Fatal(err)
	}
}

// TestTelemetryStreamNodeIdentity: on a real kube-apiserver, node-a's
// agent pod tries to report for node-b with everything it can read in its
// own pod: the agents' shared client certificate and key (the Secret every
// agent mounts) and its own projected ServiceAccount token. The scheduler
// (a `gpud scheduler` process with the shipped RBAC) refuses it, and every
// other way to get a node's stream without that node's token: no token, a
// token for the wrong audience, a tenant pod's token on the same node, the
// token of a deleted pod, an expired token (signed with the cluster's own
// key, so that only its expiry is wrong); and handshakes without a
// certificate the CA signed are refused and counted. Tokens come from the
// TokenRequest API bound to the pod, as the kubelet projects them, so the
// pod and node claims are the API server's own.
func TestTelemetryStreamNodeIdentity(t *testing.T) {
	t.Parallel() // only its own etcd, API server and processes: see TestMain
	if testing.Short() {
		t.Skip("runs kube-apiserver and a gpud scheduler")
	}
	bin := buildGpud(t)
	env := k8senv.Start(t, k8senv.WithoutScheduler())
	kubeconfig := schedulerIdentity(t, env) // creates namespace gpud, applies deploy/scheduler/rbac.yaml
	for _, n := range []string{"node-a", "node-b"} {
		env.CreateNode(t, n, nil)
	}
	createSA(t, env, "gpud", "gpud")
	createSA(t, env, metav1.NamespaceDefault, "default")
	podA := createPodOn(t, env, "gpud", "gpud-a", "gpud", "node-a")
	podB := createPodOn(t, env, "gpud", "gpud-b", "gpud", "node-b")
	tenant := createPodOn(t, env, metav1.NamespaceDefault, "job-on-a", "default", "node-a")
	tokenA := boundToken(t, env, podA, "gpud-telemetry")
	tokenB := boundToken(t, env, podB, "gpud-telemetry")
	t.Logf("a pod-bound token for audience gpud-telemetry: %d bytes", len(tokenA))

	// What `gpud certs` writes: a CA, the scheduler's certificate, and one
	// client certificate every agent mounts.
	dir := shortDir(t)
	ca, err := stream.NewCA("gpud-telemetry-test", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	server := issueFiles(t, dir, ca, "scheduler", stream.Leaf{CommonName: "gpud-scheduler", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true})
	shared := issueFiles(t, dir, ca, "agent", stream.Leaf{CommonName: stream.AgentCommonName, Client: true})
	telAddr := k8senv.FreeAddr(t)
	sched := startSchedulerProc(t, bin, filepath.Join(dir, "s"), kubeconfig, "--telemetry-addr", telAddr,
		"--tls-cert", server.Cert, "--tls-key", server.Key, "--tls-ca", server.CA)
	waitForLeader(t, []*schedProc{sched}, nil)
	certs, err := stream.LoadCerts(shared, nil)
	if err != nil {
		t.Fatal(err)
	}

	// count is refused_total{reason} as the scheduler exports it.
	count := func(reason string) float64 {
		t.Helper()
		prefix := `gpud_scheduler_telemetry_refused_total{reason="` + reason + `"} `
		for _, l := range strings.Split(scrape(t, sched.addr), "\n") {
			if v, ok := strings.CutPrefix(l, prefix); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatal(err)
				}
				return f
			}
		}
		return 0
	}
	counted := func(reason string, before float64) {
		t.Helper()
		testwait.ForErr(t, 10*time.Second, "refused_total{reason="+reason+"} to count the refusal", func() error {
			if count(reason) > before {
				return nil
			}
			return errorString("counted so far:\n" + grepLines(scrape(t, sched.addr), "gpud_scheduler_telemetry_refused_total{"))
		})
	}
	streams := func() string {
		for _, l := range strings.Split(scrape(t, sched.addr), "\n") {
			if strings.HasPrefix(l, "gpud_scheduler_telemetry_age_seconds{") {
				return l
			}
		}
		return ""
	}

	// The honest agent: node-a with node-a's token.
	if err := tryStream(t, telAddr, certs, tokenA, "node-a", true); err != nil {
		t.Fatalf("node-a's agent with its own token: %v", err)
	}

	// The attacks from node-a's pod, and the tokens that prove nothing.
	expired := forgeToken(t, env, podA, "gpud-telemetry", -10*time.Minute)
	for _, tc := range []struct {
		name, token, node, reason string
		code                      codes.Code
	}{
		{"node-a's token for node-b", tokenA, "node-b", stream.ReasonTokenNodeMismatch, codes.PermissionDenied},
		{"no token", "", "node-b", stream.ReasonTokenMissing, codes.Unauthenticated},
		{"node-a's pod token for the API server's audience", boundToken(t, env, podA, ""), "node-a", stream.ReasonTokenInvalid, codes.Unauthenticated},
		{"a tenant pod's token on node-a", boundToken(t, env, tenant, "gpud-telemetry"), "node-a", stream.ReasonTokenServiceAccount, codes.PermissionDenied},
		{"an expired token of node-a's pod", expired, "node-a", stream.ReasonTokenInvalid, codes.Unauthenticated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := count(tc.reason)
			err := tryStream(t, telAddr, certs, tc.token, tc.node, false)
			if status.Code(err) != tc.code {
				t.Fatalf("stream = %v, want %s", err, tc.code)
			}
			counted(tc.reason, before)
		})
	}
	// The forged token is refused for its expiry alone: the same claims
	// with a future expiry are accepted.
	if err := tryStream(t, telAddr, certs, forgeToken(t, env, podA, "gpud-telemetry", 10*time.Minute), "node-a", false); err != nil {
		t.Errorf("the forging is wrong, not just its expiry: a valid forged token is refused: %v", err)
	}
	// node-b's token works until its pod is deleted (a new scheduler
	// replica has no cache; this one reviews a token it has not seen).
	if err := env.Client.CoreV1().Pods("gpud").Delete(t.Context(), podB.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	if err := tryStream(t, telAddr, certs, tokenB, "node-b", false); status.Code(err) != codes.Unauthenticated {
		t.Errorf("the token of node-b's deleted pod: %v, want Unauthenticated", err)
	}
	if l := streams(); strings.Contains(l, "node-b") {
		t.Errorf("node-b has telemetry: %s", l)
	}

	// Handshakes refused and counted: a certificate of another CA (a Go
	// client withholds a certificate the server's CAs did not sign, so the
	// scheduler sees none), and the agents' certificate expired.
	other, err := stream.NewCA("not-gpud", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, reason string
		ca           *stream.CA
		notBefore    time.Time
	}{
		{"a certificate of another CA", "tls-no-client-certificate", other, time.Now()},
		{"an expired agent certificate", "tls-certificate-expired", ca, time.Now().Add(-3 * time.Hour)},
	} {
		files := issueFiles(t, dir, tc.ca, "bad", stream.Leaf{CommonName: stream.AgentCommonName, Client: true, NotBefore: tc.notBefore, Validity: time.Hour})
		files.CA = shared.CA
		bad, err := stream.LoadCerts(files, nil)
		if err != nil {
			t.Fatal(err)
		}
		before := count(tc.reason)
		if err := tryStream(t, telAddr, bad, tokenA, "node-a", false); status.Code(err) != codes.Unavailable {
			t.Errorf("%s: %v, want Unavailable", tc.name, err)
		}
		counted(tc.reason, before)
	}
	t.Logf("scheduler refusals:\n%s", grepLines(scrape(t, sched.addr), "gpud_scheduler_telemetry_refused_total{", "gpud_scheduler_telemetry_token_reviews_total{"))
}

func grepLines(s string, prefixes ...string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		for _, p := range prefixes {
			if strings.HasPrefix(l, p) {
				out = append(out, l)
			}
		}
	}
	return strings.Join(out, "\n")
}

func issueFiles(t *testing.T, dir string, ca *stream.CA, name string, leaf stream.Leaf) stream.CertFiles {
	t.Helper()
	if leaf.Validity == 0 {
		leaf.NotBefore, leaf.Validity = time.Now(), time.Hour
	}
	c, k, err := ca.Issue(leaf)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return stream.CertFiles{Cert: write(name+".crt", c), Key: write(name+".key", k), CA: write(name+"-ca.crt", ca.CertPEM)}
}

func createSA(t *testing.T, env *k8senv.Env, ns, name string) {
	t.Helper()
	_, err := env.Client.CoreV1().ServiceAccounts(ns).Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// createPodOn creates a pod of ServiceAccount sa bound to node (no
// kubelet runs it: its identity is what the test needs).
func createPodOn(t *testing.T, env *k8senv.Env, ns, name, sa, node string) *corev1.Pod {
	t.Helper()
	p, err := env.Client.CoreV1().Pods(ns).Create(t.Context(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{ServiceAccountName: sa, NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "gpud"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// boundToken is the token the kubelet projects into pod for audience
// (empty: the API server's own), from the TokenRequest API bound to the
// pod: the API server puts the pod's name, UID and node in it.
func boundToken(t *testing.T, env *k8senv.Env, pod *corev1.Pod, audience string) string {
	t.Helper()
	exp := int64(600)
	spec := authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp,
		BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}}
	if audience != "" {
		spec.Audiences = []string{audience}
	}
	tr, err := env.Client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(t.Context(), pod.Spec.ServiceAccountName,
		&authenticationv1.TokenRequest{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
	return tr.Status.Token
}

// forgeToken signs, with the API server's own service-account key, the
// token TokenRequest would give pod for audience, expiring expiresIn from
// now (negative: expired): the TokenRequest API refuses to issue one
// shorter than 10 minutes.
func forgeToken(t *testing.T, env *k8senv.Env, pod *corev1.Pod, audience string, expiresIn time.Duration) string {
	t.Helper()
	keyPEM, err := os.ReadFile(filepath.Join(env.Dir, "pki", "sa.key")) // k8senv's --service-account-signing-key-file
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		t.Fatal("sa.key is not PEM")
	}
	key, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	sa, err := env.Client.CoreV1().ServiceAccounts(pod.Namespace).Get(t.Context(), pod.Spec.ServiceAccountName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	kid := sha256.Sum256(pubDER)
	now := time.Now()
	exp := now.Add(expiresIn)
	iat := now.Add(-time.Minute)
	if exp.Before(now) {
		iat = exp.Add(-time.Hour)
	}
	type ref struct {
		Name string `json:"name"`
		UID  string `json:"uid"`
	}
	claims := map[string]any{
		"iss": "https://kubernetes.default.svc.cluster.local", "aud": []string{audience},
		"sub": "system:serviceaccount:" + pod.Namespace + ":" + sa.Name,
		"exp": exp.Unix(), "iat": iat.Unix(), "nbf": iat.Unix(), "jti": fmt.Sprintf("forged-%d", now.UnixNano()),
		"kubernetes.io": map[string]any{"namespace": pod.Namespace,
			"pod": ref{pod.Name, string(pod.UID)}, "serviceaccount": ref{sa.Name, string(sa.UID)}},
	}
	enc := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return base64.RawURLEncoding.EncodeToString(b)
	}
	signing := enc(map[string]string{"alg": "ES256", "kid": base64.RawURLEncoding.EncodeToString(kid[:])}) + "." + enc(claims)
	digest := sha256.Sum256([]byte(signing))
	r, s, err := ecdsa.Sign(rand.Reader, key, digest[:])
	if err != nil {
		t.Fatal(err)
	}
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	return signing + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// tryStream opens one stream as an agent would (mutual TLS with certs,
// token as its bearer token unless empty), says Hello for node and waits
// for the scheduler's answer: nil is accepted. keep leaves an accepted
// stream open until the test ends.
func tryStream(t *testing.T, addr string, certs *stream.Certs, token, node string, keep bool) error {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(credentials.NewTLS(certs.ClientConfig("127.0.0.1"))))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	if keep {
		ctx, cancel = context.WithCancel(context.Background())
	}
	t.Cleanup(func() { cancel(); _ = conn.Close() })
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	st, err := telemetryv1.NewTelemetryClient(conn).Stream(ctx)
	if err != nil {
		return err
	}
	hello := &telemetryv1.Hello{NodeName: node, IntervalMillis: 1000, Devices: []*telemetryv1.Device{
		{Uuid: "GPU-00000000-0000-0000-0000-00000000000a", Model: "NVIDIA H100 80GB HBM3", MemoryTotalBytes: 80 << 30, Health: telemetryv1.Health_HEALTH_HEALTHY}}}
	if err := st.Send(&telemetryv1.AgentMessage{Seq: 1, Kind: &telemetryv1.AgentMessage_Hello{Hello: hello}}); err != nil {
		_, err = st.Recv() // the refusal's status
		return err
	}
	_, err = st.Recv()
	if !keep {
		cancel()
	}
	return err
}

// TestHelmStreamValuesRefused: the stream's and the telemetry's chart
// values that reach an argument or a volume are refused by the schema
// when they could inject YAML (a newline) or name nothing valid, and the
// agent's token audience is the scheduler's.
func TestHelmStreamValuesRefused(t *testing.T) {
	stream := func(kv ...any) map[string]any {
		s := map[string]any{"enabled": true}
		for i := 0; i < len(kv); i += 2 {
			s[kv[i].(string)] = kv[i+1]
		}
		return map[string]any{"agent": map[string]any{"stream": s}}
	}
	telemetry := func(k string, v any) map[string]any {
		return map[string]any{"mode": "dra", "scheduler": map[string]any{"enabled": true, "telemetry": map[string]any{"enabled": true, k: v}}}
	}
	for _, tc := range []struct {
		name   string
		values map[string]any
	}{
		{"schedulerAddr with a newline", stream("schedulerAddr", "s:9403\n          command: [sh]")},
		{"schedulerAddr without a port", stream("schedulerAddr", "gpud-scheduler-telemetry")},
		{"tlsSecret with a newline", stream("tlsSecret", "x\n    hostPath: {path: /}")},
		{"tokenAudience with a newline", stream("tokenAudience", "gpud\n  x: y")},
		{"tokenAudience with a space", stream("tokenAudience", "gpud telemetry")},
		{"scheduler tokenAudience with a newline", telemetry("tokenAudience", "gpud\n- --telemetry-insecure")},
		{"scheduler tlsSecret upper case", telemetry("tlsSecret", "Secret")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := helmRender(t, tc.values, false)
			if err == nil {
				t.Fatal("rendered")
			}
			key := strings.TrimPrefix(tc.name, "scheduler ")
			if key, _, _ = strings.Cut(key, " "); !strings.Contains(err.Error(), key) {
				t.Errorf("refused, but not for %s: %v", key, err)
			}
		})
	}
	objs := helmMustRender(t, map[string]any{"mode": "dra", "agent": map[string]any{"stream": map[string]any{"enabled": true, "tokenAudience": "https://gpud.example.com"}},
		"scheduler": map[string]any{"enabled": true, "telemetry": map[string]any{"enabled": true, "tokenAudience": "https://gpud.example.com"}}}, false)
	ds := objs["DaemonSet/gpud"].(*appsv1.DaemonSet)
	var aud string
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.Projected != nil && len(v.Projected.Sources) == 1 && v.Projected.Sources[0].ServiceAccountToken != nil {
			aud = v.Projected.Sources[0].ServiceAccountToken.Audience
		}
	}
	args := objs["Deployment/gpud-scheduler"].(*appsv1.Deployment).Spec.Template.Spec.Containers[0].Args
	if aud != "https://gpud.example.com" || !slices.Contains(args, "--telemetry-token-audience="+aud) ||
		!slices.Contains(args, "--telemetry-agent-service-accounts=gpud/"+ds.Spec.Template.Spec.ServiceAccountName) {
		t.Errorf("agent token audience %q, scheduler args %v: want the same audience and the agents' ServiceAccount", aud, args)
	}
}
