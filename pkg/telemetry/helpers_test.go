package telemetry_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpud/gpud/internal/testkit/promtooltest"
	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/podresources"
	"github.com/gpud/gpud/pkg/simnode"
	"github.com/gpud/gpud/pkg/telemetry"
)

// fixedStart is the simulated node's boot time in every test.
var fixedStart = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// clock is a settable clock shared by the simulated node and the sampler.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: fixedStart} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// rig is a simulated dgx-h100 with discovery and a sampler over it.
type rig struct {
	node *simnode.Node
	clk  *clock
	disc *discovery.Discoverer
}

func newRig(t testing.TB) *rig {
	t.Helper()
	clk := newClock()
	node := simnode.NewBuiltin("dgx-h100", simnode.WithClock(clk.Now))
	return &rig{node: node, clk: clk, disc: discovery.New(node, "dgx-h100", nil)}
}

// inventory rereads the node, as the agent's inventory component does.
func (r *rig) inventory() (gpu.Inventory, bool) {
	inv, err := r.disc.Inventory()
	return inv, err == nil
}

// staticInventory reads the node once.
func (r *rig) staticInventory(t testing.TB) telemetry.InventoryFunc {
	t.Helper()
	inv, err := r.disc.Inventory()
	if err != nil {
		t.Fatal(err)
	}
	return func() (gpu.Inventory, bool) { return inv, true }
}

func (r *rig) sampler(t testing.TB, inv telemetry.InventoryFunc, attr telemetry.Attribution, cfg telemetry.Config) *telemetry.Sampler {
	t.Helper()
	cfg.Clock = r.clk.Now
	cfg.Hostname = "dgx-h100"
	if cfg.CallTimeout == 0 {
		// Generous: on a loaded machine a sweep must not give up on
		// calls that are merely slow to be scheduled.
		cfg.CallTimeout = 30 * time.Second
	}
	s, err := telemetry.NewSampler(r.node, inv, attr, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// fieldValues pins GPU i's NVML field values (memory temperature and
// NVLink bandwidth) to constants, so golden files do not follow the
// simulated load.
func (r *rig) fieldValues(i int) {
	r.node.Device(i).GetFieldValuesFunc = func(vals []nvml.FieldValue) nvml.Return {
		for k := range vals {
			var v uint64
			switch vals[k].FieldId {
			case nvml.FI_DEV_MEMORY_TEMP:
				v = uint64(40 + i)
			case nvml.FI_DEV_NVLINK_BANDWIDTH_C0_TOTAL:
				v = uint64(1000 * (i + 1))
			default:
				vals[k].NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
				continue
			}
			vals[k].ValueType = uint32(nvml.VALUE_TYPE_UNSIGNED_LONG_LONG)
			binary.LittleEndian.PutUint64(vals[k].Value[:], v)
			vals[k].NvmlReturn = uint32(nvml.SUCCESS)
		}
		return nvml.SUCCESS
	}
}

// enableMIG turns MIG on for GPU i and creates n 1g.10gb devices.
func (r *rig) enableMIG(t testing.TB, i, n int) {
	t.Helper()
	d := r.node.Device(i)
	if ret, _ := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
		if ret != nvml.ERROR_RESET_REQUIRED {
			t.Fatalf("gpu %d: SetMigMode: %v", i, ret)
		}
		if err := r.node.ResetGPU(i); err != nil {
			t.Fatal(err)
		}
	}
	info, ret := d.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	if ret != nvml.SUCCESS {
		t.Fatalf("gpu %d: profile info: %v", i, ret)
	}
	for range n {
		gi, ret := d.CreateGpuInstance(&info)
		if ret != nvml.SUCCESS {
			t.Fatalf("gpu %d: CreateGpuInstance: %v", i, ret)
		}
		ci, ret := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret != nvml.SUCCESS {
			t.Fatalf("gpu %d: CI profile: %v", i, ret)
		}
		if _, ret := gi.CreateComputeInstance(&ci); ret != nvml.SUCCESS {
			t.Fatalf("gpu %d: CreateComputeInstance: %v", i, ret)
		}
	}
}

// fakeLister is an in-process PodResources source.
type fakeLister struct {
	mu  sync.Mutex
	as  []podresources.Assignment
	err error
}

func (f *fakeLister) List(context.Context) ([]podresources.Assignment, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.as, f.err
}

// scrape gathers c through a registry and returns the text exposition.
func scrape(t testing.TB, c prometheus.Collector) []byte {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather() error = %v", err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// parse parses text exposition with expfmt.
func parse(t testing.TB, text []byte) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		t.Fatalf("expfmt parse: %v\n%s", err, text)
	}
	return mfs
}

// series finds the value of the series of family name whose labels include
// all of want; ok is false when there is none.
func series(mfs map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	mf := mfs[name]
	if mf == nil {
		return 0, false
	}
next:
	for _, m := range mf.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if got[k] != v {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		}
		return math.NaN(), true
	}
	return 0, false
}

// promtoolCheck runs `promtool check metrics`: the text must parse, and
// lint may only flag DCGM's own naming (see promtooltest.CheckMetrics for
// when a missing promtool skips and when it fails).
func promtoolCheck(t *testing.T, text []byte) {
	t.Helper()
	promtooltest.CheckMetrics(t, text, promtooltest.DCGMNaming)
}
