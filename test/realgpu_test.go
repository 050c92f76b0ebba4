//go:build gpu

// Tests against the real NVML library on a machine with NVIDIA GPUs:
// `make test-gpu` (go test -tags gpu ./test -run RealGPU). They are the
// device check the simulated node stands in for everywhere else.
package test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/mig"
	"github.com/gpud/gpud/pkg/telemetry"
)

func realNVML(t *testing.T) nvml.Interface {
	t.Helper()
	lib := nvml.New()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Skipf("no NVML here: %v", ret)
	}
	t.Cleanup(func() { _ = lib.Shutdown() })
	return lib
}

func TestRealGPUInventory(t *testing.T) {
	lib := realNVML(t)
	inv, err := discovery.New(lib, "real", nil).Inventory()
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.GPUs) == 0 {
		t.Fatal("NVML reports no GPUs")
	}
	for _, g := range inv.GPUs {
		t.Logf("gpu %d %s %s mem=%d MiB bus=%s numa=%d cc=%s mig=%v/%v pending=%v migDevices=%d",
			g.Index, g.UUID, g.Name, g.MemoryBytes>>20, g.PCIBusID, g.NUMANode, g.ComputeCapability, g.MIGCapable, g.MIGEnabled, g.MIGPending, len(g.MIGDevices))
		if g.UUID == "" || g.MemoryBytes == 0 || g.PCIBusID == "" || g.Name == "" {
			t.Errorf("gpu %d incomplete: %+v", g.Index, g)
		}
	}
	if want := len(inv.GPUs) * (len(inv.GPUs) - 1) / 2; len(inv.Links) != want {
		t.Errorf("%d links, want %d", len(inv.Links), want)
	}
}

// TestRealGPUMIGCatalog reads the MIG catalog the driver reports and checks
// it is one a layout can be planned against (see checkCatalog).
func TestRealGPUMIGCatalog(t *testing.T) {
	lib := realNVML(t)
	st, err := mig.ReadState(lib)
	if err != nil {
		t.Fatal(err)
	}
	var capable int
	var names []string
	for _, g := range st.GPUs {
		names = append(names, g.Name)
		if !g.MIGCapable {
			continue
		}
		capable++
		t.Run(fmt.Sprintf("gpu%d", g.Index), func(t *testing.T) {
			if len(g.Catalog.Profiles) == 0 && !g.MIGEnabled {
				// NVML may list profiles only in MIG mode; changing the
				// mode of a shared machine is not a test's to do.
				t.Skipf("gpu %d %s: MIG mode is off and the driver lists no profiles; enable it (nvidia-smi -i %d -mig 1) to check the catalog", g.Index, g.Name, g.Index)
			}
			checkCatalog(t, lib, g)
		})
	}
	if capable == 0 {
		t.Skipf("no MIG-capable GPU here (%s): the catalog exists only on A100, A30, H100, H200 and later data-center GPUs", strings.Join(names, ", "))
	}
}

