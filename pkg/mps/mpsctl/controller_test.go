package mpsctl

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/internal/testkit/testwait"
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

func TestNew(t *testing.T) {
	store := discovery.NewStore(discovery.New(simnode.NewBuiltin("dgx-h100"), "n", nil), nil)
	rt := timeslice.NewRuntime(timeslice.RuntimeConfig{Inventory: store.Current})
	lib := simnode.NewBuiltin("dgx-h100")
	cfg := Config{Enabled: true, DriverRoot: t.TempDir(), Root: t.TempDir(), NVML: lib, Sharing: rt, Inventory: store}
	c, err := New(cfg)
	if err != nil || c.Root() != "" || c.Status() != "" {
		t.Errorf("no control program: root %q, status %q, err %v; want off", c.Root(), c.Status(), err)
	}
	if err := c.Run(t.Context()); err != nil {
		t.Errorf("Run off = %v, want nil at once", err)
	}
	bin := filepath.Join(cfg.DriverRoot, mps.ControlBinary)
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if c, err := New(cfg); err != nil || c.Root() != cfg.Root {
		t.Errorf("with a control program: root %q, err %v; want %s", c.Root(), err, cfg.Root)
	}
	sim := cfg
	sim.Simulated, sim.DriverRoot = true, "/"
	if c, err := New(sim); err != nil || c.Root() != "" {
		t.Errorf("simulated with the host's driver root: root %q, err %v; want off", c.Root(), err)
	}
	off := Config{DriverRoot: cfg.DriverRoot, Root: cfg.Root}
	if c, err := New(off); err != nil || c.Root() != "" {
		t.Errorf("not enabled: root %q, err %v; want off", c.Root(), err)
	}
	if _, err := New(Config{Enabled: true}); err == nil || !strings.Contains(err.Error(), "missing NVML") {
		t.Errorf("enabled without dependencies: err %v", err)
	}
}

// TestStatusNamesComputeModeFailure: a GPU whose compute mode cannot be
// set is named in the /readyz line with the NVML error and the fix, while
// its daemon still runs.
func TestStatusNamesComputeModeFailure(t *testing.T) {
	n := simnode.NewBuiltin("dgx-h100")
	n.InjectFault("SetComputeMode", simnode.FaultSpec{Times: -1, Return: nvml.ERROR_NO_PERMISSION})
	store := discovery.NewStore(discovery.New(n, "n", nil), nil)
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
	c, err := New(Config{Enabled: true, DriverRoot: driver, Root: root, Simulated: true, NVML: n, Sharing: rt, Inventory: store})
	if err != nil {
		t.Fatal(err)
	}
	testwait.Run(t, "mps", c.Run)
	uuid := n.Device(0).UUID()
	testwait.ForErr(t, 10*time.Second, "the failure in the status line", func() error {
		line := c.Status()
		if !strings.HasPrefix(line, "mps: 1 of 1 daemons running, 0 GPUs EXCLUSIVE_PROCESS; compute mode not set: "+uuid) ||
			!strings.Contains(line, "ERROR_NO_PERMISSION") || !strings.Contains(line, "needs root") {
			return fmt.Errorf("status %q", line)
		}
		return nil
	})
	if got := c.WithStatus(func() string { return "enforce: ok" })(); !strings.HasPrefix(got, "enforce: ok\nmps: 1 of 1") {
		t.Errorf("WithStatus = %q, want the enforcement line, then the MPS line", got)
	}
}
