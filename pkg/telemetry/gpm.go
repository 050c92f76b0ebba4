package telemetry

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// GPM (Hopper and later) gives the profiling fields dcgm-exporter exports
// as DCGM_FI_PROF_*: each sweep takes a GPM sample per GPU (GpmSampleGet)
// and per MIG device (GpmMigSampleGet on its GPU, by GPU instance ID),
// and GpmMetricsGet turns the previous sample and this one into the
// metrics over that Interval. The call runs in the sweep's slot for it,
// with the same timeout and busy rules as every other NVML call.

// gpmMetric maps a GPM metric onto a field; scale converts GPM's unit
// (percent, MiB/s) into the field's (ratio, bytes/s).
type gpmMetric struct {
	id    nvml.GpmMetricId
	f     field
	scale float64
	ratio bool // clamp into [0, 1]
}

var gpmMetrics = [...]gpmMetric{
	{nvml.GPM_METRIC_GRAPHICS_UTIL, fProfGREngine, 0.01, true},
	{nvml.GPM_METRIC_SM_UTIL, fProfSMActive, 0.01, true},
	{nvml.GPM_METRIC_SM_OCCUPANCY, fProfSMOccupancy, 0.01, true},
	{nvml.GPM_METRIC_ANY_TENSOR_UTIL, fProfTensor, 0.01, true},
	{nvml.GPM_METRIC_DRAM_BW_UTIL, fProfDRAM, 0.01, true},
	{nvml.GPM_METRIC_FP64_UTIL, fProfFP64, 0.01, true},
	{nvml.GPM_METRIC_FP32_UTIL, fProfFP32, 0.01, true},
	{nvml.GPM_METRIC_FP16_UTIL, fProfFP16, 0.01, true},
	// nvml.h: PCIe and NVLink rates are in MiB/s.
	{nvml.GPM_METRIC_PCIE_TX_PER_SEC, fProfPCIeTX, mib, false},
	{nvml.GPM_METRIC_PCIE_RX_PER_SEC, fProfPCIeRX, mib, false},
	{nvml.GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC, fProfNVLinkTX, mib, false},
	{nvml.GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC, fProfNVLinkRX, mib, false},
}

// Call names of the GPM slot in gpud_sampler_errors_total.
const (
	callGPMSupport = "GpmQueryDeviceSupport"
	callGPMAlloc   = "GpmSampleAlloc"
	callGPMSample  = "GpmSampleGet"
	callGPMMig     = "GpmMigSampleGet"
	callGPMMetrics = "GpmMetricsGet"
)

// gpmState is a device's GPM samples. The slot's goroutine owns it while
// the slot is in flight; otherwise it is guarded by Sampler.mu.
type gpmState struct {
	known       bool // support was queried
	unsupported bool
	prev, cur   nvml.GpmSample
	taken       int // samples taken, up to 2
	dropped     bool
	// Set at launch, under the lock: the GPU's handle and the device's
	// identity, which syncDevices may change while the call runs.
	parent nvml.Device
	uuid   string
	mig    bool
	giid   int
}

// release returns the allocated samples and forgets them.
func (g *gpmState) release() []nvml.GpmSample {
	var out []nvml.GpmSample
	for _, p := range []*nvml.GpmSample{&g.prev, &g.cur} {
		if *p != nil {
			out = append(out, *p)
			*p = nil
		}
	}
	g.taken = 0
	return out
}

