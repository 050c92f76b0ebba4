package simnode

import (
	"math"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// GPM (GPU performance monitoring, Hopper and later) is modelled as the
// hardware does it: a sample is a snapshot of activity counters, and
// GpmMetricsGet turns the difference between two samples into rates. The
// counters integrate the same load wave the rest of the telemetry follows
// (utilAt), per GPU and per GPU instance, so the metrics between two
// samples are the mean activity over that interval, deterministic from the
// profile's seed and the node's clock.

// gpmRegistry is the node's GPM state, guarded by Node.mu.
type gpmRegistry struct {
	samples map[*gpmSample]*gpmReading // allocated samples; nil: never filled
	acc     map[gpmScope]*gpmAcc
}

// gpmScope is what a sample covers: a whole GPU (gi < 0) or one GPU
// instance.
type gpmScope struct{ dev, gi int }

// gpmAcc is a scope's running activity integral.
type gpmAcc struct {
	at       float64 // seconds since node start of the last update
	busySecs float64 // integral of activity (0-1) over time
}

// gpmReading is what GpmSampleGet stored in a sample.
type gpmReading struct {
	scope    gpmScope
	at       float64
	busySecs float64
	now      float64 // activity at the instant of the sample
	share    float64 // the scope's share of the GPU's traffic (slices/7)
	nvlink   bool    // NVLink metrics apply
}

// gpmSample is the simulated nvmlGpmSample handle.
type gpmSample struct{ n *Node }

var _ nvml.GpmSample = (*gpmSample)(nil)

func (s *gpmSample) Free() nvml.Return                        { return s.n.gpmFree(s) }
func (s *gpmSample) Get(d nvml.Device) nvml.Return            { return s.n.gpmGet(d, -1, s) }
func (s *gpmSample) MigGet(d nvml.Device, gi int) nvml.Return { return s.n.gpmGet(d, gi, s) }

// GPMSamples returns how many GPM samples are allocated and not freed, so
// tests can check that a user frees what it allocates.
func (n *Node) GPMSamples() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.gpm.samples)
}

// gpmSupported reports whether the GPU has GPM: Hopper and later.
func (d *Device) gpmSupported() bool {
	a := d.node.model.config.Architecture
	return a >= nvml.DEVICE_ARCH_HOPPER && a != nvml.DEVICE_ARCH_UNKNOWN
}

