package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpud/gpud/internal/flagfile"
	"github.com/gpud/gpud/internal/testkit/testbuf"
	"github.com/gpud/gpud/pkg/deviceplugin"
	"github.com/gpud/gpud/pkg/sharingfile"
	"github.com/gpud/gpud/test/kubeletstub"
)

// syncBuffer is a log sink safe for the agent's goroutines.
type syncBuffer = testbuf.Buffer

func TestAgentServesDevicePlugin(t *testing.T) {
	dir := t.TempDir()
	pluginDir := filepath.Join(dir, "dp")
	if err := os.Mkdir(pluginDir, 0o755); err != nil {
		t.Fatal(err)
	}
	k, err := kubeletstub.Start(pluginDir)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()

	ctx, cancel := context.WithCancel(t.Context())
	var logs syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- runAgent(ctx, agentArgs(dir, "--simulate", "dgx-h100", "--http-addr", ""), &logs, &logs)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
		if t.Failed() {
			t.Log(logs.String())
		}
	}()

	wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
	defer wcancel()
	reg, err := k.WaitRegistered(wctx, "nvidia.com/gpu", 1)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kubeletstub.Dial(wctx, pluginDir, reg.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w, err := c.Watch(wctx)
	if err != nil {
		t.Fatal(err)
	}
	devs, err := w.WaitFor(wctx, kubeletstub.Count(8, pluginapi.Healthy))
	if err != nil {
		t.Fatal(err)
	}
	numa := map[int64]int{}
	for _, d := range devs {
		if !strings.HasPrefix(d.ID, "GPU-") || d.Topology == nil || len(d.Topology.Nodes) != 1 {
			t.Fatalf("device %v: want a GPU UUID with one NUMA node", d)
		}
		numa[d.Topology.Nodes[0].ID]++
	}
	if numa[0] != 4 || numa[1] != 4 {
		t.Errorf("NUMA nodes of the 8 GPUs = %v, want 4 on each of 0 and 1", numa)
	}
	spec, err := cdi.ReadSpec(filepath.Join(dir, "cdi", deviceplugin.CDISpecName), 0)
	if err != nil {
		t.Fatalf("CDI spec: %v", err)
	}
	// A simulated node without --sim-dev-root has no device files: a spec
	// naming /dev/nvidia* would fail every container under containerd 2
	// ("failed to stat CDI host device").
	nodes := len(spec.ContainerEdits.DeviceNodes)
	for _, d := range spec.Devices {
		nodes += len(d.ContainerEdits.DeviceNodes)
	}
	if nodes != 0 || len(spec.Devices) != 8 {
		t.Errorf("CDI spec: %d devices naming %d device files, want 8 naming none", len(spec.Devices), nodes)
	}
}

func TestParseXids(t *testing.T) {
	tests := []struct {
		in      string
		want    []uint64
		wantErr bool
	}{
		{in: "13,31, 43", want: []uint64{13, 31, 43}},
		{in: "", want: []uint64{}},
		{in: "13,x", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseXids(tc.in)
			if (err != nil) != tc.wantErr || (!tc.wantErr && !slices.Equal(got, tc.want)) {
				t.Fatalf("parseXids(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
		})
	}
}

// TestDeployManifestsUseAgentFlags checks that the DaemonSet's args and the
// ConfigMap's config keys are flags the agent has, and that its sharing
// config loads.
func TestDeployManifestsUseAgentFlags(t *testing.T) {
	var cm corev1.ConfigMap
	var ds appsv1.DaemonSet
	for path, obj := range map[string]any{
		"../../deploy/daemonset/configmap.yaml": &cm,
		"../../deploy/daemonset/daemonset.yaml": &ds,
	} {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := decodeManifest(data, obj); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	fs, _ := agentFlagSet(io.Discard)
	args := ds.Spec.Template.Spec.Containers[0].Args
	if len(args) == 0 || args[0] != "agent" {
		t.Fatalf("args %v: want the agent subcommand first", args)
	}
	if err := fs.Parse(args[1:]); err != nil {
		t.Fatalf("DaemonSet args: %v", err)
	}
	dir := t.TempDir()
	cfgPath, sharingPath := filepath.Join(dir, "config.yaml"), filepath.Join(dir, "sharing.yaml")
	_ = os.WriteFile(cfgPath, []byte(cm.Data["config.yaml"]), 0o644)
	_ = os.WriteFile(sharingPath, []byte(cm.Data["sharing.yaml"]), 0o644)
	if _, err := flagfile.ApplyFile(fs, cfgPath); err != nil {
		t.Fatalf("ConfigMap config.yaml: %v", err)
	}
	if _, err := sharingfile.LoadConfigFile(sharingPath); err != nil {
		t.Fatalf("ConfigMap sharing.yaml: %v", err)
	}
}

// decodeManifest decodes a Kubernetes manifest strictly: goccy/go-yaml to
// JSON (the agent's one YAML library), then encoding/json refusing unknown
// fields, as the API server's strict decoding does.
func decodeManifest(data []byte, v any) error {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}
