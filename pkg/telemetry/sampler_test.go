package telemetry_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/simnode"
	"github.com/gpud/gpud/pkg/telemetry"
)

func gpuIdx(i int) *int { return &i }

// errCount returns the sampler's error count for one device, call and reason.
func errCount(s *telemetry.Sampler, uuid, call, reason string) uint64 {
	for _, e := range s.Snapshot().Errors {
		if e.UUID == uuid && e.Call == call && e.Reason == reason {
			return e.Count
		}
	}
	return 0
}

func TestSamplerNVMLErrors(t *testing.T) {
	tests := []struct {
		name    string
		op      string
		ret     nvml.Return
		reason  string
		missing []string // DCGM families gone from GPU 3
	}{
		{name: "power fails", op: "GetPowerUsage", ret: nvml.ERROR_UNKNOWN, reason: "unknown",
			missing: []string{"DCGM_FI_DEV_POWER_USAGE"}},
		{name: "memory info fails", op: "GetMemoryInfo", ret: nvml.ERROR_NO_PERMISSION, reason: "no_permission",
			missing: []string{"DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED"}},
		{name: "ecc fails", op: "GetTotalEccErrors", ret: nvml.ERROR_UNKNOWN, reason: "unknown",
			missing: []string{"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL"}},
		{name: "clocks event reasons fail", op: "GetCurrentClocksEventReasons", ret: nvml.ERROR_UNKNOWN, reason: "unknown",
			missing: []string{"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			inv := r.staticInventory(t)
			g, _ := inv()
			s := r.sampler(t, inv, telemetry.Attribution{}, telemetry.Config{Interval: time.Second})
			r.node.InjectFault(tc.op, simnode.FaultSpec{GPU: gpuIdx(3), Times: -1, Return: tc.ret})
			s.Sweep(t.Context())
			s.Sweep(t.Context())
			mfs := parse(t, scrape(t, telemetry.NewCollector(s, telemetry.CompatDCGM, "test")))
			bad, good := map[string]string{"gpu": "3"}, map[string]string{"gpu": "4"}
			for _, name := range tc.missing {
				if v, ok := series(mfs, name, bad); ok {
					t.Errorf("%s on gpu 3 = %v, want it left out", name, v)
				}
				if _, ok := series(mfs, name, good); !ok {
					t.Errorf("%s on gpu 4 missing; a fault on gpu 3 must not touch it", name)
				}
			}
			if _, ok := series(mfs, "DCGM_FI_DEV_GPU_TEMP", bad); !ok {
				t.Error("DCGM_FI_DEV_GPU_TEMP on gpu 3 missing; only the failing call's fields may go")
			}
			if got := errCount(s, g.GPUs[3].UUID, tc.op, tc.reason); got != 2 {
				t.Errorf("errors{call=%s,reason=%s} = %d, want 2 (one per sweep)", tc.op, tc.reason, got)
			}
			if v, _ := series(mfs, "gpud_sampler_errors_total", map[string]string{"UUID": g.GPUs[3].UUID, "call": tc.op, "reason": tc.reason}); v != 2 {
				t.Errorf("gpud_sampler_errors_total = %v, want 2", v)
			}
			if v, _ := series(mfs, "gpud_sampler_stale_fields", map[string]string{"gpu": "3", "GPU_I_ID": ""}); int(v) != len(tc.missing) {
				t.Errorf("gpud_sampler_stale_fields{gpu=3} = %v, want %d", v, len(tc.missing))
			}
		})
	}
}

// TestSamplerClocksEventReasons checks that the clocks event reasons
// bitmask reaches both of DCGM's names (and gpud's) with the bits NVML
// reported: an idle GPU's idle bit, and HW slowdown injected on another.
func TestSamplerClocksEventReasons(t *testing.T) {
	r := newRig(t)
	inv := r.staticInventory(t)
	s := r.sampler(t, inv, telemetry.Attribution{}, telemetry.Config{Interval: time.Second})
	hw := telemetry.ClocksEventHWSlowdown | telemetry.ClocksEventHWThermal
	if err := r.node.InjectClocksEvent(2, hw); err != nil {
		t.Fatal(err)
	}
	s.Sweep(t.Context())
	mfs := parse(t, scrape(t, telemetry.NewCollector(s, telemetry.CompatBoth, "test")))
	for _, tc := range []struct {
		gpu  string
		want uint64
	}{
		{"2", telemetry.ClocksEventGPUIdle | hw},
		{"4", telemetry.ClocksEventGPUIdle},
	} {
		for _, name := range []string{"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gpud_clocks_event_reasons"} {
			v, ok := series(mfs, name, map[string]string{"gpu": tc.gpu})
			if !ok || uint64(v) != tc.want {
				t.Errorf("%s{gpu=%s} = %v (present %v), want %#x", name, tc.gpu, v, ok, tc.want)
			}
		}
	}
}

