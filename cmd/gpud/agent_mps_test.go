package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/internal/testwait"
	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/mps"
	"github.com/gpud/gpud/pkg/mps/mpstest"
	"github.com/gpud/gpud/pkg/simnode"
	"github.com/gpud/gpud/pkg/timeslice"
)

func TestSharedDevices(t *testing.T) {
	inv := gpu.Inventory{GPUs: []gpu.GPU{
		{Index: 0, UUID: "GPU-0"},
		{Index: 1, UUID: "GPU-1"},
		{Index: 2, UUID: "GPU-2", MIGEnabled: true, MIGDevices: []gpu.MIGDevice{{UUID: "MIG-2a"}, {UUID: "MIG-2b"}}},
	}}
	tests := []struct {
		name string
		cfg  timeslice.Config
		want []string
	}{
		{name: "none"},
		{name: "by uuid and index", cfg: timeslice.Config{Devices: map[string]timeslice.Sharing{"GPU-0": {Replicas: 4}, "1": {Shares: []timeslice.Share{{ComputePercent: 50}, {ComputePercent: 50}}}}}, want: []string{"GPU-0", "GPU-1"}},
		{name: "default covers whole GPUs only", cfg: timeslice.Config{Default: &timeslice.Sharing{Replicas: 2}}, want: []string{"GPU-0", "GPU-1"}},
		{name: "a MIG device", cfg: timeslice.Config{Devices: map[string]timeslice.Sharing{"MIG-2b": {Replicas: 2}}}, want: []string{"MIG-2b"}},
		{name: "exclusive", cfg: timeslice.Config{Devices: map[string]timeslice.Sharing{"GPU-0": {Exclusive: true}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := sharedDevices(tc.cfg, inv); !slices.Equal(got, tc.want) {
				t.Errorf("sharedDevices = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestNewMPSTask(t *testing.T) {
	store := discovery.NewStore(discovery.New(simnode.NewBuiltin("dgx-h100"), "n", nil), quietLog())
	rt := timeslice.NewRuntime(timeslice.RuntimeConfig{Inventory: store.Current})
	lib := simnode.NewBuiltin("dgx-h100")
	o := mpsOptions{enabled: true, driverRoot: t.TempDir(), root: t.TempDir()}
	if m := o.newMPSAgent(false, lib, rt, store, quietLog()); m.tasks != nil || m.Root != "" {
		t.Errorf("no control program: %d tasks, root %q; want none", len(m.tasks), m.Root)
	}
	bin := filepath.Join(o.driverRoot, mps.ControlBinary)
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if m := o.newMPSAgent(false, lib, rt, store, quietLog()); len(m.tasks) != 1 || m.tasks[0].Name != "mps" || m.Root != o.root {
		t.Errorf("with a control program: %v, root %q; want the mps task and %s", m.tasks, m.Root, o.root)
	}
	o.driverRoot = "/"
	if m := o.newMPSAgent(true, lib, rt, store, quietLog()); m.tasks != nil || m.Root != "" {
		t.Errorf("simulated with the host's driver root: %d tasks, root %q; want none", len(m.tasks), m.Root)
	}
}

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

// TestMPSStatusNamesComputeModeFailure: a GPU whose compute mode cannot be
// set is named in the /readyz line with the NVML error and the fix, while
// its daemon still runs.
func TestMPSStatusNamesComputeModeFailure(t *testing.T) {
	n := simnode.NewBuiltin("dgx-h100")
	n.InjectFault("SetComputeMode", simnode.FaultSpec{Times: -1, Return: nvml.ERROR_NO_PERMISSION})
	store := discovery.NewStore(discovery.New(n, "n", nil), quietLog())
	if _, err := store.Rediscover(); err != nil {
		t.Fatal(err)
	}
	rt := timeslice.NewRuntime(timeslice.RuntimeConfig{Inventory: store.Current,
		Initial: timeslice.Config{Devices: map[string]timeslice.Sharing{"0": {Replicas: 2}}}})
	root, err := os.MkdirTemp("", "mps") // short: the daemon's socket lives here
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	driver := filepath.Join(t.TempDir(), "driver")
	if err := mpstest.Build(filepath.Join(driver, mps.ControlBinary)); err != nil {
		t.Fatal(err)
	}
	o := mpsOptions{enabled: true, driverRoot: driver, root: root}
	m := o.newMPSAgent(true, n, rt, store, quietLog())
	testwait.Run(t, "mps", m.tasks[0].Run)
	uuid := n.Device(0).UUID()
	testwait.ForErr(t, 10*time.Second, "the failure in the status line", func() error {
		line := m.status()
		if !strings.HasPrefix(line, "mps: 1 of 1 daemons running, 0 GPUs EXCLUSIVE_PROCESS; compute mode not set: "+uuid) ||
			!strings.Contains(line, "ERROR_NO_PERMISSION") || !strings.Contains(line, "needs root") {
			return fmt.Errorf("status %q", line)
		}
		return nil
	})
}
