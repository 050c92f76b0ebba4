package telemetry

import (
	"maps"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// The driver's buffer may hold several samples per process and only
// those after the last read count; no newer sample means no SM time.
func TestProcUtilRead(t *testing.T) {
	var asked []uint64
	ret := nvml.SUCCESS
	samples := []nvml.ProcessUtilizationSample{
		{Pid: 1, TimeStamp: 100, SmUtil: 90},
		{Pid: 1, TimeStamp: 200, SmUtil: 30}, // newer: wins
		{Pid: 2, TimeStamp: 150, SmUtil: 120},
	}
	dev := &mock.Device{GetProcessUtilizationFunc: func(last uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		asked = append(asked, last)
		if ret != nvml.SUCCESS {
			return nil, ret
		}
		return samples, nvml.SUCCESS
	}}
	var u procUtil
	if got, r := u.read(dev, false); got != nil || r != nvml.SUCCESS || len(asked) != 0 {
		t.Errorf("no process: %v %v, asked %v; want nothing asked", got, r, asked)
	}
	got, r := u.read(dev, true)
	if want := map[uint32]float64{1: 0.3, 2: 1}; r != nvml.SUCCESS || !maps.Equal(got, want) {
		t.Errorf("read = %v %v, want %v (latest per pid, capped at 1)", got, r, want)
	}
	ret = nvml.ERROR_NOT_FOUND
	if got, r := u.read(dev, true); r != nvml.SUCCESS || got == nil || len(got) != 0 {
		t.Errorf("no newer sample: %v %v, want an empty map (no SM time)", got, r)
	}
	if asked[len(asked)-1] != 200 {
		t.Errorf("second read asked after %d, want 200 (the newest seen)", asked[len(asked)-1])
	}
	ret = nvml.ERROR_NOT_SUPPORTED
	if got, r := u.read(dev, true); got != nil || r != nvml.SUCCESS {
		t.Errorf("MIG mode: %v %v, want nothing and no error", got, r)
	}
	ret = nvml.ERROR_UNKNOWN
	if got, r := u.read(dev, true); got != nil || r != nvml.ERROR_UNKNOWN {
		t.Errorf("driver error: %v %v, want it returned", got, r)
	}
}
