package telemetry_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	dto "github.com/prometheus/client_model/go"

	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/simnode"
	"github.com/gpud/gpud/pkg/telemetry"
)

// profFamilies are the DCGM profiling families gpud reads through GPM.
var profFamilies = []string{
	"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_SM_OCCUPANCY",
	"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_PIPE_FP64_ACTIVE",
	"DCGM_FI_PROF_PIPE_FP32_ACTIVE", "DCGM_FI_PROF_PIPE_FP16_ACTIVE", "DCGM_FI_PROF_PCIE_TX_BYTES",
	"DCGM_FI_PROF_PCIE_RX_BYTES", "DCGM_FI_PROF_NVLINK_TX_BYTES", "DCGM_FI_PROF_NVLINK_RX_BYTES",
}

// newRigFor is newRig on another built-in node.
func newRigFor(t testing.TB, name string) *rig {
	t.Helper()
	clk := newClock()
	node := simnode.NewBuiltin(name, simnode.WithClock(clk.Now))
	return &rig{node: node, clk: clk, disc: discovery.New(node, name, nil)}
}

func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// TestGPMProfiling runs the sampler on a dgx-h100 with GPU 7 in MIG mode
// (two 1g.10gb devices, one busy) and processes on GPU 0: after two
// sweeps every GPU and MIG device has all 12 profiling families with
// dcgm-exporter's labels, in range, and none is counted stale before.
func TestGPMProfiling(t *testing.T) {
	r := newRig(t)
	r.enableMIG(t, 7, 2)
	inv := r.staticInventory(t)
	g, _ := inv()
	if err := r.node.AddProcess(0, 1001, 1<<30); err != nil {
		t.Fatal(err)
	}
	if err := r.node.AddMIGProcess(g.GPUs[7].MIGDevices[0].UUID, 3001, 1<<30); err != nil {
		t.Fatal(err)
	}
	s := r.sampler(t, inv, telemetry.Attribution{}, telemetry.Config{})
	t.Cleanup(s.Close)
	c := telemetry.NewCollector(s, telemetry.CompatDCGM, "test")

	s.Sweep(t.Context())
	mfs := parse(t, scrape(t, c))
	for _, name := range profFamilies {
		if mfs[name] != nil {
			t.Errorf("%s after one GPM sample, want absent until the second", name)
		}
	}
	for _, m := range mfs["gpud_sampler_stale_fields"].GetMetric() {
		if v := m.GetGauge().GetValue(); v != 0 {
			t.Errorf("gpud_sampler_stale_fields%v = %v after the first sweep, want 0", labelsOf(m), v)
		}
	}

	r.clk.Advance(5 * time.Second)
	s.Sweep(t.Context())
	text := scrape(t, c)
	promtoolCheck(t, text)
	mfs = parse(t, text)
	for _, name := range profFamilies {
		mf := mfs[name]
		if mf == nil {
			t.Errorf("%s missing", name)
			continue
		}
		if mf.GetType() != dto.MetricType_GAUGE {
			t.Errorf("%s is a %v, want a gauge as in dcgm-exporter", name, mf.GetType())
		}
		gpus, migs := 0, map[string]string{}
		for _, m := range mf.GetMetric() {
			l, v := labelsOf(m), m.GetGauge().GetValue()
			if l["GPU_I_ID"] != "" {
				migs[l["GPU_I_ID"]] = l["GPU_I_PROFILE"]
			} else {
				gpus++
			}
			if strings.HasSuffix(name, "_BYTES") {
				if v < 0 || math.IsNaN(v) {
					t.Errorf("%s%v = %v, want bytes/s >= 0", name, l, v)
				}
			} else if v < 0 || v > 1 || math.IsNaN(v) {
				t.Errorf("%s%v = %v, want a ratio in [0, 1]", name, l, v)
			}
		}
		if gpus != 8 || len(migs) != 2 || migs["1"] != "1g.10gb" || migs["2"] != "1g.10gb" {
			t.Errorf("%s: %d GPU series, MIG series %v; want 8 and GPU_I_ID 1 and 2 with GPU_I_PROFILE 1g.10gb", name, gpus, migs)
		}
	}
	for _, tc := range []struct {
		name string
		lbl  map[string]string
		busy bool
	}{
		{"busy GPU", map[string]string{"gpu": "0"}, true},
		{"idle GPU", map[string]string{"gpu": "3"}, false},
		{"busy MIG device", map[string]string{"gpu": "7", "GPU_I_ID": "1"}, true},
		{"idle MIG device", map[string]string{"gpu": "7", "GPU_I_ID": "2"}, false},
	} {
		v, ok := series(mfs, "DCGM_FI_PROF_SM_ACTIVE", tc.lbl)
		if !ok || (v > 0) != tc.busy {
			t.Errorf("%s: DCGM_FI_PROF_SM_ACTIVE%v = %v (found %v), want busy=%v", tc.name, tc.lbl, v, ok, tc.busy)
		}
	}
	for _, m := range mfs["gpud_sampler_stale_fields"].GetMetric() {
		if v := m.GetGauge().GetValue(); v != 0 {
			t.Errorf("gpud_sampler_stale_fields%v = %v, want 0", labelsOf(m), v)
		}
	}
	for _, m := range mfs["gpud_sampler_errors_total"].GetMetric() {
		if l := labelsOf(m); strings.HasPrefix(l["call"], "Gpm") {
			t.Errorf("gpud_sampler_errors_total%v = %v, want no GPM errors", l, m.GetCounter().GetValue())
		}
	}

	t.Run("native", func(t *testing.T) {
		mfs := parse(t, scrape(t, telemetry.NewCollector(s, telemetry.CompatNative, "test")))
		for _, name := range profFamilies {
			if mfs[name] != nil {
				t.Errorf("%s in native mode", name)
			}
		}
		if v, ok := series(mfs, "gpud_gpm_sm_active_ratio", map[string]string{"gpu": "7", "GPU_I_ID": "1"}); !ok || v <= 0 || v > 1 {
			t.Errorf("gpud_gpm_sm_active_ratio{gpu=7,GPU_I_ID=1} = %v (found %v), want a ratio above 0", v, ok)
		}
		if v, ok := series(mfs, "gpud_gpm_pcie_receive_bytes_per_second", map[string]string{"gpu": "0", "GPU_I_ID": ""}); !ok || v <= 0 {
			t.Errorf("gpud_gpm_pcie_receive_bytes_per_second{gpu=0} = %v (found %v), want > 0", v, ok)
		}
	})
}

