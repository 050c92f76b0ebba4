package simnode

import (
	"math"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// testClock is a settable clock.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

var gpmTestMetrics = []nvml.GpmMetricId{
	nvml.GPM_METRIC_GRAPHICS_UTIL, nvml.GPM_METRIC_SM_UTIL, nvml.GPM_METRIC_SM_OCCUPANCY,
	nvml.GPM_METRIC_ANY_TENSOR_UTIL, nvml.GPM_METRIC_DRAM_BW_UTIL, nvml.GPM_METRIC_FP64_UTIL,
	nvml.GPM_METRIC_FP32_UTIL, nvml.GPM_METRIC_FP16_UTIL, nvml.GPM_METRIC_PCIE_TX_PER_SEC,
	nvml.GPM_METRIC_PCIE_RX_PER_SEC, nvml.GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC, nvml.GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC,
}

// gpmBetween takes a sample with get, advances the clock by dt, takes
// another, and returns the metrics by ID.
func gpmBetween(t *testing.T, n *Node, clk *testClock, dt time.Duration, get func(nvml.GpmSample) nvml.Return) map[nvml.GpmMetricId]float64 {
	t.Helper()
	s1, ret := n.GpmSampleAlloc()
	if ret != nvml.SUCCESS {
		t.Fatalf("GpmSampleAlloc: %v", ret)
	}
	s2, _ := n.GpmSampleAlloc()
	defer func() {
		for _, s := range []nvml.GpmSample{s1, s2} {
			if ret := n.GpmSampleFree(s); ret != nvml.SUCCESS {
				t.Errorf("GpmSampleFree: %v", ret)
			}
		}
	}()
	if ret := get(s1); ret != nvml.SUCCESS {
		t.Fatalf("sample 1: %v", ret)
	}
	clk.Advance(dt)
	if ret := get(s2); ret != nvml.SUCCESS {
		t.Fatalf("sample 2: %v", ret)
	}
	g := &nvml.GpmMetricsGetType{NumMetrics: uint32(len(gpmTestMetrics)), Sample1: s1, Sample2: s2}
	for i, id := range gpmTestMetrics {
		g.Metrics[i].MetricId = uint32(id)
	}
	if ret := n.GpmMetricsGet(g); ret != nvml.SUCCESS {
		t.Fatalf("GpmMetricsGet: %v", ret)
	}
	out := map[nvml.GpmMetricId]float64{}
	for i := range g.NumMetrics {
		m := g.Metrics[i]
		if nvml.Return(m.NvmlReturn) != nvml.SUCCESS {
			t.Fatalf("metric %d: %v", m.MetricId, nvml.Return(m.NvmlReturn))
		}
		out[nvml.GpmMetricId(m.MetricId)] = m.Value
	}
	return out
}

func TestGPMSupport(t *testing.T) {
	for _, tc := range []struct {
		node string
		want bool
	}{
		{"dgx-h100", true},
		{"dgx-h200", true},
		{"dgx-a100", false},
		{"pcie-l40s", false},
	} {
		t.Run(tc.node, func(t *testing.T) {
			n := NewBuiltin(tc.node)
			d, _ := n.DeviceGetHandleByIndex(0)
			sup, ret := d.GpmQueryDeviceSupport()
			if ret != nvml.SUCCESS || (sup.IsSupportedDevice == 1) != tc.want {
				t.Fatalf("GpmQueryDeviceSupport = %+v, %v; want supported=%v", sup, ret, tc.want)
			}
			s, _ := n.GpmSampleAlloc()
			defer s.Free()
			want := nvml.SUCCESS
			if !tc.want {
				want = nvml.ERROR_NOT_SUPPORTED
			}
			if ret := d.GpmSampleGet(s); ret != want {
				t.Fatalf("GpmSampleGet = %v, want %v", ret, want)
			}
		})
	}
}

// TestGPMFollowsLoad checks that the metrics between two samples are the
// load wave's mean over the interval: zero while idle, the mean of utilAt
// while a process runs, ratios in range, and the same on two nodes.
func TestGPMFollowsLoad(t *testing.T) {
	clk := &testClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	n := NewBuiltin("dgx-h100", WithClock(clk.Now))
	d, _ := n.DeviceGetHandleByIndex(0)
	get := func(s nvml.GpmSample) nvml.Return { return d.GpmSampleGet(s) }

	idle := gpmBetween(t, n, clk, 5*time.Second, get)
	for id, v := range idle {
		if v != 0 {
			t.Errorf("idle GPU: metric %d = %v, want 0", id, v)
		}
	}
	if err := n.AddProcess(0, 100, 1<<30); err != nil {
		t.Fatal(err)
	}
	t0 := n.elapsed().Seconds()
	busy := gpmBetween(t, n, clk, 5*time.Second, get)
	dev := n.Device(0)
	mean := 0.0
	for k := range 1000 {
		mean += dev.utilAt(t0+5*(float64(k)+0.5)/1000, true) / 1000
	}
	if got := busy[nvml.GPM_METRIC_GRAPHICS_UTIL]; math.Abs(got-100*mean) > 0.01 {
		t.Errorf("GRAPHICS_UTIL = %v, want mean utilization %v%%", got, 100*mean)
	}
	for id, v := range busy {
		if v <= 0 {
			t.Errorf("busy GPU: metric %d = %v, want > 0", id, v)
		}
		if id < nvml.GPM_METRIC_PCIE_TX_PER_SEC && v > 100 {
			t.Errorf("metric %d = %v%%, want at most 100", id, v)
		}
	}
	if busy[nvml.GPM_METRIC_SM_UTIL] > busy[nvml.GPM_METRIC_GRAPHICS_UTIL] {
		t.Errorf("SM_UTIL %v above GRAPHICS_UTIL %v", busy[nvml.GPM_METRIC_SM_UTIL], busy[nvml.GPM_METRIC_GRAPHICS_UTIL])
	}

	// Deterministic: a second node on the same clock gives the same values.
	clk2 := &testClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	n2 := NewBuiltin("dgx-h100", WithClock(clk2.Now))
	d2, _ := n2.DeviceGetHandleByIndex(0)
	_ = gpmBetween(t, n2, clk2, 5*time.Second, func(s nvml.GpmSample) nvml.Return { return d2.GpmSampleGet(s) })
	if err := n2.AddProcess(0, 100, 1<<30); err != nil {
		t.Fatal(err)
	}
	again := gpmBetween(t, n2, clk2, 5*time.Second, func(s nvml.GpmSample) nvml.Return { return d2.GpmSampleGet(s) })
	for id, v := range busy {
		if again[id] != v {
			t.Errorf("metric %d: %v on one node, %v on another", id, v, again[id])
		}
	}
	if n.GPMSamples() != 0 {
		t.Errorf("GPMSamples() = %d after freeing all, want 0", n.GPMSamples())
	}
}

// TestGPMPerGPUInstance samples two GPU instances, one running a process,
// through GpmMigSampleGet and through the MIG device handle.
func TestGPMPerGPUInstance(t *testing.T) {
	clk := &testClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	n := NewBuiltin("dgx-h100", WithClock(clk.Now))
	d := enableMIG(t, n, 0)
	var giIDs []int
	for range 2 {
		gi, ret := d.CreateGpuInstance(profile(t, d, nvml.GPU_INSTANCE_PROFILE_1_SLICE))
		if ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
		ci, _ := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if _, ret := gi.CreateComputeInstance(&ci); ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
		info, _ := gi.GetInfo()
		giIDs = append(giIDs, int(info.Id))
	}
	h, _ := d.GetMigDeviceHandleByIndex(0)
	uuid, _ := h.GetUUID()
	if err := n.AddMIGProcess(uuid, 300, 1<<30); err != nil {
		t.Fatal(err)
	}
	busyGI, _ := h.GetGpuInstanceId()
	for _, gi := range giIDs {
		m := gpmBetween(t, n, clk, 5*time.Second, func(s nvml.GpmSample) nvml.Return { return d.GpmMigSampleGet(gi, s) })
		v := m[nvml.GPM_METRIC_GRAPHICS_UTIL]
		if gi == busyGI && (v < 15 || v > 95) {
			t.Errorf("busy GI %d: GRAPHICS_UTIL = %v, want within the load wave (15-95)", gi, v)
		}
		if gi != busyGI && v != 0 {
			t.Errorf("idle GI %d: GRAPHICS_UTIL = %v, want 0", gi, v)
		}
	}
	viaHandle := gpmBetween(t, n, clk, 5*time.Second, h.GpmSampleGet)
	whole := gpmBetween(t, n, clk, 5*time.Second, d.GpmSampleGet)
	// The GPU is the slice-weighted sum of its instances: one busy 1-slice
	// instance of 7.
	if g, w := viaHandle[nvml.GPM_METRIC_GRAPHICS_UTIL], whole[nvml.GPM_METRIC_GRAPHICS_UTIL]; g <= 0 || w <= 0 || w >= g {
		t.Errorf("GRAPHICS_UTIL: instance %v, GPU %v; want the GPU's below the busy instance's", g, w)
	}
	s, _ := n.GpmSampleAlloc()
	defer s.Free()
	if ret := d.GpmMigSampleGet(42, s); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("GpmMigSampleGet(unknown GI) = %v, want ERROR_NOT_FOUND", ret)
	}
}