// TestSamplerClocksThrottleReasonsOnOldDrivers: a driver library without
// nvmlDeviceGetCurrentClocksEventReasons (before R535) is read through the
// deprecated throttle call, and the new one is never called (on such a
// library it would fault).
func TestSamplerClocksThrottleReasonsOnOldDrivers(t *testing.T) {
	r := newRig(t)
	r.node.ExtensionsFunc = func() nvml.ExtendedInterface {
		return &mock.ExtendedInterface{LookupSymbolFunc: func(name string) error {
			if name == "nvmlDeviceGetCurrentClocksEventReasons" {
				return errors.New("undefined symbol: " + name)
			}
			return nil
		}}
	}
	r.node.InjectFault("GetCurrentClocksEventReasons", simnode.FaultSpec{Times: -1, Return: nvml.ERROR_UNKNOWN})
	if err := r.node.InjectClocksEvent(1, telemetry.ClocksEventHWPowerBrake); err != nil {
		t.Fatal(err)
	}
	inv := r.staticInventory(t)
	g, _ := inv()
	s := r.sampler(t, inv, telemetry.Attribution{}, telemetry.Config{Interval: time.Second})
	s.Sweep(t.Context())
	mfs := parse(t, scrape(t, telemetry.NewCollector(s, telemetry.CompatDCGM, "test")))
	want := telemetry.ClocksEventGPUIdle | telemetry.ClocksEventHWPowerBrake
	if v, ok := series(mfs, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", map[string]string{"gpu": "1"}); !ok || uint64(v) != want {
		t.Errorf("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{gpu=1} = %v (present %v), want %#x", v, ok, want)
	}
	if n := errCount(s, g.GPUs[1].UUID, "GetCurrentClocksEventReasons", "unknown"); n != 0 {
		t.Errorf("the new call was made %d times on a library without it", n)
	}
}

func TestSamplerLostGPU(t *testing.T) {
	r := newRig(t)
	s := r.sampler(t, r.inventory, telemetry.Attribution{}, telemetry.Config{Interval: time.Second})
	s.Sweep(t.Context())
	lost := s.Snapshot().Devices[2].UUID
	if err := r.node.FallOffBus(2); err != nil {
		t.Fatal(err)
	}
	r.clk.Advance(10 * time.Second) // past StaleAfter (3s): old values must go
	s.Sweep(t.Context())

	mfs := parse(t, scrape(t, telemetry.NewCollector(s, telemetry.CompatDCGM, "test")))
	for _, name := range []string{"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_TEMP"} {
		if v, ok := series(mfs, name, map[string]string{"gpu": "2"}); ok {
			t.Errorf("%s on the lost gpu = %v, want it left out (stale)", name, v)
		}
		for _, i := range []string{"0", "1", "3", "7"} {
			if _, ok := series(mfs, name, map[string]string{"gpu": i}); !ok {
				t.Errorf("%s on gpu %s missing after gpu 2 was lost", name, i)
			}
		}
	}
	if v, _ := series(mfs, "gpud_device_health_state", map[string]string{"gpu": "2", "state": "Lost"}); v != 1 {
		t.Errorf("gpud_device_health_state{gpu=2,state=Lost} = %v, want 1", v)
	}
	if got := errCount(s, lost, "GetPowerUsage", "gpu_lost"); got != 1 {
		t.Errorf("errors{call=GetPowerUsage,reason=gpu_lost} = %d, want 1", got)
	}
	if v, _ := series(mfs, "gpud_sampler_stale_fields", map[string]string{"gpu": "2"}); v < 10 {
		t.Errorf("gpud_sampler_stale_fields{gpu=2} = %v, want every supported field", v)
	}
	if v, _ := series(mfs, "gpud_sampler_up", nil); v != 1 {
		t.Errorf("gpud_sampler_up = %v, want 1: a lost GPU does not stop sampling", v)
	}
}

