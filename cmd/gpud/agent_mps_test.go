package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/mps"
	"github.com/gpud/gpud/pkg/mps/mpstest"
	"github.com/gpud/gpud/pkg/simnode"
)

// TestAgentRunsMPSDaemons runs the agent on the simulated DGX H100 with
// GPU 0 shared and a stand-in control program as the driver's: a daemon
// listens in GPU 0's pipe directory, and none runs for GPU 1.
func TestAgentRunsMPSDaemons(t *testing.T) {
	dir := t.TempDir()
	driver := filepath.Join(dir, "driver")
	if err := mpstest.Build(filepath.Join(driver, mps.ControlBinary)); err != nil {
		t.Fatal(err)
	}
	mpsRoot, err := os.MkdirTemp("", "mps") // short: sockets live here
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(mpsRoot) })
	state := filepath.Join(dir, "sim-state.json")
	sharing := filepath.Join(dir, "sharing.yaml")
	if err := os.WriteFile(sharing, []byte("devices:\n  \"0\": {replicas: 4}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	inv, err := discovery.New(simnode.NewBuiltin("dgx-h100"), "n", nil).Inventory()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"agent"}, agentArgs(dir, "--simulate", "dgx-h100", "--log-level", "error", "--http-addr", "",
			"--sharing-config", sharing, "--driver-root", driver, "--mps-root", mpsRoot, "--nri-socket", "", "--sim-state-file", state)...), io.Discard, io.Discard)
	}()
	stopped := false
	t.Cleanup(func() {
		cancel()
		if !stopped {
			<-done
		}
	})
	sock := filepath.Join(mpsRoot, inv.GPUs[0].UUID, "pipe", "control")
	testwait.ForErr(t, 30*time.Second, "gpu 0's MPS daemon", func() error {
		c, err := net.Dial("unix", sock)
		if err != nil {
			return err
		}
		return c.Close()
	})
	if _, err := os.Stat(filepath.Join(mpsRoot, inv.GPUs[1].UUID)); err == nil {
		t.Errorf("gpu 1 is not shared but has MPS directories")
	}
	// GPU 0 is EXCLUSIVE_PROCESS (the simulated node keeps its compute
	// modes in its state file), GPU 1 is left as it was.
	testwait.ForErr(t, 10*time.Second, "gpu 0 exclusive process", func() error {
		return wantComputeModes(state, map[string]int{inv.GPUs[0].UUID: 3, inv.GPUs[1].UUID: 0})
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("agent stopped with %v", err)
	}
	stopped = true
	if _, err := os.Stat(sock); err == nil {
		t.Errorf("the daemon still listens after the agent stopped")
	}
	if err := wantComputeModes(state, map[string]int{inv.GPUs[0].UUID: 0}); err != nil {
		t.Errorf("after the agent stopped: %v", err)
	}
}

// wantComputeModes checks the compute modes (NVML's numbers) a simulated
// node's state file holds, by GPU UUID.
func wantComputeModes(stateFile string, want map[string]int) error {
	b, err := os.ReadFile(stateFile)
	if err != nil {
		return err
	}
	var st struct {
		GPUs []struct {
			UUID        string `json:"uuid"`
			ComputeMode int    `json:"computeMode"`
		} `json:"gpus"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return err
	}
	got := map[string]int{}
	for _, g := range st.GPUs {
		got[g.UUID] = g.ComputeMode
	}
	for u, m := range want {
		if got[u] != m {
			return fmt.Errorf("gpu %s compute mode %d, want %d", u, got[u], m)
		}
	}
	return nil
}
