package discovery

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/internal/wait"
	"github.com/gpud/gpud/pkg/gpu"
)

// DefaultIgnoredXids are the Xids that are application faults, not GPU
// faults (13 graphics engine exception, 31 MMU fault, 43 channel reset, 45
// preemptive cleanup, 68 video processor exception, 109 context switch
// timeout), as NVIDIA's device plugin ignores them.
var DefaultIgnoredXids = []uint64{13, 31, 43, 45, 68, 109}

// xidFallenOffBus is the Xid of a GPU that dropped off the bus: Lost.
const xidFallenOffBus = 79

// HealthConfig configures a HealthMonitor.
type HealthConfig struct {
	// IgnoredXids do not change health. Nil means DefaultIgnoredXids; an
	// empty non-nil slice ignores none.
	IgnoredXids []uint64
	// RecoveryPeriod is how long an unhealthy GPU must stay quiet and pass
	// its checks before it is Healthy again; zero means 5 minutes. A lost
	// GPU never recovers.
	RecoveryPeriod time.Duration
	// WaitTimeout bounds one EventSet.Wait, so ctx is checked between
	// waits; zero means 200ms.
	WaitTimeout time.Duration
}

// SetHealthFunc publishes a GPU's health ([Store.SetHealth]).
type SetHealthFunc func(uuid string, h gpu.Health, reason string)

// XidFunc receives every Xid event, ignored ones included: telemetry
// counts them (DCGM_FI_DEV_XID_ERRORS).
type XidFunc func(gpuUUID string, xid uint64)

// HealthMonitor is the node's one NVML event pump: it owns the event set
// and fans each Xid out to the [XidFunc]s given to [HealthMonitor.OnXid],
// and turns events into health: critical Xids (except
// ignored ones) and double-bit ECC errors make a GPU Unhealthy, Xid 79
// makes it Lost. An Unhealthy GPU that has had no new error for
// RecoveryPeriod and answers NVML again is set Healthy. Each transition is
// published and logged once.
type HealthMonitor struct {
	lib nvml.Interface
	cfg HealthConfig
	set SetHealthFunc
	log *slog.Logger
	now func() time.Time

	state     map[string]*gpuHealth // by UUID; only Run's goroutine touches it
	xidFns    []XidFunc
	healthFns []SetHealthFunc
}

// OnXid adds a subscriber to every Xid event. Call it before Run; f is
// called on Run's goroutine and must not block.
func (m *HealthMonitor) OnXid(f XidFunc) { m.xidFns = append(m.xidFns, f) }

// OnHealth adds a subscriber to every health transition, after it is
// published (Kubernetes Events). Call it before Run; f is called on Run's
// goroutine and must not block.
func (m *HealthMonitor) OnHealth(f SetHealthFunc) { m.healthFns = append(m.healthFns, f) }

type gpuHealth struct {
	dev     nvml.Device
	health  gpu.Health
	reason  string
	lastBad time.Time
}

// NewHealthMonitor returns a monitor of every GPU lib reports; set
// receives the transitions. log may be nil.
func NewHealthMonitor(lib nvml.Interface, cfg HealthConfig, set SetHealthFunc, log *slog.Logger) *HealthMonitor {
	if cfg.IgnoredXids == nil {
		cfg.IgnoredXids = DefaultIgnoredXids
	}
	if cfg.RecoveryPeriod <= 0 {
		cfg.RecoveryPeriod = 5 * time.Minute
	}
	if cfg.WaitTimeout <= 0 {
		cfg.WaitTimeout = 200 * time.Millisecond
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &HealthMonitor{lib: lib, cfg: cfg, set: set, log: log, now: time.Now, state: map[string]*gpuHealth{}}
}

// healthEvents are the NVML events the monitor registers.
const healthEvents = nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError

// Run watches events until ctx ends and returns nil then. Without event
// support it logs a warning and only waits: health then comes from
// discovery alone.
func (m *HealthMonitor) Run(ctx context.Context) error {
	set, ret := m.lib.EventSetCreate()
	if err := nvmlErr(ret); err != nil {
		m.log.Warn("nvml events unavailable, health from discovery only", "err", err)
		<-ctx.Done()
		return nil
	}
	defer set.Free()
	if err := m.register(set); err != nil {
		return err
	}
	for ctx.Err() == nil {
		ev, ret := set.Wait(uint32(m.cfg.WaitTimeout / time.Millisecond))
		switch ret {
		case nvml.SUCCESS:
			m.handle(ev)
		case nvml.ERROR_TIMEOUT:
		case nvml.ERROR_GPU_IS_LOST:
			m.probeAll()
		default:
			m.log.Debug("nvml event wait failed", "err", ret.Error())
			if !wait.Sleep(ctx, m.cfg.WaitTimeout) {
				return nil
			}
		}
		m.recover()
	}
	return nil
}

// register adds every GPU to the event set with the events it supports.
func (m *HealthMonitor) register(set nvml.EventSet) error {
	count, ret := m.lib.DeviceGetCount()
	if err := nvmlErr(ret); err != nil {
		return fmt.Errorf("health: count GPUs: %w", err)
	}
	for i := range count {
		h, ret := m.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			m.log.Warn("gpu not monitored", "gpu_index", i, "err", ret.Error())
			continue
		}
		uuid, ret := h.GetUUID()
		if ret != nvml.SUCCESS {
			m.log.Warn("gpu not monitored", "gpu_index", i, "err", ret.Error())
			continue
		}
		m.state[uuid] = &gpuHealth{dev: h, health: gpu.Healthy}
		types := uint64(healthEvents)
		if sup, ret := h.GetSupportedEventTypes(); ret == nvml.SUCCESS {
			types &= sup
		}
		if types == 0 {
			m.log.Warn("gpu supports no health events", "gpu_uuid", uuid)
			continue
		}
		if ret := h.RegisterEvents(types, set); ret != nvml.SUCCESS {
			m.log.Warn("gpu health events not registered", "gpu_uuid", uuid, "err", ret.Error())
		}
	}
	return nil
}

