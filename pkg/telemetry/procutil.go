package telemetry

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// callProcessUtilization is the per-process utilization query (per whole
// GPU, with the process list).
const callProcessUtilization = "GetProcessUtilization"

// procUtil is a GPU's per-process SM utilization, read with its process
// list. Only the device's in-flight process call touches seen (one at a
// time); sm is published under the sampler's lock.
type procUtil struct {
	// seen is the newest sample's timestamp (µs): the next read asks only
	// for newer ones.
	seen uint64
	// sm maps pids to their SM utilization in [0,1] at the last read; nil
	// when there is none to report.
	sm map[uint32]float64
}

// read asks the driver for the samples newer than the last read and
// returns each process's latest SM share. busy is whether processes run
// (none: nothing to ask). NOT_FOUND (no newer sample) means the processes
// did not run on the SMs since: an empty, non-nil map. NOT_SUPPORTED (MIG
// mode, where the driver keeps no per-process samples, or a GPU without
// them) returns nil: nothing to report, and no error; it is asked again
// each sweep, so a GPU leaving MIG mode reports again. Any other error
// returns nil and the error, for the sampler's error counts.
func (u *procUtil) read(dev nvml.Device, busy bool) (map[uint32]float64, nvml.Return) {
	if !busy {
		return nil, nvml.SUCCESS
	}
	samples, ret := dev.GetProcessUtilization(u.seen)
	switch ret {
	case nvml.SUCCESS:
	case nvml.ERROR_NOT_FOUND:
		return map[uint32]float64{}, nvml.SUCCESS
	case nvml.ERROR_NOT_SUPPORTED:
		return nil, nvml.SUCCESS
	default:
		return nil, ret
	}
	out := make(map[uint32]float64, len(samples))
	at := make(map[uint32]uint64, len(samples))
	for _, sm := range samples {
		if t, ok := at[sm.Pid]; ok && t >= sm.TimeStamp {
			continue // the driver's buffer holds several samples per pid: keep the latest
		}
		at[sm.Pid] = sm.TimeStamp
		out[sm.Pid] = min(float64(sm.SmUtil), 100) / 100
		u.seen = max(u.seen, sm.TimeStamp)
	}
	return out, nvml.SUCCESS
}
