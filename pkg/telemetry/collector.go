package telemetry

import (
	"runtime"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector exports the sampler's latest snapshot. Collect reads the cache
// only: it never calls NVML or the kubelet. It is an unchecked collector
// (Describe sends nothing) because dcgm-exporter's families carry different
// label sets on GPUs, MIG devices and attributed devices.
type Collector struct {
	s       *Sampler
	compat  Compat
	version string

	dcgm   [numVariants][numFields]*prometheus.Desc
	alias  [numVariants][numFields]*prometheus.Desc // dcgmAliases; nil for none
	native [numFields]*prometheus.Desc
	xid    [numVariants]*prometheus.Desc

	info, health, lastXid, xidTotal, migEnabled, migPending, migInfo, migMemory *prometheus.Desc
	replicas, containers, holder, procMem, procSM                               *prometheus.Desc
	up, duration, sweeps, errors, stale, podUp, attrErrs, build                 *prometheus.Desc
	unsupported                                                                 *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns a collector of s's snapshots with the metric names
// compat selects. version goes into gpud_build_info.
func NewCollector(s *Sampler, compat Compat, version string) *Collector {
	c := &Collector{s: s, compat: compat, version: version}
	for v := range numVariants {
		lbl := v.labels()
		for f := range numFields {
			sp := fieldSpecs[f]
			c.dcgm[v][f] = prometheus.NewDesc(sp.dcgm, sp.dcgmHelp, lbl, nil)
			if a, ok := dcgmAliases[f]; ok {
				c.alias[v][f] = prometheus.NewDesc(a.name, a.help, lbl, nil)
			}
		}
		c.xid[v] = prometheus.NewDesc("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", lbl, nil)
	}
	id := idLabels
	for f := range numFields {
		sp := fieldSpecs[f]
		c.native[f] = prometheus.NewDesc(sp.native, sp.nativeHelp, id, nil)
	}
	with := func(extra ...string) []string { return append(append([]string(nil), id...), extra...) }
	c.info = prometheus.NewDesc("gpud_device_info", "Identity of each GPU, value 1; join on gpu and UUID (MIG devices: gpud_mig_device_info).", with("device", "pci_bus_id", "model_name"), nil)
	c.health = prometheus.NewDesc("gpud_device_health_state", "1 for the GPU's current health state (Healthy, Unhealthy, Lost), 0 for the others.", with("state"), nil)
	c.lastXid = prometheus.NewDesc("gpud_device_last_xid", "Code of the last Xid error the GPU reported since gpud started; 0 when none.", id, nil)
	c.xidTotal = prometheus.NewDesc("gpud_xid_errors_total", "Xid errors reported by the GPU since gpud started, by Xid code.", with("xid"), nil)
	c.migEnabled = prometheus.NewDesc("gpud_mig_mode_enabled", "1 when MIG mode is enabled on the GPU.", id, nil)
	c.migPending = prometheus.NewDesc("gpud_mig_mode_pending", "1 when a MIG mode change waits for a GPU reset.", id, nil)
	c.migInfo = prometheus.NewDesc("gpud_mig_device_info", "MIG layout: one series per MIG device, value 1.", with("mig_uuid", "GPU_I_PROFILE", "GPU_CI_ID", "placement_start", "placement_size"), nil)
	c.migMemory = prometheus.NewDesc("gpud_mig_device_memory_total_bytes", "Framebuffer memory of the MIG device, in bytes.", id, nil)
	c.replicas = prometheus.NewDesc("gpud_device_replicas_allocated", "Time-sliced replicas of the device (IDs <uuid>::<n>) the kubelet assigned to containers.", id, nil)
	c.containers = prometheus.NewDesc("gpud_device_containers_allocated", "Containers the kubelet assigned the device to, whole, as a replica or as a MIG device.", id, nil)
	c.holder = prometheus.NewDesc("gpud_device_container_allocated", "1 for each container the kubelet assigned the device to.", with("namespace", "pod", "container"), nil)
	c.procMem = prometheus.NewDesc("gpud_process_memory_used_bytes", "Framebuffer memory a compute process holds, in bytes, with its pod and container when known.", with("pid", "namespace", "pod", "container", "pod_uid", "container_id"), nil)
	c.procSM = prometheus.NewDesc("gpud_process_sm_utilization_ratio", "Share of the GPU's SM time a compute process used at its latest NVML per-process sample (0 to 1), with its pod and container when known; absent in MIG mode, where the driver keeps no per-process samples.", with("pid", "namespace", "pod", "container", "pod_uid", "container_id"), nil)
	c.up = prometheus.NewDesc("gpud_sampler_up", "1 when the sampler published a snapshot within its stale-after window.", nil, nil)
	c.duration = prometheus.NewDesc("gpud_sampler_duration_seconds", "How long the last sweep over every device took, in seconds.", nil, nil)
	c.sweeps = prometheus.NewDesc("gpud_sampler_sweeps_total", "Sweeps over every device since gpud started.", nil, nil)
	c.errors = prometheus.NewDesc("gpud_sampler_errors_total", "NVML calls that failed (reason: the NVML error), timed out, or were skipped because the previous call was still running (busy); UUID is the device's own (a MIG device's for MIG devices).", []string{"UUID", "call", "reason"}, nil)
	c.stale = prometheus.NewDesc("gpud_sampler_stale_fields", "Fields of the device whose last good value is older than the stale-after window; they are left out of the output.", id, nil)
	c.unsupported = prometheus.NewDesc("gpud_sampler_unsupported_fields", "Fields the device does not support (NVML answered not supported; GPM profiling fields on GPUs without GPM count 12); they are left out of the output.", id, nil)
	c.podUp = prometheus.NewDesc("gpud_podresources_up", "1 when the last kubelet PodResources List worked.", nil, nil)
	c.attrErrs = prometheus.NewDesc("gpud_attribution_errors_total", "Pod attribution failures by source (podresources, proc, podlogs).", []string{"source"}, nil)
	c.build = prometheus.NewDesc("gpud_build_info", "gpud's version and Go version, value 1.", []string{"version", "goversion"}, nil)
	return c
}

// Describe sends nothing: the collector is unchecked (see [Collector]).
func (c *Collector) Describe(chan<- *prometheus.Desc) {}

// Collect exports the latest snapshot; fields older than StaleAfter are
// left out and counted in gpud_sampler_stale_fields.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.build, prometheus.GaugeValue, 1, c.version, runtime.Version())
	snap := c.s.Snapshot()
	cfg := c.s.cfg
	now := cfg.Clock()
	if snap == nil {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, b2f(now.Sub(snap.Taken) <= cfg.StaleAfter))
	ch <- prometheus.MustNewConstMetric(c.duration, prometheus.GaugeValue, snap.Duration.Seconds())
	ch <- prometheus.MustNewConstMetric(c.sweeps, prometheus.CounterValue, float64(snap.Sweeps))
	ch <- prometheus.MustNewConstMetric(c.podUp, prometheus.GaugeValue, b2f(snap.PodResourcesUp))
	for _, src := range []string{"podresources", "proc", "podlogs"} {
		ch <- prometheus.MustNewConstMetric(c.attrErrs, prometheus.CounterValue, float64(snap.AttributionErrors[src]), src)
	}
	for _, e := range snap.Errors {
		ch <- prometheus.MustNewConstMetric(c.errors, prometheus.CounterValue, float64(e.Count), e.UUID, e.Call, e.Reason)
	}
	b := &slab{ch: ch, buf: make([]series, 0, c.estimate(snap))}
	for i := range snap.Devices {
		c.collectDevice(b, &snap.Devices[i], now, cfg)
	}
	for _, x := range snap.Xids {
		for i := range snap.Devices {
			if d := &snap.Devices[i]; !d.MIG && d.UUID == x.GPUUUID {
				ch <- prometheus.MustNewConstMetric(c.xidTotal, prometheus.CounterValue, float64(x.Count), append(d.idLbl[:4:4], strconv.FormatUint(x.Xid, 10))...)
			}
		}
	}
	for i := range snap.Processes {
		p := &snap.Processes[i]
		if now.Sub(p.At) > cfg.StaleAfter {
			continue
		}
		b.send(c.procMem, prometheus.GaugeValue, float64(p.UsedBytes), p.lp)
		if p.HasSMUtil {
			b.send(c.procSM, prometheus.GaugeValue, p.SMUtil, p.lp)
		}
	}
}

// estimate sizes a scrape's slab.
func (c *Collector) estimate(snap *Snapshot) int {
	n := 2 * len(snap.Processes)
	for i := range snap.Devices {
		n += 2*int(numFields) + 10 + len(snap.Devices[i].Holders)
	}
	return n
}

// collectDevice exports one GPU or MIG device.
func (c *Collector) collectDevice(b *slab, d *DeviceSnapshot, now time.Time, cfg Config) {
	stale, unsupported := 0, 0
	for f := range numFields {
		if d.Unsupported[f] {
			unsupported++
			continue
		}
		at := d.At[f]
		if at.IsZero() {
			if c.s.fieldApplies(d, f) {
				stale++
			}
			continue
		}
		if now.Sub(at) > cfg.StaleAfter {
			stale++
			continue
		}
		sp := &fieldSpecs[f]
		v := d.Values[f]
		if c.compat.dcgm() {
			b.send(c.dcgm[d.variant][f], sp.dcgmType, v, d.lp.dcgm)
			if a := c.alias[d.variant][f]; a != nil {
				b.send(a, sp.dcgmType, v, d.lp.dcgm)
			}
		}
		if c.compat.native() {
			b.send(c.native[f], sp.nativeType, v*sp.scale, d.lp.id)
		}
	}
	b.send(c.stale, prometheus.GaugeValue, float64(stale), d.lp.id)
	b.send(c.unsupported, prometheus.GaugeValue, float64(unsupported), d.lp.id)
	b.send(c.replicas, prometheus.GaugeValue, float64(d.Replicas), d.lp.id)
	b.send(c.containers, prometheus.GaugeValue, float64(len(d.Holders)), d.lp.id)
	for _, lp := range d.lp.holders {
		b.send(c.holder, prometheus.GaugeValue, 1, lp)
	}
	// Health per device: a MIG slice can be Unhealthy on a healthy GPU.
	for i, st := range healthStates {
		b.send(c.health, prometheus.GaugeValue, b2f(d.Health == st), d.lp.health[i])
	}
	if d.MIG {
		b.send(c.migInfo, prometheus.GaugeValue, 1, d.lp.migInfo)
		b.send(c.migMemory, prometheus.GaugeValue, float64(d.MemoryBytes), d.lp.id)
		return
	}
	b.send(c.info, prometheus.GaugeValue, 1, d.lp.info)
	if c.compat.dcgm() {
		b.send(c.xid[d.variant], prometheus.GaugeValue, float64(d.LastXid), d.lp.dcgm)
	}
	b.send(c.lastXid, prometheus.GaugeValue, float64(d.LastXid), d.lp.id)
	b.send(c.migEnabled, prometheus.GaugeValue, b2f(d.MIGEnabled), d.lp.id)
	b.send(c.migPending, prometheus.GaugeValue, b2f(d.MIGPending), d.lp.id)
}
