package simnode

import (
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// TestClocksEventReasonsFollowLoad walks one load period second by second:
// an idle GPU reports GpuIdle only; a busy one reports SW power cap exactly
// when its power draw passes the cap and SW thermal slowdown exactly when its
// die passes the threshold, and both happen within the period.
func TestClocksEventReasonsFollowLoad(t *testing.T) {
	for _, name := range []string{"dgx-h100", "dgx-a100"} {
		t.Run(name, func(t *testing.T) {
			clk := &testClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
			n := NewBuiltin(name, WithClock(clk.Now))
			d, _ := n.DeviceGetHandleByIndex(0)
			if got, ret := d.GetCurrentClocksEventReasons(); ret != nvml.SUCCESS || got != nvml.ClocksEventReasonGpuIdle {
				t.Fatalf("idle GPU: GetCurrentClocksEventReasons = %#x, %v; want %#x", got, ret, nvml.ClocksEventReasonGpuIdle)
			}
			if err := n.AddProcess(0, 100, 1<<30); err != nil {
				t.Fatal(err)
			}
			limitMW, _ := d.GetEnforcedPowerLimit()
			var capped, hot, neither int
			for range int(loadPeriodSeconds) {
				clk.Advance(time.Second)
				got, ret := d.GetCurrentClocksEventReasons()
				if ret != nvml.SUCCESS {
					t.Fatalf("GetCurrentClocksEventReasons: %v", ret)
				}
				legacy, ret := d.GetCurrentClocksThrottleReasons()
				if ret != nvml.SUCCESS || legacy != got {
					t.Fatalf("GetCurrentClocksThrottleReasons = %#x, %v; want %#x as the new call", legacy, ret, got)
				}
				mw, _ := d.GetPowerUsage()
				c, _ := d.GetTemperature(nvml.TEMPERATURE_GPU)
				wantCap := float64(mw) >= swPowerCapFraction*float64(limitMW)
				wantHot := c >= swThermalC
				if got&nvml.ClocksEventReasonGpuIdle != 0 {
					t.Fatalf("busy GPU reports GpuIdle (%#x)", got)
				}
				if (got&nvml.ClocksEventReasonSwPowerCap != 0) != wantCap {
					t.Fatalf("at %d mW of %d: mask %#x, want SW power cap %v", mw, limitMW, got, wantCap)
				}
				if (got&nvml.ClocksEventReasonSwThermalSlowdown != 0) != wantHot {
					t.Fatalf("at %d C: mask %#x, want SW thermal slowdown %v", c, got, wantHot)
				}
				if wantCap {
					capped++
				}
				if wantHot {
					hot++
				}
				if !wantCap && !wantHot {
					neither++
				}
			}
			if capped == 0 || hot == 0 || neither == 0 {
				t.Fatalf("over one load period: %d s power capped, %d s hot, %d s neither; want each at least once", capped, hot, neither)
			}
		})
	}
}

func TestClocksEventReasonsInjectedLostAndMIG(t *testing.T) {
	n := NewBuiltin("dgx-h100")
	d, _ := n.DeviceGetHandleByIndex(2)
	if err := n.InjectClocksEvent(2, nvml.ClocksThrottleReasonHwSlowdown|nvml.ClocksThrottleReasonHwThermalSlowdown); err != nil {
		t.Fatal(err)
	}
	want := uint64(nvml.ClocksEventReasonGpuIdle | nvml.ClocksThrottleReasonHwSlowdown | nvml.ClocksThrottleReasonHwThermalSlowdown)
	if got, ret := d.GetCurrentClocksEventReasons(); ret != nvml.SUCCESS || got != want {
		t.Fatalf("injected HW slowdown: %#x, %v; want %#x", got, ret, want)
	}
	if err := n.InjectClocksEvent(2, 0); err != nil {
		t.Fatal(err)
	}
	if got, _ := d.GetCurrentClocksEventReasons(); got != nvml.ClocksEventReasonGpuIdle {
		t.Fatalf("after clearing: %#x, want idle only", got)
	}
	if err := n.InjectClocksEvent(9, 1); err == nil {
		t.Fatal("InjectClocksEvent(9) on an 8-GPU node: no error")
	}
	n.InjectFault("GetCurrentClocksEventReasons", FaultSpec{Return: nvml.ERROR_UNKNOWN})
	if _, ret := d.GetCurrentClocksEventReasons(); ret != nvml.ERROR_UNKNOWN {
		t.Fatalf("injected fault: %v, want ERROR_UNKNOWN", ret)
	}
	if err := n.FallOffBus(2); err != nil {
		t.Fatal(err)
	}
	if _, ret := d.GetCurrentClocksEventReasons(); ret != nvml.ERROR_GPU_IS_LOST {
		t.Fatalf("lost GPU: %v, want ERROR_GPU_IS_LOST", ret)
	}

	// MIG device handles have no clocks of their own: NVML says not supported.
	m := enableMIG(t, n, 1)
	gi, ret := m.CreateGpuInstance(profile(t, m, nvml.GPU_INSTANCE_PROFILE_7_SLICE))
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	ci, ret := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if _, ret := gi.CreateComputeInstance(&ci); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	h, ret := m.GetMigDeviceHandleByIndex(0)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if _, ret := h.GetCurrentClocksEventReasons(); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Fatalf("MIG device: %v, want ERROR_NOT_SUPPORTED", ret)
	}
}
