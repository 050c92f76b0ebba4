package simnode

import (
	"errors"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func TestProcessUtilization(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC)
	n := NewBuiltin("dgx-h100", WithClock(func() time.Time { return now }))
	dev, _ := n.DeviceGetHandleByIndex(0)
	if _, ret := dev.GetProcessUtilization(0); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("no process: %v, want ERROR_NOT_FOUND", ret)
	}
	if err := n.AddProcess(0, 11, 1<<30); err != nil {
		t.Fatal(err)
	}
	if err := n.AddProcess(0, 12, 1<<30); err != nil {
		t.Fatal(err)
	}
	got, ret := dev.GetProcessUtilization(0)
	if ret != nvml.SUCCESS || len(got) != 2 || got[0].Pid != 11 || got[1].Pid != 12 {
		t.Fatalf("two processes: %+v, %v", got, ret)
	}
	u, _ := dev.GetUtilizationRates()
	if sum := got[0].SmUtil + got[1].SmUtil; sum < u.Gpu-1 || sum > u.Gpu+1 || got[0].SmUtil != got[1].SmUtil || got[0].SmUtil == 0 {
		t.Errorf("sm %d + %d, want equal halves of the GPU's %d", got[0].SmUtil, got[1].SmUtil, u.Gpu)
	}
	if got[0].TimeStamp != uint64(now.UnixMicro()) {
		t.Errorf("timestamp %d, want now in µs", got[0].TimeStamp)
	}
	if _, ret := dev.GetProcessUtilization(got[0].TimeStamp); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("nothing newer than the last sample: %v, want ERROR_NOT_FOUND", ret)
	}

	// MIG mode: the driver keeps no per-process samples.
	n.RemoveProcess(11)
	n.RemoveProcess(12)
	mig, _ := n.DeviceGetHandleByIndex(1)
	if _, ret := mig.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if err := n.ResetGPU(1); err != nil {
		t.Fatal(err)
	}
	if _, ret := mig.GetProcessUtilization(0); !errors.Is(ret, nvml.ERROR_NOT_SUPPORTED) {
		t.Errorf("MIG mode: %v, want ERROR_NOT_SUPPORTED", ret)
	}
	if err := n.FallOffBus(0); err != nil {
		t.Fatal(err)
	}
	if _, ret := dev.GetProcessUtilization(0); ret != nvml.ERROR_GPU_IS_LOST {
		t.Errorf("lost: %v, want ERROR_GPU_IS_LOST", ret)
	}
}