func (n *Node) setGPMFuncs() {
	n.GpmSampleAllocFunc = func() (nvml.GpmSample, nvml.Return) {
		s := &gpmSample{n: n}
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.gpm.samples == nil {
			n.gpm.samples = map[*gpmSample]*gpmReading{}
		}
		n.gpm.samples[s] = nil
		return s, nvml.SUCCESS
	}
	n.GpmSampleFreeFunc = func(s nvml.GpmSample) nvml.Return {
		gs, ok := s.(*gpmSample)
		if !ok {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		return n.gpmFree(gs)
	}
	n.GpmSampleGetFunc = func(d nvml.Device, s nvml.GpmSample) nvml.Return { return n.gpmGetAny(d, -1, s) }
	n.GpmMigSampleGetFunc = func(d nvml.Device, gi int, s nvml.GpmSample) nvml.Return { return n.gpmGetAny(d, gi, s) }
	n.GpmQueryDeviceSupportFunc = func(d nvml.Device) (nvml.GpmSupport, nvml.Return) { return d.GpmQueryDeviceSupport() }
	n.GpmMetricsGetFunc = n.gpmMetricsGet
}

func (d *Device) setGPMFuncs() {
	d.GpmQueryDeviceSupportFunc = func() (nvml.GpmSupport, nvml.Return) {
		if r := d.lostOr("GpmQueryDeviceSupport"); r != nvml.SUCCESS {
			return nvml.GpmSupport{}, r
		}
		return nvml.GpmSupport{Version: nvml.GPM_SUPPORT_VERSION, IsSupportedDevice: uint32(b2u(d.gpmSupported()))}, nvml.SUCCESS
	}
	d.GpmSampleGetFunc = func(s nvml.GpmSample) nvml.Return { return d.node.gpmGetAny(d, -1, s) }
	d.GpmMigSampleGetFunc = func(gi int, s nvml.GpmSample) nvml.Return { return d.node.gpmGetAny(d, gi, s) }
}

// setGPMFuncs gives a MIG device handle GPM: support is its GPU's, a
// sample covers its GPU instance.
func (h *migDevice) setGPMFuncs() {
	d := h.ci.gi.dev
	h.GpmQueryDeviceSupportFunc = d.GpmQueryDeviceSupport
	h.GpmSampleGetFunc = func(s nvml.GpmSample) nvml.Return { return d.node.gpmGetAny(h, -1, s) }
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

func (n *Node) gpmGetAny(d nvml.Device, gi int, s nvml.GpmSample) nvml.Return {
	gs, ok := s.(*gpmSample)
	if !ok || gs.n != n {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	return n.gpmGet(d, gi, gs)
}

func (n *Node) gpmFree(s *gpmSample) nvml.Return {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.gpm.samples[s]; !ok {
		return nvml.ERROR_INVALID_ARGUMENT // never allocated, or freed twice
	}
	delete(n.gpm.samples, s)
	return nvml.SUCCESS
}

// gpmGet fills s with the counters of device h (a GPU or a MIG device
// handle) or, with gi >= 0, of GPU instance gi of GPU h.
func (n *Node) gpmGet(h nvml.Device, gi int, s *gpmSample) nvml.Return {
	var d *Device
	op := "GpmSampleGet"
	switch h := h.(type) {
	case *Device:
		d = h
	case *migDevice:
		if gi >= 0 {
			return nvml.ERROR_INVALID_ARGUMENT // GpmMigSampleGet takes the GPU's handle
		}
		d, gi = h.ci.gi.dev, h.ci.gi.id
	default:
		return nvml.ERROR_INVALID_ARGUMENT
	}
	if gi >= 0 {
		op = "GpmMigSampleGet"
	}
	if r := d.lostOr(op); r != nvml.SUCCESS {
		return r
	}
	if !d.gpmSupported() {
		return nvml.ERROR_NOT_SUPPORTED
	}
	t := n.elapsed().Seconds()
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.gpm.samples[s]; !ok {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	share := 1.0
	if gi >= 0 {
		g := d.gis[gi]
		if g == nil || d.migCurrent != nvml.DEVICE_MIG_ENABLE {
			return nvml.ERROR_NOT_FOUND
		}
		share = float64(g.info.SliceCount) / computeSlices
	}
	sc := gpmScope{d.index, gi}
	if n.gpm.acc == nil {
		n.gpm.acc = map[gpmScope]*gpmAcc{}
	}
	a := n.gpm.acc[sc]
	if a == nil {
		a = &gpmAcc{}
		n.gpm.acc[sc] = a
	}
	if t > a.at {
		a.busySecs += d.activityIntegralLocked(gi, a.at, t)
		a.at = t
	}
	n.gpm.samples[s] = &gpmReading{
		scope: sc, at: t, busySecs: a.busySecs, now: d.activityLocked(gi, t), share: share,
		nvlink: n.model.nvlinks > 0 && n.profile.Interconnect == "nvswitch",
	}
	return nvml.SUCCESS
}

// giPhase shifts a GPU instance's load wave from its GPU's.
func giPhase(gi int) float64 { return 0.9 * float64(gi+1) }

// wave is the load wave 0.55+0.4*sin(w*t+phi) and its integral over [a, b].
func wave(t, phi float64) float64 {
	return 0.55 + 0.4*math.Sin(2*math.Pi*t/loadPeriodSeconds+phi)
}

func waveIntegral(a, b, phi float64) float64 {
	w := 2 * math.Pi / loadPeriodSeconds
	return 0.55*(b-a) - 0.4/w*(math.Cos(w*b+phi)-math.Cos(w*a+phi))
}

// giBusyLocked reports whether a process runs on GPU instance gi.
func (d *Device) giBusyLocked(gi int) bool {
	for _, p := range d.procs {
		if p.gi == gi {
			return true
		}
	}
	return false
}

// activityLocked is the scope's activity (0-1) at t: on a GPU instance its
// own wave while a process runs on it; on a GPU in MIG mode the
// slice-weighted sum of its instances'; else the GPU's utilAt.
func (d *Device) activityLocked(gi int, t float64) float64 {
	switch {
	case gi >= 0:
		if !d.giBusyLocked(gi) {
			return 0
		}
		return wave(t, d.phase()+giPhase(gi))
	case d.migCurrent == nvml.DEVICE_MIG_ENABLE:
		sum := 0.0
		for id, g := range d.gis {
			sum += float64(g.info.SliceCount) / computeSlices * d.activityLocked(id, t)
		}
		return sum
	}
	return d.utilAt(t, d.busyLocked())
}

// activityIntegralLocked integrates activityLocked over [a, b], the
// process set taken as it is now.
func (d *Device) activityIntegralLocked(gi int, a, b float64) float64 {
	switch {
	case gi >= 0:
		if !d.giBusyLocked(gi) {
			return 0
		}
		return waveIntegral(a, b, d.phase()+giPhase(gi))
	case d.migCurrent == nvml.DEVICE_MIG_ENABLE:
		sum := 0.0
		for id, g := range d.gis {
			sum += float64(g.info.SliceCount) / computeSlices * d.activityIntegralLocked(id, a, b)
		}
		return sum
	}
	if !d.busyLocked() {
		return 0
	}
	return waveIntegral(a, b, d.phase())
}

// gpmMetric is how a GPM metric follows activity u (0-1): percent metrics
// are pct*u*100; bandwidth metrics (MiB/s) are frac*u*share of the link's
// peak.
type gpmMetric struct {
	pct    float64
	frac   float64
	pcie   bool // peak: the PCIe link
	nvlink bool // peak: the GPU's NVLinks
}

var gpmMetrics = map[nvml.GpmMetricId]gpmMetric{
	nvml.GPM_METRIC_GRAPHICS_UTIL:           {pct: 1},
	nvml.GPM_METRIC_SM_UTIL:                 {pct: 0.92},
	nvml.GPM_METRIC_SM_OCCUPANCY:            {pct: 0.55},
	nvml.GPM_METRIC_ANY_TENSOR_UTIL:         {pct: 0.6},
	nvml.GPM_METRIC_DRAM_BW_UTIL:            {pct: 0.5},
	nvml.GPM_METRIC_FP64_UTIL:               {pct: 0.03},
	nvml.GPM_METRIC_FP32_UTIL:               {pct: 0.3},
	nvml.GPM_METRIC_FP16_UTIL:               {pct: 0.12},
	nvml.GPM_METRIC_INTEGER_UTIL:            {pct: 0.2},
	nvml.GPM_METRIC_PCIE_TX_PER_SEC:         {frac: 0.04, pcie: true},
	nvml.GPM_METRIC_PCIE_RX_PER_SEC:         {frac: 0.1, pcie: true},
	nvml.GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC: {frac: 0.25, nvlink: true},
	nvml.GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC: {frac: 0.24, nvlink: true},
}

// pcieMiBps is the PCIe link's peak per direction, in MiB/s.
func (m model) pcieMiBps() float64 {
	perLaneGBps := map[int]float64{3: 0.985, 4: 1.969, 5: 3.938}[m.pcieGen]
	return perLaneGBps * float64(m.pcieWidth) * 1e9 / (1 << 20)
}

// nvlinkMiBps is the GPU's NVLink peak per direction (25 GB/s a link, as
// the NVLink bandwidth counter assumes), in MiB/s.
func (m model) nvlinkMiBps() float64 { return 25e9 * float64(m.nvlinks) / (1 << 20) }

// gpmMetricsGet computes the metrics asked for between two samples of one
// scope.
func (n *Node) gpmMetricsGet(g *nvml.GpmMetricsGetType) nvml.Return {
	if g == nil || g.NumMetrics > uint32(len(g.Metrics)) {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	s1, ok1 := g.Sample1.(*gpmSample)
	s2, ok2 := g.Sample2.(*gpmSample)
	if !ok1 || !ok2 {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	n.mu.Lock()
	r1, r2 := n.gpm.samples[s1], n.gpm.samples[s2]
	n.mu.Unlock()
	if r1 == nil || r2 == nil || r1.scope != r2.scope || r2.at < r1.at {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	u := r2.now // samples at one instant: the activity at that instant
	if dt := r2.at - r1.at; dt > 0 {
		u = (r2.busySecs - r1.busySecs) / dt
	}
	u = min(max(u, 0), 1)
	m := n.model
	for i := range g.NumMetrics {
		mt := &g.Metrics[i]
		spec, ok := gpmMetrics[nvml.GpmMetricId(mt.MetricId)]
		mt.Value, mt.NvmlReturn = 0, uint32(nvml.SUCCESS)
		switch {
		case !ok, spec.nvlink && !r2.nvlink:
			mt.NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
		case spec.pcie:
			mt.Value = spec.frac * u * r2.share * m.pcieMiBps()
		case spec.nvlink:
			mt.Value = spec.frac * u * r2.share * m.nvlinkMiBps()
		default:
			mt.Value = 100 * spec.pct * u
		}
		// Three decimals, so golden files do not depend on the last bits
		// of the platform's floating point.
		mt.Value = math.Round(mt.Value*1000) / 1000
	}
	return nvml.SUCCESS
}