func TestSamplerSlowCall(t *testing.T) {
	r := newRig(t)
	inv := r.staticInventory(t)
	g, _ := inv()
	uuid := g.GPUs[0].UUID
	// Interval 1s, CallTimeout 50ms: a sweep waits 50ms, then publishes.
	s := r.sampler(t, inv, telemetry.Attribution{}, telemetry.Config{Interval: time.Second, CallTimeout: 50 * time.Millisecond})
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	// GPU 0's power call hangs until released, as a wedged driver call does.
	orig := r.node.Device(0).GetPowerUsageFunc
	r.node.Device(0).GetPowerUsageFunc = func() (uint32, nvml.Return) {
		<-release
		return orig()
	}

	s.Sweep(t.Context()) // returns after CallTimeout though the call hangs
	if got := errCount(s, uuid, "GetPowerUsage", "timeout"); got != 1 {
		t.Errorf("errors{reason=timeout} = %d, want 1", got)
	}
	s.Sweep(t.Context()) // the call still runs: skipped, not stacked
	if got := errCount(s, uuid, "GetPowerUsage", "busy"); got != 1 {
		t.Errorf("errors{reason=busy} = %d, want 1", got)
	}
	// Other calls land even if a loaded machine made them miss a sweep.
	waitFor(t, s, func(snap *telemetry.Snapshot) bool {
		return has(snap, 1, "DCGM_FI_DEV_POWER_USAGE") && has(snap, 0, "DCGM_FI_DEV_GPU_TEMP")
	})
	// A scrape while the call hangs answers from the cache.
	done := make(chan []byte, 1)
	go func() { done <- scrape(t, telemetry.NewCollector(s, telemetry.CompatDCGM, "test")) }()
	var text []byte
	select {
	case text = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("scrape blocked on a hanging NVML call")
	}
	mfs := parse(t, text)
	if v, ok := series(mfs, "DCGM_FI_DEV_POWER_USAGE", map[string]string{"gpu": "0"}); ok {
		t.Errorf("power on gpu 0 = %v while its call hangs, want it left out", v)
	}
	if _, ok := series(mfs, "DCGM_FI_DEV_POWER_USAGE", map[string]string{"gpu": "1"}); !ok {
		t.Error("power on gpu 1 missing: one hanging call must not hold up other GPUs")
	}
	if _, ok := series(mfs, "DCGM_FI_DEV_GPU_TEMP", map[string]string{"gpu": "0"}); !ok {
		t.Error("temperature on gpu 0 missing: one hanging call must not hold up the GPU's other fields")
	}

	once.Do(func() { close(release) })
	deadline := time.Now().Add(30 * time.Second)
	for {
		s.Sweep(t.Context())
		if _, ok := series(parse(t, scrape(t, telemetry.NewCollector(s, telemetry.CompatDCGM, "test"))), "DCGM_FI_DEV_POWER_USAGE", map[string]string{"gpu": "0"}); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("power on gpu 0 never came back after the call returned")
		}
	}
}

func TestSamplerInjectedDelay(t *testing.T) {
	r := newRig(t)
	inv := r.staticInventory(t)
	s := r.sampler(t, inv, telemetry.Attribution{}, telemetry.Config{Interval: time.Second, CallTimeout: 20 * time.Millisecond})
	// simnode's latency fault: every GetTemperature on GPU 5 stalls 60s.
	r.node.InjectFault("GetTemperature", simnode.FaultSpec{GPU: gpuIdx(5), Times: -1, Delay: 60 * time.Second})
	start := time.Now()
	s.Sweep(t.Context())
	if took := time.Since(start); took >= 30*time.Second {
		t.Errorf("Sweep took %s, want it to give up on the 60s call", took)
	}
	waitFor(t, s, func(snap *telemetry.Snapshot) bool { return has(snap, 4, "DCGM_FI_DEV_GPU_TEMP") })
	mfs := parse(t, scrape(t, telemetry.NewCollector(s, telemetry.CompatDCGM, "test")))
	if _, ok := series(mfs, "DCGM_FI_DEV_GPU_TEMP", map[string]string{"gpu": "5"}); ok {
		t.Error("temperature on gpu 5 exported while its call stalls")
	}
	if _, ok := series(mfs, "DCGM_FI_DEV_GPU_TEMP", map[string]string{"gpu": "4"}); !ok {
		t.Error("temperature on gpu 4 missing")
	}
	if v, _ := series(mfs, "gpud_sampler_errors_total", map[string]string{"call": "GetTemperature", "reason": "timeout", "UUID": r.node.Device(5).UUID()}); v != 1 {
		t.Errorf("gpud_sampler_errors_total{call=GetTemperature,reason=timeout} = %v, want 1 (later sweeps count busy)", v)
	}
}

