package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/pkg/gpu"
)

func TestMissingNVMLSuggestsSimulate(t *testing.T) {
	if ret := nvml.New().Init(); ret == nvml.SUCCESS {
		t.Skip("NVML is installed here")
	}
	for _, cmd := range [][]string{{"inventory"}, append([]string{"agent"}, agentArgs(t.TempDir(), "--http-addr", "")...)} {
		err := run(t.Context(), cmd, io.Discard, io.Discard)
		if err == nil {
			t.Fatalf("gpud %v without NVML succeeded", cmd)
		}
		msg := err.Error()
		if !strings.Contains(msg, "NVML") || !strings.Contains(msg, "--simulate") || strings.Contains(msg, "\n") {
			t.Fatalf("gpud %v error %q: want one line naming NVML and suggesting --simulate", cmd, msg)
		}
	}
}

func TestInventoryJSONIsStable(t *testing.T) {
	var runs [2]gpu.Inventory
	for i := range runs {
		var out bytes.Buffer
		if err := run(t.Context(), []string{"inventory", "--simulate", "dgx-h100", "-o", "json"}, &out, io.Discard); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(out.Bytes(), &runs[i]); err != nil {
			t.Fatalf("run %d: %v\n%s", i, err, out.String())
		}
	}
	if len(runs[0].GPUs) != 8 {
		t.Fatalf("%d GPUs", len(runs[0].GPUs))
	}
	for i := range runs[0].GPUs {
		if runs[0].GPUs[i].UUID != runs[1].GPUs[i].UUID {
			t.Fatalf("gpu %d UUID changed between runs", i)
		}
	}
	// The documented contract: these keys exist with these names.
	var raw map[string]any
	var out bytes.Buffer
	_ = run(t.Context(), []string{"inventory", "--simulate", "dgx-h100", "-o", "json"}, &out, io.Discard)
	if err := json.Unmarshal(out.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	g := raw["gpus"].([]any)[0].(map[string]any)
	for _, k := range []string{"index", "uuid", "name", "architecture", "computeCapability", "memoryBytes", "pciBusID", "numaNode", "migEnabled", "migDevices"} {
		if _, ok := g[k]; !ok {
			t.Errorf("gpu JSON lacks %q", k)
		}
	}
	l := raw["links"].([]any)[0].(map[string]any)
	if l["level"] != "NV18" || l["nvlinks"] != 18.0 {
		t.Errorf("link JSON %v", l)
	}
}

func TestInventoryFormats(t *testing.T) {
	for _, format := range []string{"table", "yaml"} {
		var out bytes.Buffer
		if err := run(t.Context(), []string{"inventory", "--simulate", "pcie-l40s", "-o", format}, &out, io.Discard); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), "L40S") {
			t.Errorf("-o %s output lacks the GPU name:\n%s", format, out.String())
		}
		if format == "yaml" && (!strings.Contains(out.String(), "pciBusID: ") || !strings.Contains(out.String(), "memoryBytes: ")) {
			t.Errorf("-o yaml keys differ from the JSON ones:\n%s", out.String())
		}
	}
	if err := run(t.Context(), []string{"inventory", "--simulate", "pcie-l40s", "-o", "xml"}, io.Discard, io.Discard); err == nil {
		t.Error("-o xml accepted")
	}
	if err := run(t.Context(), []string{"inventory", "--simulate", "nope"}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "dgx-h100") {
		t.Errorf("unknown simulated node error %v should list the built-ins", err)
	}
}