// TestRealGPUGPM takes two GPM samples 1s apart on every GPU that has GPM
// (Hopper and later) and checks the metrics NVML computes from them, then
// runs gpud's sampler over the real NVML and checks that each such GPU
// (and each of its MIG devices) exports the DCGM_FI_PROF_* families in
// range. GPUs without GPM are skipped, naming why.
func TestRealGPUGPM(t *testing.T) {
	lib := realNVML(t)
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		t.Fatalf("DeviceGetCount: %v", ret)
	}
	var gpm, without []string
	for i := range n {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			t.Fatalf("gpu %d: %v", i, ret)
		}
		name, _ := d.GetName()
		uuid, _ := d.GetUUID()
		sup, ret := d.GpmQueryDeviceSupport()
		if ret != nvml.SUCCESS || sup.IsSupportedDevice == 0 {
			without = append(without, fmt.Sprintf("gpu %d %s (%v, supported=%d)", i, name, ret, sup.IsSupportedDevice))
			continue
		}
		gpm = append(gpm, uuid)
		t.Run(fmt.Sprintf("gpu%d", i), func(t *testing.T) {
			s1, ret := lib.GpmSampleAlloc()
			if ret != nvml.SUCCESS {
				t.Fatalf("GpmSampleAlloc: %v", ret)
			}
			defer func() { _ = lib.GpmSampleFree(s1) }()
			s2, ret := lib.GpmSampleAlloc()
			if ret != nvml.SUCCESS {
				t.Fatalf("GpmSampleAlloc: %v", ret)
			}
			defer func() { _ = lib.GpmSampleFree(s2) }()
			if ret := d.GpmSampleGet(s1); ret != nvml.SUCCESS {
				t.Fatalf("GpmSampleGet: %v", ret)
			}
			time.Sleep(time.Second) // GPM needs samples over 100ms apart; this is the interval measured
			if ret := d.GpmSampleGet(s2); ret != nvml.SUCCESS {
				t.Fatalf("GpmSampleGet: %v", ret)
			}
			ids := []nvml.GpmMetricId{
				nvml.GPM_METRIC_GRAPHICS_UTIL, nvml.GPM_METRIC_SM_UTIL, nvml.GPM_METRIC_SM_OCCUPANCY,
				nvml.GPM_METRIC_ANY_TENSOR_UTIL, nvml.GPM_METRIC_DRAM_BW_UTIL, nvml.GPM_METRIC_FP64_UTIL,
				nvml.GPM_METRIC_FP32_UTIL, nvml.GPM_METRIC_FP16_UTIL, nvml.GPM_METRIC_PCIE_TX_PER_SEC,
				nvml.GPM_METRIC_PCIE_RX_PER_SEC, nvml.GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC, nvml.GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC,
			}
			mg := &nvml.GpmMetricsGetType{NumMetrics: uint32(len(ids)), Sample1: s1, Sample2: s2}
			for k, id := range ids {
				mg.Metrics[k].MetricId = uint32(id)
			}
			if ret := lib.GpmMetricsGet(mg); ret != nvml.SUCCESS {
				t.Fatalf("GpmMetricsGet: %v", ret)
			}
			for k, id := range ids {
				m := mg.Metrics[k]
				r := nvml.Return(m.NvmlReturn)
				t.Logf("metric %d: %v (%v)", id, m.Value, r)
				switch {
				case r == nvml.ERROR_NOT_SUPPORTED:
				case r != nvml.SUCCESS:
					t.Errorf("metric %d: %v", id, r)
				case m.Value < 0 || (id < nvml.GPM_METRIC_PCIE_TX_PER_SEC && m.Value > 100.5):
					t.Errorf("metric %d = %v, out of range", id, m.Value)
				}
			}
		})
	}
	if len(gpm) == 0 {
		t.Skipf("no GPU with GPM here (%s): GPM needs Hopper or later", strings.Join(without, "; "))
	}

	disc := discovery.New(lib, "real", nil)
	inv := func() (gpu.Inventory, bool) {
		inv, err := disc.Inventory()
		return inv, err == nil
	}
	s, err := telemetry.NewSampler(lib, inv, telemetry.Attribution{}, telemetry.Config{Interval: time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Sweep(t.Context())
	time.Sleep(time.Second) // one sampling interval between the two GPM samples
	s.Sweep(t.Context())
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(telemetry.NewCollector(s, telemetry.CompatDCGM, "test"))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{} // family -> series on GPM GPUs and their MIG devices
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "DCGM_FI_PROF_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			v := m.GetGauge().GetValue()
			if v < 0 || (!strings.HasSuffix(mf.GetName(), "_BYTES") && v > 1) {
				t.Errorf("%s = %v out of range (%v)", mf.GetName(), v, m.GetLabel())
			}
			got[mf.GetName()]++
		}
	}
	for _, f := range []string{"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_PCIE_TX_BYTES"} {
		if got[f] < len(gpm) {
			t.Errorf("%s: %d series, want one per GPM GPU (%d) and MIG device", f, got[f], len(gpm))
		}
	}
	for _, e := range s.Snapshot().Errors {
		if strings.HasPrefix(e.Call, "Gpm") {
			t.Errorf("sampler error on %s: %s %s x%d", e.UUID, e.Call, e.Reason, e.Count)
		}
	}
	t.Logf("DCGM_FI_PROF_* series: %v", got)
}