// has reports whether the snapshot has a fresh value of a DCGM family on
// GPU i.
func has(snap *telemetry.Snapshot, i int, name string) bool {
	for _, d := range snap.Devices {
		if d.MIG || d.GPUIndex != i {
			continue
		}
		for f, at := range d.At {
			if !at.IsZero() && telemetry.FieldName(f) == name {
				return true
			}
		}
	}
	return false
}

// waitFor sweeps until ok accepts the snapshot.
func waitFor(t *testing.T, s *telemetry.Sampler, ok func(*telemetry.Snapshot) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok(s.Snapshot()) {
		if time.Now().After(deadline) {
			t.Fatal("sampler never caught up")
		}
		s.Sweep(t.Context())
	}
}

// TestSamplerXid checks that Xids reach the metrics through the node's one
// event pump: discovery's health monitor fans every Xid (an ignored one
// too, 43 here) out to the sampler. It runs in a synctest bubble: once
// every goroutine waits, the monitor has registered the GPUs.
func TestSamplerXid(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		s := r.sampler(t, r.staticInventory(t), telemetry.Attribution{}, telemetry.Config{Interval: 20 * time.Millisecond})
		mon := discovery.NewHealthMonitor(r.node, discovery.HealthConfig{WaitTimeout: 10 * time.Millisecond}, func(string, gpu.Health, string) {}, nil)
		mon.OnXid(s.RecordXid)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 2)
		go func() { done <- s.Run(ctx) }()
		go func() { done <- mon.Run(ctx) }()
		defer func() {
			cancel()
			for range 2 {
				if err := <-done; err != nil {
					t.Errorf("Run() = %v", err)
				}
			}
		}()
		synctest.Wait()
		if err := r.node.InjectXid(4, 43); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		s.Sweep(t.Context())
		if snap := s.Snapshot(); snap == nil || snap.Devices[4].LastXid != 43 {
			t.Fatal("Xid 43 on gpu 4 did not reach the snapshot through the health monitor")
		}
		mfs := parse(t, scrape(t, telemetry.NewCollector(s, telemetry.CompatDCGM, "test")))
		if v, _ := series(mfs, "DCGM_FI_DEV_XID_ERRORS", map[string]string{"gpu": "4"}); v != 43 {
			t.Errorf("DCGM_FI_DEV_XID_ERRORS{gpu=4} = %v, want 43", v)
		}
		if v, _ := series(mfs, "DCGM_FI_DEV_XID_ERRORS", map[string]string{"gpu": "3"}); v != 0 {
			t.Errorf("DCGM_FI_DEV_XID_ERRORS{gpu=3} = %v, want 0", v)
		}
		if v, ok := series(mfs, "gpud_xid_errors_total", map[string]string{"gpu": "4", "xid": "43"}); !ok || v < 1 {
			t.Errorf("gpud_xid_errors_total{gpu=4,xid=43} = %v (found %v), want >= 1", v, ok)
		}
	})
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  telemetry.Config
		ok   bool
	}{
		{name: "zero is defaults", ok: true},
		{name: "negative interval", cfg: telemetry.Config{Interval: -time.Second}},
		{name: "interval too short", cfg: telemetry.Config{Interval: time.Millisecond}},
		{name: "negative timeout", cfg: telemetry.Config{CallTimeout: -1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.cfg.Validate(); (err == nil) != tc.ok {
				t.Errorf("Validate() = %v, want ok=%v", err, tc.ok)
			}
		})
	}
	for _, s := range []string{"dcgm", "native", "both"} {
		if _, err := telemetry.ParseCompat(s); err != nil {
			t.Errorf("ParseCompat(%q) = %v", s, err)
		}
	}
	if _, err := telemetry.ParseCompat("prometheus"); err == nil {
		t.Error("ParseCompat(\"prometheus\") = nil, want an error")
	}
}