func TestTopo(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), []string{"topo", "--simulate", "pcie-l40s"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "GPU0\t X \tPIX\tSYS\tSYS") {
		t.Fatalf("topo output:\n%s", out.String())
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func TestAgentServesInventoryAndStops(t *testing.T) {
	addr := freeAddr(t)
	cfg := filepath.Join(t.TempDir(), "agent.yaml")
	// The config file sets the address; the flag for log level wins over it.
	if err := os.WriteFile(cfg, []byte("http-addr: "+addr+"\nlog-level: error\nsimulate: dgx-a100\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"agent"}, agentArgs(filepath.Dir(cfg), "--config", cfg, "--log-level", "warn", "--simulate", "dgx-h100")...), io.Discard, io.Discard)
	}()
	var inv gpu.Inventory
	testwait.ForErr(t, 30*time.Second, "the agent to serve /inventory", func() error {
		resp, err := http.Get("http://" + addr + "/inventory")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %s", resp.Status)
		}
		return json.NewDecoder(resp.Body).Decode(&inv)
	})
	if len(inv.GPUs) != 8 || !strings.Contains(inv.GPUs[0].Name, "H100") {
		t.Fatalf("inventory from the agent: %d GPUs, %q (the --simulate flag must win over the config file)", len(inv.GPUs), inv.GPUs[0].Name)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %v %v", path, err, resp)
		}
		resp.Body.Close()
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("agent stopped with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("agent did not stop after cancel")
	}
}

func TestAgentConfigErrors(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{name: "unknown key", yaml: "http-addr: 127.0.0.1:0\nhttp-adr: x\n", want: []string{"agent.yaml:2: ", `"http-adr"`}},
		{name: "bad value", yaml: "rediscover-interval: soon\n", want: []string{"agent.yaml:1: ", "rediscover-interval"}},
		{name: "out of range", yaml: "log-level: info\nmemory-watchdog-interval: 1ns\n", want: []string{"agent.yaml:2: memory-watchdog-interval", "at least 100ms"}},
		{name: "bad enum", yaml: "metrics-compat: bogus\n", want: []string{"agent.yaml:1: metrics-compat", "want dcgm, native or both"}},
		{name: "set twice", yaml: "log-level: info\nlog-level: debug\n", want: []string{"agent.yaml:2: ", "already defined"}},
		{name: "a mapping as a value", yaml: "http-addr: {a: b}\n", want: []string{"agent.yaml:1: ", "not a mapping"}},
		{name: "not a mapping", yaml: "- a\n- b\n", want: []string{"agent.yaml:1: ", "mapping"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := filepath.Join(t.TempDir(), "agent.yaml")
			if err := os.WriteFile(cfg, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			err := run(t.Context(), append([]string{"agent"}, agentArgs(filepath.Dir(cfg), "--config", cfg, "--simulate", "dgx-h100")...), io.Discard, io.Discard)
			if err == nil {
				t.Fatal("agent accepted a bad config")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestUnknownCommand(t *testing.T) {
	if err := run(t.Context(), []string{"frobnicate"}, io.Discard, io.Discard); err == nil {
		t.Fatal("unknown command accepted")
	}
	if err := run(t.Context(), []string{"inventory", "-h"}, io.Discard, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
}

// agentArgs returns agent flags that keep every path the agent touches
// under dir (admin socket, MIG journal, kubelet sockets, CDI spec), then
// extra. Every test that starts the agent uses it.
func agentArgs(dir string, extra ...string) []string {
	return append([]string{
		"--admin-socket", filepath.Join(dir, "admin.sock"),
		"--mig-journal", filepath.Join(dir, "mig-journal.json"),
		"--pod-resources-socket", filepath.Join(dir, "pod-resources.sock"),
		"--device-plugin-dir", filepath.Join(dir, "dp"),
		"--cdi-dir", filepath.Join(dir, "cdi"),
		"--proc-root", filepath.Join(dir, "proc"),
		"--pod-logs-root", filepath.Join(dir, "pods"),
	}, extra...)
}

// Commands that take flags only refuse a leftover argument (a typo, or
// flags after a word, which the flag package stops at) instead of ignoring
// it and what follows; --node-name must be a Kubernetes node name.
func TestLeftoverArgumentsAndNodeNames(t *testing.T) {
	for _, args := range [][]string{
		{"version", "--bogus"},
		{"inventory", "--simulate", "dgx-a100", "extra"},
		{"topo", "x", "--simulate", "dgx-a100"},
		{"mig", "show", "x"},
		{"sim", "replay", "--nodes", "a", "b"},
	} {
		var out, errOut bytes.Buffer
		err := run(t.Context(), args, &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), "unexpected argument") {
			t.Errorf("gpud %v: %v, want an unexpected-argument error", args, err)
		}
	}
	for _, name := range []string{"a,b", "a\nb", "Node-A", strings.Repeat("a", 254)} {
		var out, errOut bytes.Buffer
		err := run(t.Context(), []string{"inventory", "--simulate", "dgx-a100", "--node-name", name}, &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), "not a Kubernetes node name") {
			t.Errorf("--node-name %q: %v, want it refused", name, err)
		}
	}
	t.Setenv("NODE_NAME", "bad name")
	var out, errOut bytes.Buffer
	if err := run(t.Context(), []string{"inventory", "--simulate", "dgx-a100"}, &out, &errOut); err == nil || !strings.Contains(err.Error(), "$NODE_NAME") {
		t.Errorf("$NODE_NAME with a space: %v, want it refused naming $NODE_NAME", err)
	}
}
