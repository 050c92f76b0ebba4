package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/pkg/nodelabels"
	"github.com/gpud/gpud/test/k8senv"
)

// noInCluster makes the test run as outside a pod.
func noInCluster(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
}

func TestNodeLabelsFlag(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		set, on bool
		bad     bool
	}{
		{args: nil},
		{args: []string{"--node-labels"}, set: true, on: true},
		{args: []string{"--node-labels=false"}, set: true},
		{args: []string{"--node-labels=true", "--node-labels=auto"}},
		{args: []string{"--node-labels=maybe"}, bad: true},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var o labelsOptions
		o.register(fs)
		err := fs.Parse(tc.args)
		if tc.bad {
			if err == nil || !strings.Contains(err.Error(), "want true, false or auto") {
				t.Errorf("%v: err %v, want one listing the values", tc.args, err)
			}
			continue
		}
		if err != nil || o.set != tc.set || o.on != tc.on {
			t.Errorf("%v: set %v on %v err %v; want set %v on %v", tc.args, o.set, o.on, err, tc.set, tc.on)
		}
	}
}

// TestNodeLabelsValidatedBeforeStarting: --node-labels=true without API
// access, or with a bad kubeconfig or node name, is refused before
// anything starts, naming the flag once.
func TestNodeLabelsValidatedBeforeStarting(t *testing.T) {
	noInCluster(t)
	for _, tc := range []struct {
		name, flag, want string
		args             func(dir string) []string
	}{
		{"no-api", "node-labels", "true needs API access", func(string) []string { return []string{"--node-labels"} }},
		{"kubeconfig-missing", "kubeconfig", "missing.kubeconfig", func(dir string) []string {
			return []string{"--node-labels", "--kubeconfig", filepath.Join(dir, "missing.kubeconfig")}
		}},
		{"kubeconfig-missing-auto", "kubeconfig", "missing.kubeconfig", func(dir string) []string {
			return []string{"--kubeconfig", filepath.Join(dir, "missing.kubeconfig")}
		}},
		{"node-name", "node-name", "not a Kubernetes node name", func(dir string) []string {
			return []string{"--node-labels", "--kubeconfig", writeTestKubeconfig(t, dir), "--node-name", "GPU_Node"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var logs bytes.Buffer
			args := agentArgs(dir, append(tc.args(dir), "--simulate", "dgx-a100", "--http-addr", "")...)
			err := runAgent(t.Context(), args, io.Discard, &logs)
			if err == nil {
				t.Fatalf("%v accepted", args)
			}
			if msg := err.Error(); !strings.Contains(msg, tc.want) || strings.Count(msg, "--"+tc.flag+":") != 1 {
				t.Errorf("error %q: want --%s named once and %q", msg, tc.flag, tc.want)
			}
			if _, err := os.Stat(filepath.Join(dir, "admin.sock")); err == nil {
				t.Error("admin socket exists: the agent started before validating")
			}
			if logs.Len() > 0 {
				t.Errorf("the agent logged before refusing its config:\n%s", logs.String())
			}
		})
	}
}

// TestNodeLabelsWiring: auto is on in DRA mode and with --kubeconfig, off
// in device-plugin mode without API access; false is off everywhere.
func TestNodeLabelsWiring(t *testing.T) {
	noInCluster(t)
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		name string
		args func(dir string) []string
		want bool
	}{
		{"device-plugin", func(dir string) []string { return agentArgs(dir) }, false},
		{"device-plugin-kubeconfig", func(dir string) []string { return agentArgs(dir, "--kubeconfig", writeTestKubeconfig(t, dir)) }, true},
		{"dra", func(dir string) []string { return draArgs(t, dir) }, true},
		{"dra-off", func(dir string) []string { return draArgs(t, dir, "--node-labels=false") }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			names := wiredTaskNames(t, append(tc.args(dir), "--simulate", "dgx-h100", "--http-addr", ""), log)
			if got := slices.Contains(names, "node-labels"); got != tc.want {
				t.Errorf("tasks %v: node-labels %v, want %v", names, got, tc.want)
			}
		})
	}
}

// TestAgentLabelsNode: `gpud agent` in device-plugin mode with
// --kubeconfig, MIG strategy single and a configured all-1g layout on a
// simulated A100 node puts GFD's labels on its Node on a real API server:
// the MIG product, and mig.config.state=success once the layout is in.
func TestAgentLabelsNode(t *testing.T) {
	noInCluster(t)
	env := k8senv.Start(t, k8senv.WithoutScheduler())
	const node = "a100-node"
	env.CreateNode(t, node, map[string]string{"team": "a"})
	dir := t.TempDir()
	layouts := filepath.Join(dir, "mig.yaml")
	if err := os.WriteFile(layouts, []byte("version: v1\nmig-configs:\n  all-1g:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"1g.5gb\": 7}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	testwait.Run(t, "agent", func(ctx context.Context) error {
		return runAgent(ctx, agentArgs(dir, "--simulate", "dgx-a100", "--http-addr", "", "--node-name", node,
			"--kubeconfig", env.Kubeconfig, "--mig-strategy", "single", "--mig-config-file", layouts, "--mig-config", "all-1g",
			"--mig-reset-gpus"), &logs, &logs)
	})
	defer func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	}()
	var labels map[string]string
	testwait.For(t, 60*time.Second, "the A100 node's MIG labels", func() bool {
		n, err := env.Client.CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		labels = n.Labels
		return labels[nodelabels.Product] == "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb" && labels[nodelabels.MIGConfigState] == nodelabels.StateSuccess
	})
	if labels["team"] != "a" || labels[nodelabels.Count] != "56" || labels[nodelabels.MIGStrategy] != "single" {
		t.Errorf("labels %v: want team=a kept, 56 MIG devices, strategy single", labels)
	}
}
