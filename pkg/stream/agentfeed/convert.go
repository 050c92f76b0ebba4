package agentfeed

import (
	"strings"
	"time"

	telemetryv1 "github.com/gpud/gpud/api/telemetry/v1"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/telemetry"
	"github.com/gpud/gpud/pkg/timeslice"
)

func protoHealth(h gpu.Health) telemetryv1.Health {
	switch h {
	case gpu.Healthy:
		return telemetryv1.Health_HEALTH_HEALTHY
	case gpu.Unhealthy:
		return telemetryv1.Health_HEALTH_UNHEALTHY
	case gpu.Lost:
		return telemetryv1.Health_HEALTH_LOST
	}
	return telemetryv1.Health_HEALTH_UNSPECIFIED
}

// devices lists every GPU of inv, each followed by its MIG devices, with
// the time-slicing cfg gives it.
func devices(inv gpu.Inventory, cfg timeslice.Config) []*telemetryv1.Device {
	var out []*telemetryv1.Device
	for _, g := range inv.GPUs {
		d := &telemetryv1.Device{Uuid: g.UUID, Model: g.Name, MemoryTotalBytes: g.MemoryBytes, MigEnabled: g.MIGEnabled,
			Health: protoHealth(g.Health), HealthReason: g.HealthReason}
		if sh, ok := cfg.For(g.UUID, g.Index); ok && !sh.Exclusive {
			d.Sharing, d.Replicas = "timeslice", uint32(sh.Count())
		}
		out = append(out, d)
		for _, m := range g.MIGDevices {
			h := m.Health
			if h == "" {
				h = g.Health // a slice without its own error shares its GPU's
			}
			out = append(out, &telemetryv1.Device{Uuid: m.UUID, ParentUuid: g.UUID, Model: g.Name, MemoryTotalBytes: m.MemoryBytes,
				MigProfile: m.Profile, Health: protoHealth(h), HealthReason: m.HealthReason})
		}
	}
	return out
}

// convertSnapshot is one sweep as the stream's Samples: SM utilization
// from GPM when computed (else NVML's utilization), memory used, power,
// temperature, and each device's processes. Values never read are absent.
func convertSnapshot(snap *telemetry.Snapshot) *telemetryv1.Samples {
	out := &telemetryv1.Samples{TakenUnixNanos: snap.Taken.UnixNano(), Devices: make([]*telemetryv1.DeviceSample, 0, len(snap.Devices))}
	byUUID := make(map[string]*telemetryv1.DeviceSample, len(snap.Devices))
	for i := range snap.Devices {
		d := &snap.Devices[i]
		s := &telemetryv1.DeviceSample{Uuid: d.UUID}
		if v, ok := d.SMActiveRatio(); ok && d.GPM {
			s.SmUtilPercent = ptrTo(min(max(v*100, 0), 100))
		} else if v, ok := d.GPUUtilPercent(); ok {
			s.SmUtilPercent = ptrTo(min(max(v, 0), 100))
		}
		if v, ok := d.MemoryUsedMiB(); ok && v >= 0 {
			s.MemoryUsedBytes = ptrTo(uint64(v * (1 << 20)))
		}
		if v, ok := d.PowerWatts(); ok && v >= 0 {
			s.PowerWatts = ptrTo(v)
		}
		if v, ok := d.TemperatureCelsius(); ok {
			s.TemperatureCelsius = ptrTo(v)
		}
		out.Devices = append(out.Devices, s)
		byUUID[d.UUID] = s
	}
	for _, p := range snap.Processes {
		s := byUUID[p.DeviceUUID]
		if s == nil {
			continue
		}
		s.Processes = append(s.Processes, &telemetryv1.ProcessMemory{Pid: p.PID, UsedBytes: p.UsedBytes, PodUid: p.PodUID,
			Namespace: p.Namespace, Pod: p.Pod, Container: p.Container})
	}
	return out
}

func ptrTo[T any](v T) *T { return &v }

// inventoryEvents are the events from one device list to the next: a
// MIG_LAYOUT event with the new list when devices came or went, then one
// health event per device whose health or its reason changed.
func inventoryEvents(prev, cur []*telemetryv1.Device) []*telemetryv1.Event {
	now := time.Now().UnixNano()
	old := make(map[string]*telemetryv1.Device, len(prev))
	for _, d := range prev {
		old[d.GetUuid()] = d
	}
	var out []*telemetryv1.Event
	layout := len(prev) != len(cur)
	for _, d := range cur {
		o, ok := old[d.GetUuid()]
		if !ok {
			layout = true
			continue
		}
		if o.GetMigEnabled() != d.GetMigEnabled() {
			layout = true
		}
		if o.GetHealth() == d.GetHealth() && o.GetHealthReason() == d.GetHealthReason() {
			continue
		}
		kind := telemetryv1.Event_KIND_HEALTH
		switch {
		case d.GetHealth() == telemetryv1.Health_HEALTH_LOST:
			kind = telemetryv1.Event_KIND_GPU_LOST
		case strings.Contains(strings.ToLower(d.GetHealthReason()), "ecc"):
			kind = telemetryv1.Event_KIND_ECC
		}
		out = append(out, &telemetryv1.Event{Kind: kind, DeviceUuid: d.GetUuid(), AtUnixNanos: now, Health: d.GetHealth(), Reason: d.GetHealthReason()})
	}
	if layout {
		out = append([]*telemetryv1.Event{{Kind: telemetryv1.Event_KIND_MIG_LAYOUT, AtUnixNanos: now, Devices: cur}}, out...)
	}
	return out
}