// runGPM takes one GPM sample of d and, from the second on, computes the
// profiling fields between it and the previous one. Called without the
// lock, with d's GPM slot in flight.
func (s *Sampler) runGPM(d *devState) {
	defer s.freeQueued() // after every unlock below
	g := &d.gpm
	uuid, mig, giid := g.uuid, g.mig, g.giid
	fail := func(call string, ret nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if ret == nvml.ERROR_NOT_SUPPORTED {
			g.unsupported = true
			s.markGPMUnsupportedLocked(d)
		} else {
			s.errs[errKey{uuid, call, reason(ret)}]++
		}
		s.gpmDoneLocked(d)
	}
	if !g.known {
		sup, ret := g.parent.GpmQueryDeviceSupport()
		if ret == nvml.SUCCESS && sup.IsSupportedDevice == 0 {
			ret = nvml.ERROR_NOT_SUPPORTED
		}
		if ret != nvml.SUCCESS {
			fail(callGPMSupport, ret)
			return
		}
		g.known = true
	}
	for _, p := range []*nvml.GpmSample{&g.prev, &g.cur} {
		if *p == nil {
			smp, ret := s.lib.GpmSampleAlloc()
			if ret != nvml.SUCCESS {
				fail(callGPMAlloc, ret)
				return
			}
			*p = smp
		}
	}
	var ret nvml.Return
	call := callGPMSample
	if mig {
		call = callGPMMig
		ret = g.parent.GpmMigSampleGet(giid, g.cur)
	} else {
		ret = g.parent.GpmSampleGet(g.cur)
	}
	if ret != nvml.SUCCESS {
		fail(call, ret)
		return
	}
	g.prev, g.cur = g.cur, g.prev // prev is now the sample just taken
	if g.taken < 2 {
		g.taken++
	}
	if g.taken < 2 {
		s.mu.Lock()
		s.gpmDoneLocked(d)
		s.mu.Unlock()
		return
	}
	mg := &nvml.GpmMetricsGetType{Version: nvml.GPM_METRICS_GET_VERSION, NumMetrics: uint32(len(gpmMetrics)), Sample1: g.cur, Sample2: g.prev}
	for i, m := range gpmMetrics {
		mg.Metrics[i].MetricId = uint32(m.id)
	}
	ret = s.lib.GpmMetricsGet(mg)
	at := s.cfg.Clock()
	if ret != nvml.SUCCESS {
		fail(callGPMMetrics, ret)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d.snap.GPM = true
	for i, m := range gpmMetrics {
		r := nvml.Return(mg.Metrics[i].NvmlReturn)
		switch {
		case r == nvml.ERROR_NOT_SUPPORTED:
			d.snap.Unsupported[m.f] = true
			continue
		case r != nvml.SUCCESS:
			s.errs[errKey{uuid, callGPMMetrics, reason(r)}]++
			continue
		}
		v := max(mg.Metrics[i].Value*m.scale, 0)
		if m.ratio {
			v = min(v, 1)
		}
		d.snap.Values[m.f], d.snap.At[m.f], d.snap.Unsupported[m.f] = v, at, false
	}
	s.gpmDoneLocked(d)
}

// markGPMUnsupportedLocked marks d's GPM fields unsupported: they are left
// out and counted in gpud_sampler_unsupported_fields.
func (s *Sampler) markGPMUnsupportedLocked(d *devState) {
	for _, m := range gpmMetrics {
		d.snap.Unsupported[m.f] = true
	}
	d.snap.GPM = false
}

// gpmDoneLocked ends d's GPM slot; a device that left the inventory, or a
// sampler closed meanwhile, frees its samples now.
func (s *Sampler) gpmDoneLocked(d *devState) {
	d.inflight[slotGPM] = false
	if d.gpm.dropped || s.closed || d.gpm.unsupported {
		s.freeLater(d.gpm.release())
	}
}

// freeLater queues samples for [Sampler.freeQueued]; NVML is not called
// under the lock.
func (s *Sampler) freeLater(smp []nvml.GpmSample) { s.toFree = append(s.toFree, smp...) }

// freeQueued frees the queued GPM samples.
func (s *Sampler) freeQueued() {
	s.mu.Lock()
	smp := s.toFree
	s.toFree = nil
	s.mu.Unlock()
	for _, x := range smp {
		if ret := s.lib.GpmSampleFree(x); ret != nvml.SUCCESS {
			s.log.Warn("gpm sample free failed", "err", ret)
		}
	}
}

// Close frees the GPM samples the sampler holds; [Sampler.Run] calls it
// when it returns. A GPM call still in flight frees its samples when it
// returns. After Close the sampler takes no GPM samples; other fields are
// still sampled by [Sampler.Sweep].
func (s *Sampler) Close() {
	s.mu.Lock()
	s.closed = true
	for _, d := range s.devs {
		if !d.inflight[slotGPM] {
			s.freeLater(d.gpm.release())
		}
	}
	s.mu.Unlock()
	s.freeQueued()
}
