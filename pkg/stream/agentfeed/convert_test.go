package agentfeed

import (
	"strings"
	"testing"
	"time"

	telemetryv1 "github.com/gpud/gpud/api/telemetry/v1"
	"github.com/gpud/gpud/pkg/stream"
	"github.com/gpud/gpud/pkg/telemetry"
)

func TestInventoryEvents(t *testing.T) {
	healthy := telemetryv1.Health_HEALTH_HEALTHY
	prev := []*telemetryv1.Device{{Uuid: "GPU-0", Health: healthy}, {Uuid: "GPU-1", Health: healthy}, {Uuid: "GPU-2", Health: healthy}}
	cur := []*telemetryv1.Device{{Uuid: "GPU-0", Health: telemetryv1.Health_HEALTH_LOST, HealthReason: "gpu lost"},
		{Uuid: "GPU-1", Health: telemetryv1.Health_HEALTH_UNHEALTHY, HealthReason: "double-bit ECC error"}, {Uuid: "GPU-2", Health: healthy}}
	evs := inventoryEvents(prev, cur)
	var got []string
	for _, ev := range evs {
		got = append(got, ev.GetKind().String()+"/"+ev.GetDeviceUuid())
	}
	if strings.Join(got, " ") != "KIND_GPU_LOST/GPU-0 KIND_ECC/GPU-1" {
		t.Errorf("events %v", got)
	}
	// A new reason on a GPU that stays unhealthy goes out too.
	again := []*telemetryv1.Device{cur[0], {Uuid: "GPU-1", Health: telemetryv1.Health_HEALTH_UNHEALTHY, HealthReason: "xid 63"}, cur[2]}
	if evs := inventoryEvents(cur, again); len(evs) != 1 || evs[0].GetReason() != "xid 63" {
		t.Errorf("a new reason: events %v, want one with xid 63", evs)
	}
	cur = append(cur, &telemetryv1.Device{Uuid: "MIG-0", ParentUuid: "GPU-2", Health: healthy})
	evs = inventoryEvents(prev, cur)
	if len(evs) != 3 || evs[0].GetKind() != telemetryv1.Event_KIND_MIG_LAYOUT || len(evs[0].GetDevices()) != 4 {
		t.Errorf("a new MIG device: events %v, want MIG_LAYOUT with 4 devices first", evs)
	}
}

// fieldIndex is the index of a DCGM field in DeviceSnapshot.Values (the
// test sets values by name; the code reads them through accessors).
func fieldIndex(t *testing.T, name string) int {
	t.Helper()
	for i := 0; telemetry.FieldName(i) != ""; i++ {
		if telemetry.FieldName(i) == name {
			return i
		}
	}
	t.Fatalf("no field %s: a DCGM name changed", name)
	return -1
}

func TestConvertSnapshotSkipsUnreadValues(t *testing.T) {
	util, fb, power := fieldIndex(t, "DCGM_FI_DEV_GPU_UTIL"), fieldIndex(t, "DCGM_FI_DEV_FB_USED"), fieldIndex(t, "DCGM_FI_DEV_POWER_USAGE")
	now := time.Now()
	d := telemetry.DeviceSnapshot{UUID: "GPU-0"}
	d.Values[util], d.At[util] = 55, now
	d.Values[fb], d.At[fb] = 1024, now // MiB
	d.Values[power] = 300              // never read
	s := convertSnapshot(&telemetry.Snapshot{Taken: now, Devices: []telemetry.DeviceSnapshot{d},
		Processes: []telemetry.ProcessSnapshot{{DeviceUUID: "GPU-0", PID: 7, UsedBytes: 1 << 30, PodUID: "pod-1"}}})
	got := s.GetDevices()[0]
	if got.GetSmUtilPercent() != 55 || got.GetMemoryUsedBytes() != 1<<30 || got.PowerWatts != nil || got.TemperatureCelsius != nil {
		t.Errorf("sample %v: want util 55, 1 GiB used, no power or temperature", got)
	}
	if len(got.GetProcesses()) != 1 || got.GetProcesses()[0].GetPodUid() != "pod-1" {
		t.Errorf("processes %v", got.GetProcesses())
	}
}

func TestConvertSnapshotPrefersGPM(t *testing.T) {
	util, sm := fieldIndex(t, "DCGM_FI_DEV_GPU_UTIL"), fieldIndex(t, "DCGM_FI_PROF_SM_ACTIVE")
	now := time.Now()
	d := telemetry.DeviceSnapshot{UUID: "GPU-0"}
	d.Values[util], d.At[util] = 90, now
	d.Values[sm], d.At[sm] = 0.25, now
	for _, tc := range []struct {
		name string
		gpm  bool
		want float64
	}{
		{name: "GPM computed", gpm: true, want: 25},
		{name: "GPM not yet computed", want: 90},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d.GPM = tc.gpm
			s := convertSnapshot(&telemetry.Snapshot{Taken: now, Devices: []telemetry.DeviceSnapshot{d}})
			if got := s.GetDevices()[0].GetSmUtilPercent(); got != tc.want {
				t.Errorf("SM util %v, want %v", got, tc.want)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	if _, err := New(Config{}, stream.Config{}); err == nil || !strings.Contains(err.Error(), "missing Inventory") || !strings.Contains(err.Error(), "missing Snapshot") {
		t.Errorf("New with an empty Config = %v, want both missing functions named", err)
	}
}