func TestGPMSampleMisuse(t *testing.T) {
	n := NewBuiltin("dgx-h100")
	d, _ := n.DeviceGetHandleByIndex(0)
	d1, _ := n.DeviceGetHandleByIndex(1)
	s1, _ := n.GpmSampleAlloc()
	s2, _ := n.GpmSampleAlloc()
	g := &nvml.GpmMetricsGetType{NumMetrics: 1, Sample1: s1, Sample2: s2}
	g.Metrics[0].MetricId = uint32(nvml.GPM_METRIC_SM_UTIL)
	if ret := n.GpmMetricsGet(g); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("GpmMetricsGet(unfilled samples) = %v, want ERROR_INVALID_ARGUMENT", ret)
	}
	_ = d.GpmSampleGet(s1)
	_ = d1.GpmSampleGet(s2)
	if ret := n.GpmMetricsGet(g); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("GpmMetricsGet(samples of two GPUs) = %v, want ERROR_INVALID_ARGUMENT", ret)
	}
	if ret := s1.Free(); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if ret := s1.Free(); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("double free = %v, want ERROR_INVALID_ARGUMENT", ret)
	}
	if ret := d.GpmSampleGet(s1); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("GpmSampleGet(freed) = %v, want ERROR_INVALID_ARGUMENT", ret)
	}
	n.InjectFault("GpmSampleGet", FaultSpec{Return: nvml.ERROR_GPU_IS_LOST})
	if ret := d.GpmSampleGet(s2); ret != nvml.ERROR_GPU_IS_LOST {
		t.Errorf("GpmSampleGet with a fault = %v, want ERROR_GPU_IS_LOST", ret)
	}
	_ = s2.Free()
}
