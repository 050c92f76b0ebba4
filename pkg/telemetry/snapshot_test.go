package telemetry_test

import (
	"math"
	"testing"
	"time"

	"github.com/gpud/gpud/pkg/telemetry"
)

// fieldIndex is the index of a DCGM field in DeviceSnapshot.Values.
func fieldIndex(t *testing.T, name string) int {
	t.Helper()
	for i := 0; telemetry.FieldName(i) != ""; i++ {
		if telemetry.FieldName(i) == name {
			return i
		}
	}
	t.Fatalf("no field %s", name)
	return -1
}

func TestDeviceSnapshotAccessors(t *testing.T) {
	now := time.Now()
	var d telemetry.DeviceSnapshot
	set := func(name string, v float64) {
		i := fieldIndex(t, name)
		d.Values[i], d.At[i] = v, now
	}
	set("DCGM_FI_DEV_GPU_UTIL", 55)
	set("DCGM_FI_PROF_SM_ACTIVE", 0.5)
	set("DCGM_FI_DEV_FB_USED", 1024)
	set("DCGM_FI_DEV_GPU_TEMP", math.NaN())
	d.Values[fieldIndex(t, "DCGM_FI_DEV_POWER_USAGE")] = 300 // never read
	for _, tc := range []struct {
		name   string
		get    func() (float64, bool)
		want   float64
		wantOK bool
	}{
		{name: "util", get: d.GPUUtilPercent, want: 55, wantOK: true},
		{name: "sm active", get: d.SMActiveRatio, want: 0.5, wantOK: true},
		{name: "memory used", get: d.MemoryUsedMiB, want: 1024, wantOK: true},
		{name: "power never read", get: d.PowerWatts},
		{name: "temperature not finite", get: d.TemperatureCelsius},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, ok := tc.get()
			if ok != tc.wantOK || (ok && v != tc.want) {
				t.Errorf("= %v, %v; want %v, %v", v, ok, tc.want, tc.wantOK)
			}
		})
	}
	d.Unsupported[fieldIndex(t, "DCGM_FI_DEV_GPU_UTIL")] = true
	if _, ok := d.GPUUtilPercent(); ok {
		t.Error("an unsupported field reads as set")
	}
}