// handle maps one event to a health transition.
func (m *HealthMonitor) handle(ev nvml.EventData) {
	if ev.Device == nil {
		return
	}
	uuid, ret := ev.Device.GetUUID()
	if ret != nvml.SUCCESS {
		m.log.Debug("event from unidentified gpu", "err", ret.Error())
		m.probeAll()
		return
	}
	st, ok := m.state[uuid]
	if !ok {
		return
	}
	var reason string
	switch ev.EventType {
	case nvml.EventTypeXidCriticalError:
		for _, f := range m.xidFns {
			f(uuid, ev.EventData)
		}
		switch {
		case ev.EventData == xidFallenOffBus:
			m.transition(uuid, st, gpu.Lost, "xid 79: gpu fell off the bus")
			return
		case slices.Contains(m.cfg.IgnoredXids, ev.EventData):
			m.log.Debug("ignored xid", "gpu_uuid", uuid, "xid", ev.EventData)
			return
		}
		reason = fmt.Sprintf("xid %d", ev.EventData)
	case nvml.EventTypeDoubleBitEccError:
		reason = "double-bit ECC error"
	default:
		return
	}
	// An error the driver attributes to one GPU instance takes down only
	// that instance's MIG devices; the GPU's other tenants keep running.
	if migs := m.migDevicesOf(st.dev, ev.GpuInstanceId, ev.ComputeInstanceId); len(migs) > 0 {
		for _, mig := range migs {
			ms, ok := m.state[mig]
			if !ok {
				ms = &gpuHealth{dev: st.dev, health: gpu.Healthy}
				m.state[mig] = ms
			}
			m.transition(mig, ms, gpu.Unhealthy, fmt.Sprintf("%s on GPU instance %d of %s", reason, ev.GpuInstanceId, uuid))
		}
		return
	}
	m.transition(uuid, st, gpu.Unhealthy, reason)
}

// noInstance is what NVML puts in an event's instance IDs when the event
// concerns the whole GPU.
const noInstance = 0xFFFFFFFF

// migDevicesOf returns the UUIDs of the MIG devices on GPU instance gi (and
// compute instance ci, unless it is noInstance); none when the event is not
// attributed to an instance or the GPU is not in MIG mode.
func (m *HealthMonitor) migDevicesOf(dev nvml.Device, gi, ci uint32) []string {
	if gi == noInstance {
		return nil
	}
	if cur, _, ret := dev.GetMigMode(); ret != nvml.SUCCESS || cur != nvml.DEVICE_MIG_ENABLE {
		return nil
	}
	n, ret := dev.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return nil
	}
	var out []string
	for i := range n {
		h, ret := dev.GetMigDeviceHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		g, ret1 := h.GetGpuInstanceId()
		c, ret2 := h.GetComputeInstanceId()
		if ret1 != nvml.SUCCESS || ret2 != nvml.SUCCESS || uint32(g) != gi || (ci != noInstance && uint32(c) != ci) {
			continue
		}
		if uuid, ret := h.GetUUID(); ret == nvml.SUCCESS {
			out = append(out, uuid)
		}
	}
	return out
}

// transition records an error and publishes the new health if it changed.
// A Lost GPU stays Lost.
func (m *HealthMonitor) transition(uuid string, st *gpuHealth, h gpu.Health, reason string) {
	if h != gpu.Healthy {
		st.lastBad = m.now()
	}
	if st.health == gpu.Lost || (st.health == h && (h == gpu.Healthy || st.reason == reason)) {
		return
	}
	prev := st.health
	st.health, st.reason = h, reason
	if h == gpu.Healthy {
		m.log.Info("device healthy again", "uuid", uuid, "was", prev)
	} else {
		m.log.Warn("device health changed", "uuid", uuid, "health", h, "reason", reason)
	}
	m.set(uuid, h, reason)
	for _, f := range m.healthFns {
		f(uuid, h, reason)
	}
}

// recover heals unhealthy GPUs quiet for RecoveryPeriod that pass probe.
func (m *HealthMonitor) recover() {
	now := m.now()
	for uuid, st := range m.state {
		if st.health != gpu.Unhealthy || now.Sub(st.lastBad) < m.cfg.RecoveryPeriod {
			continue
		}
		switch ok, lost := probe(st.dev); {
		case lost:
			m.transition(uuid, st, gpu.Lost, "gpu lost")
		case ok:
			m.transition(uuid, st, gpu.Healthy, "")
		default:
			st.lastBad = now // still failing: stay quiet for another period
		}
	}
}

// probeAll marks GPUs that stopped answering Lost.
func (m *HealthMonitor) probeAll() {
	for uuid, st := range m.state {
		if _, lost := probe(st.dev); lost {
			m.transition(uuid, st, gpu.Lost, "gpu lost")
		}
	}
}

// probe checks that a GPU answers NVML and has no failed row remapping.
func probe(h nvml.Device) (ok, lost bool) {
	_, ret := h.GetMemoryInfo()
	if ret == nvml.ERROR_GPU_IS_LOST {
		return false, true
	}
	if ret != nvml.SUCCESS && ret != nvml.ERROR_NOT_SUPPORTED {
		return false, false
	}
	_, _, _, failed, ret := h.GetRemappedRows()
	if ret == nvml.ERROR_GPU_IS_LOST {
		return false, true
	}
	return !(ret == nvml.SUCCESS && failed), false
}
