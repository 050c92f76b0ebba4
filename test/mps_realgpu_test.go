//go:build gpu

package test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/pkg/computemode"
	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/mps"
)

// realDriverRoot is the driver root whose usr/bin holds
// nvidia-cuda-mps-control, found on PATH ("/" for /usr/bin).
func realDriverRoot(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("nvidia-cuda-mps-control")
	if err != nil {
		t.Skip("no nvidia-cuda-mps-control on PATH: install the driver's MPS utilities (nvidia-utils) to run the MPS path")
	}
	p, err = filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatal(err)
	}
	root, ok := strings.CutSuffix(p, "/"+mps.ControlBinary)
	if !ok {
		t.Skipf("nvidia-cuda-mps-control is at %s, not under <root>/%s", p, mps.ControlBinary)
	}
	if root == "" {
		root = "/"
	}
	return root
}

// TestRealGPUMPS runs the path the agent takes for a shared GPU on real
// hardware: the GPU's compute mode set EXCLUSIVE_PROCESS through NVML, the
// driver's nvidia-cuda-mps-control started by the supervisor with its pipe
// directory under a temp root, the daemon answering the control commands
// the limits use, then stopped, and the previous mode restored.
func TestRealGPUMPS(t *testing.T) {
	lib := realNVML(t)
	root := realDriverRoot(t)
	if os.Geteuid() != 0 {
		t.Skip("setting the compute mode needs root")
	}
	inv, err := discovery.New(lib, "real", nil).Inventory()
	if err != nil {
		t.Fatal(err)
	}
	var uuid string
	var index int
	for _, g := range inv.GPUs {
		if !g.MIGEnabled {
			uuid, index = g.UUID, g.Index
			break
		}
	}
	if uuid == "" {
		t.Skip("every GPU is in MIG mode: MPS on a whole GPU needs one without")
	}
	dev, ret := lib.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if procs, ret := dev.GetComputeRunningProcesses(); ret == nvml.SUCCESS && len(procs) > 0 {
		t.Skipf("gpu %d runs %d processes: changing its compute mode would disturb them", index, len(procs))
	}
	before, ret := dev.GetComputeMode()
	if ret != nvml.SUCCESS {
		t.Fatalf("GetComputeMode: %v", ret)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	modes := computemode.New(lib, computemode.Config{StateDir: t.TempDir()}, log)
	t.Cleanup(func() {
		if err := modes.RestoreAll(); err != nil {
			t.Errorf("restore: %v", err)
		}
	})
	if err := modes.Set([]string{uuid}); err != nil {
		t.Fatal(err)
	}
	if m, _ := dev.GetComputeMode(); m != nvml.COMPUTEMODE_EXCLUSIVE_PROCESS {
		t.Fatalf("gpu %d compute mode = %v after Set, want EXCLUSIVE_PROCESS", index, m)
	}

	mpsRoot, err := os.MkdirTemp("", "mps") // short: the daemon's sockets live here
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(mpsRoot) })
	sup, err := mps.New(mps.Config{DriverRoot: root, Root: mpsRoot, CheckInterval: 500 * time.Millisecond}, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- sup.Run(ctx) }()
	stopped := false
	t.Cleanup(func() {
		cancel()
		if !stopped {
			<-done
		}
	})
	sup.SetShared([]string{uuid})
	testwait.ForErr(t, 30*time.Second, "the driver's MPS daemon", func() error {
		if st := sup.Status()[uuid]; !st.Running {
			return errors.New("not running: " + st.LastErr)
		}
		return nil
	})
	out, err := sup.Command(t.Context(), uuid, "set_default_active_thread_percentage 50", "get_default_active_thread_percentage",
		"set_default_device_pinned_mem_limit 0 2G", "get_default_device_pinned_mem_limit 0", "get_server_list")
	if err != nil {
		t.Fatalf("control commands: %v", err)
	}
	t.Logf("control daemon answered:\n%s", out)
	if !strings.Contains(out, "50") || !strings.Contains(out, "2G") {
		t.Errorf("answers %q, want the 50%% and 2G just set", out)
	}
	logs, _ := os.ReadFile(filepath.Join(sup.LogDir(uuid), "control.log"))
	t.Logf("control.log:\n%s", logs)

	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	stopped = true
	if _, err := os.Stat(filepath.Join(sup.PipeDir(uuid), "control")); err == nil {
		t.Errorf("the daemon's control socket remains after the supervisor stopped")
	}
	if err := modes.RestoreAll(); err != nil {
		t.Fatal(err)
	}
	if m, _ := dev.GetComputeMode(); m != before {
		t.Errorf("gpu %d compute mode = %v after restore, want %v", index, m, before)
	}
}
