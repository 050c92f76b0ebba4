package main

import (
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/gpud/gpud/internal/testwait"
	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/mps"
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
	o := mpsOptions{enabled: true, driverRoot: t.TempDir(), root: t.TempDir()}
	if tasks := o.newMPSTask(false, rt, store, quietLog()); tasks != nil {
		t.Errorf("no control program: %d tasks, want none", len(tasks))
	}
	bin := filepath.Join(o.driverRoot, mps.ControlBinary)
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if tasks := o.newMPSTask(false, rt, store, quietLog()); len(tasks) != 1 || tasks[0].name != "mps" {
		t.Errorf("with a control program: %v, want the mps task", tasks)
	}
	o.driverRoot = "/"
	if tasks := o.newMPSTask(true, rt, store, quietLog()); tasks != nil {
		t.Errorf("simulated with the host's driver root: %d tasks, want none", len(tasks))
	}
}

// TestAgentRunsMPSDaemons runs the agent on the simulated DGX H100 with
// GPU 0 shared and a stand-in control program as the driver's: a daemon
// listens in GPU 0's pipe directory, and none runs for GPU 1.
func TestAgentRunsMPSDaemons(t *testing.T) {
	dir := t.TempDir()
	driver := filepath.Join(dir, "driver")
	if out, err := exec.Command("go", "build", "-o", filepath.Join(driver, mps.ControlBinary), "../../pkg/mps/testdata/fakemps").CombinedOutput(); err != nil {
		t.Fatalf("build the stand-in control program: %v\n%s", err, out)
	}
	mpsRoot, err := os.MkdirTemp("", "mps") // short: sockets live here
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(mpsRoot) })
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
			"--sharing-config", sharing, "--driver-root", driver, "--mps-root", mpsRoot, "--nri-socket", "")...), io.Discard, io.Discard)
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
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("agent stopped with %v", err)
	}
	stopped = true
	if _, err := os.Stat(sock); err == nil {
		t.Errorf("the daemon still listens after the agent stopped")
	}
}