// TestGPMFollowsUtilization sweeps a busy GPU every 5s over a whole load
// period: each interval's DCGM_FI_PROF_GR_ENGINE_ACTIVE is the mean of the
// utilization NVML reports at its two ends (to within the wave's curvature
// and whole-percent rounding), so it rises and falls with it.
func TestGPMFollowsUtilization(t *testing.T) {
	r := newRig(t)
	if err := r.node.AddProcess(2, 1001, 1<<30); err != nil {
		t.Fatal(err)
	}
	s := r.sampler(t, r.staticInventory(t), telemetry.Attribution{}, telemetry.Config{})
	t.Cleanup(s.Close)
	c := telemetry.NewCollector(s, telemetry.CompatDCGM, "test")
	gpu2 := map[string]string{"gpu": "2"}
	s.Sweep(t.Context())
	prev, _ := series(parse(t, scrape(t, c)), "DCGM_FI_DEV_GPU_UTIL", gpu2)
	lo, hi := 1.0, 0.0
	for range 24 {
		r.clk.Advance(5 * time.Second)
		s.Sweep(t.Context())
		mfs := parse(t, scrape(t, c))
		util, _ := series(mfs, "DCGM_FI_DEV_GPU_UTIL", gpu2)
		gr, ok := series(mfs, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", gpu2)
		if want := (prev + util) / 200; !ok || math.Abs(gr-want) > 0.02 {
			t.Errorf("DCGM_FI_PROF_GR_ENGINE_ACTIVE = %v (found %v), want about %v (utilization %v%% then %v%%)", gr, ok, want, prev, util)
		}
		sm, _ := series(mfs, "DCGM_FI_PROF_SM_ACTIVE", gpu2)
		if sm > gr {
			t.Errorf("DCGM_FI_PROF_SM_ACTIVE %v above DCGM_FI_PROF_GR_ENGINE_ACTIVE %v", sm, gr)
		}
		lo, hi, prev = min(lo, gr), max(hi, gr), util
	}
	if hi-lo < 0.5 {
		t.Errorf("DCGM_FI_PROF_GR_ENGINE_ACTIVE ranged over [%v, %v] in one load period, want it to follow the wave", lo, hi)
	}
}

// TestGPMUnsupported: A100 and L40S have no GPM, so the profiling families
// are absent, gpud_sampler_unsupported_fields counts them on every GPU and
// MIG device, nothing is counted stale or failed, and no sample is left
// allocated.
func TestGPMUnsupported(t *testing.T) {
	for _, tc := range []struct {
		node string
		mig  bool
	}{
		{node: "dgx-a100", mig: true},
		{node: "pcie-l40s"},
	} {
		t.Run(tc.node, func(t *testing.T) {
			r := newRigFor(t, tc.node)
			if tc.mig {
				r.enableMIG(t, 0, 1)
			}
			s := r.sampler(t, r.staticInventory(t), telemetry.Attribution{}, telemetry.Config{})
			s.Sweep(t.Context())
			r.clk.Advance(5 * time.Second)
			s.Sweep(t.Context())
			mfs := parse(t, scrape(t, telemetry.NewCollector(s, telemetry.CompatBoth, "test")))
			for name := range mfs {
				if strings.HasPrefix(name, "DCGM_FI_PROF_") || strings.HasPrefix(name, "gpud_gpm_") {
					t.Errorf("%s exported on a GPU without GPM", name)
				}
			}
			devices := 0
			for _, m := range mfs["gpud_sampler_unsupported_fields"].GetMetric() {
				devices++
				if v := m.GetGauge().GetValue(); v < 12 {
					t.Errorf("gpud_sampler_unsupported_fields%v = %v, want at least the 12 GPM fields", labelsOf(m), v)
				}
			}
			if want := len(s.Snapshot().Devices); devices != want || (tc.mig && want != 9) {
				t.Errorf("gpud_sampler_unsupported_fields has %d series, want one per device (%d)", devices, want)
			}
			for _, m := range mfs["gpud_sampler_stale_fields"].GetMetric() {
				if v := m.GetGauge().GetValue(); v != 0 {
					t.Errorf("gpud_sampler_stale_fields%v = %v, want 0", labelsOf(m), v)
				}
			}
			for _, m := range mfs["gpud_sampler_errors_total"].GetMetric() {
				if l := labelsOf(m); strings.HasPrefix(l["call"], "Gpm") {
					t.Errorf("gpud_sampler_errors_total%v: not supported is no error", l)
				}
			}
			if n := r.node.GPMSamples(); n != 0 {
				t.Errorf("GPM samples allocated = %d, want 0", n)
			}
		})
	}
}

// TestGPMFailures: a GPM sample that fails is counted under its call and
// leaves the fields stale (never a made-up value); the next good pair of
// samples brings them back.
func TestGPMFailures(t *testing.T) {
	r := newRig(t)
	s := r.sampler(t, r.staticInventory(t), telemetry.Attribution{}, telemetry.Config{Interval: 5 * time.Second})
	t.Cleanup(s.Close)
	c := telemetry.NewCollector(s, telemetry.CompatDCGM, "test")
	s.Sweep(t.Context())
	r.clk.Advance(5 * time.Second)
	s.Sweep(t.Context())
	gpu1 := simnode.FaultSpec{GPU: new(1), Return: nvml.ERROR_UNKNOWN, Times: 4}
	r.node.InjectFault("GpmSampleGet", gpu1)
	for range 4 {
		r.clk.Advance(5 * time.Second)
		s.Sweep(t.Context())
	}
	mfs := parse(t, scrape(t, c))
	if _, ok := series(mfs, "DCGM_FI_PROF_SM_ACTIVE", map[string]string{"gpu": "1"}); ok {
		t.Error("DCGM_FI_PROF_SM_ACTIVE{gpu=1} exported 20s after its last good sample, want it left out as stale")
	}
	if v, _ := series(mfs, "gpud_sampler_stale_fields", map[string]string{"gpu": "1"}); v != 12 {
		t.Errorf("gpud_sampler_stale_fields{gpu=1} = %v, want 12", v)
	}
	if v, _ := series(mfs, "gpud_sampler_errors_total", map[string]string{"UUID": s.Snapshot().Devices[1].UUID, "call": "GpmSampleGet", "reason": "unknown"}); v != 4 {
		t.Errorf("gpud_sampler_errors_total{call=GpmSampleGet,reason=unknown} = %v, want 4", v)
	}
	if _, ok := series(mfs, "DCGM_FI_PROF_SM_ACTIVE", map[string]string{"gpu": "2"}); !ok {
		t.Error("DCGM_FI_PROF_SM_ACTIVE{gpu=2} missing: a fault on GPU 1 must not touch GPU 2")
	}
	r.clk.Advance(5 * time.Second)
	s.Sweep(t.Context())
	if _, ok := series(parse(t, scrape(t, c)), "DCGM_FI_PROF_SM_ACTIVE", map[string]string{"gpu": "1"}); !ok {
		t.Error("DCGM_FI_PROF_SM_ACTIVE{gpu=1} still missing after a good sample")
	}
}

// TestGPMFreesSamples: a MIG device that goes away frees its two samples
// at the next sweep, and Run frees the rest when it returns.
func TestGPMFreesSamples(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		r.enableMIG(t, 7, 2)
		s := r.sampler(t, r.inventory, telemetry.Attribution{}, telemetry.Config{Interval: time.Second})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		synctest.Wait()
		if n := r.node.GPMSamples(); n != 2*10 {
			t.Fatalf("GPM samples = %d, want 2 for each of 8 GPUs and 2 MIG devices", n)
		}

		d := r.node.Device(7)
		gi, ret := d.GetGpuInstanceById(2)
		if ret != nvml.SUCCESS {
			t.Fatalf("GetGpuInstanceById(2): %v", ret)
		}
		ci, ret := gi.GetComputeInstanceById(0)
		if ret != nvml.SUCCESS {
			t.Fatalf("GetComputeInstanceById(0): %v", ret)
		}
		if ret := ci.Destroy(); ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
		if ret := gi.Destroy(); ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
		time.Sleep(time.Second) // the next tick, in the bubble's time
		synctest.Wait()
		if n := r.node.GPMSamples(); n != 2*9 {
			t.Errorf("GPM samples = %d after a MIG device went away, want %d", n, 2*9)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run() = %v", err)
		}
		if n := r.node.GPMSamples(); n != 0 {
			t.Errorf("GPM samples = %d after Run returned, want 0", n)
		}
	})
}
