package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/gpud/gpud/internal/taskgroup"
	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/pkg/agentevents"
	"github.com/gpud/gpud/test/k8senv"
)

// TestKubeEventsTask: the Events recorder runs where the agent has API
// access and --kube-events is not false; without access it is off, which
// is no error.
func TestKubeEventsTask(t *testing.T) {
	noInCluster(t)
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\nusers: [{name: u, user: {token: t}}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := agentArgs(dir, "--simulate", "dgx-a100", "--http-addr", "", "--node-name", "a100-node", "--node-labels=false")
	for _, tc := range []struct {
		name  string
		args  []string
		want  bool
		quiet string // the log line saying why not
	}{
		{name: "no api access", args: base, quiet: "kubernetes events off: no API access"},
		{name: "kubeconfig", args: append(slices.Clone(base), "--kubeconfig", kubeconfig), want: true},
		{name: "turned off", args: append(slices.Clone(base), "--kubeconfig", kubeconfig, "--kube-events=false")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs syncBuffer
			names := wiredTaskNames(t, tc.args, slog.New(slog.NewTextHandler(&logs, nil)))
			if got := slices.Contains(names, "kube-events"); got != tc.want {
				t.Errorf("tasks %v: kube-events %v, want %v", names, got, tc.want)
			}
			if tc.quiet != "" && !strings.Contains(logs.String(), tc.quiet) {
				t.Errorf("log lacks %q:\n%s", tc.quiet, logs.String())
			}
		})
	}
}

// TestAgentEventsOnNode: the agent on a simulated A100 node with
// --kubeconfig to a real API server writes Events on its Node that
// `kubectl describe node` shows (it selects by the node's kind, name and
// UID): the MIG layout it applied to GPU 0, and an injected Xid 48 on GPU 2
// as a Warning naming the GPU and the Xid.
func TestAgentEventsOnNode(t *testing.T) {
	noInCluster(t)
	env := k8senv.Start(t, k8senv.WithoutScheduler())
	const node = "a100-events"
	n := env.CreateNode(t, node, nil)
	dir := t.TempDir()
	layouts := filepath.Join(dir, "mig.yaml")
	if err := os.WriteFile(layouts, []byte("version: v1\nmig-configs:\n  two:\n    - devices: [0]\n      mig-enabled: true\n      mig-devices: {\"3g.20gb\": 2}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := agentArgs(dir, "--simulate", "dgx-a100", "--http-addr", "", "--node-name", node, "--kubeconfig", env.Kubeconfig,
		"--node-labels=false", "--mig-config-file", layouts, "--mig-config", "two", "--mig-reset-gpus")
	cfg, err := loadAgentConfig(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	lib, sim, closeLib, err := openNVML(cfg.nvml)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeLib)
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	defer func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	}()
	src, err := newNodeSources(cfg, lib, node, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close(log) })
	tasks, err := wireAgent(cfg, args, lib, sim, src, log)
	if err != nil {
		t.Fatal(err)
	}
	testwait.Run(t, "agent", func(ctx context.Context) error { return taskgroup.Run(ctx, tasks) })

	// What `kubectl describe node` lists.
	describe := func() []corev1.Event {
		sel := fields.Set{"involvedObject.kind": "Node", "involvedObject.name": node, "involvedObject.uid": string(n.UID)}.AsSelector().String()
		l, err := env.Client.CoreV1().Events("").List(t.Context(), metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			t.Fatal(err)
		}
		return l.Items
	}
	find := func(reason, gpuUUID string) *corev1.Event {
		for _, e := range describe() {
			if e.Reason == reason && strings.Contains(e.Message, gpuUUID) {
				return &e
			}
		}
		return nil
	}
	gpu0, gpu2 := sim.Device(0).UUID(), sim.Device(2).UUID()
	testwait.For(t, 60*time.Second, "the MIG layout event of GPU 0", func() bool { return find(agentevents.ReasonMIGLayoutChanged, gpu0) != nil })
	if e := find(agentevents.ReasonMIGLayoutChanged, gpu0); e.Type != corev1.EventTypeNormal || !strings.Contains(e.Message, "from MIG disabled to 3g.20gb×2") {
		t.Errorf("MIG event %s %q, want Normal, MIG disabled to 3g.20gb×2", e.Type, e.Message)
	}
	// The monitor registers its events asynchronously: repeat the Xid
	// until the event shows.
	var ev *corev1.Event
	testwait.For(t, 60*time.Second, "a GPUUnhealthy Warning naming GPU 2", func() bool {
		if err := sim.InjectXid(2, 48); err != nil {
			t.Fatal(err)
		}
		ev = find(agentevents.ReasonGPUUnhealthy, gpu2)
		return ev != nil
	})
	if ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Message, "xid 48") {
		t.Errorf("event %s %q, want a Warning naming xid 48", ev.Type, ev.Message)
	}
	if ev.ReportingController != agentevents.ReportingController || ev.ReportingInstance != node {
		t.Errorf("reported by %s/%s, want %s/%s", ev.ReportingController, ev.ReportingInstance, agentevents.ReportingController, node)
	}
}
