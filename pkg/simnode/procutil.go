package simnode

import (
	"math"
	"sort"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// setProcessUtilizationFunc models nvmlDeviceGetProcessUtilization on a
// whole GPU as the driver behaves: one sample per compute process newer
// than lastSeen (microseconds since the epoch; 0 asks for all the driver
// kept), with its share of the GPU's SM and memory utilization;
// ERROR_NOT_FOUND when there is no newer sample (no process, or lastSeen
// is now); ERROR_NOT_SUPPORTED in MIG mode (the driver keeps no
// per-process samples there). Processes share the GPU's utilization
// equally, MPS clients by their active-thread percentage.
func (d *Device) setProcessUtilizationFunc() {
	d.GetProcessUtilizationFunc = func(lastSeen uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		if r := d.lostOr("GetProcessUtilization"); r != nvml.SUCCESS {
			return nil, r
		}
		util, _, _, _ := d.sample()
		now := uint64(d.node.clock().UnixMicro())
		d.node.mu.Lock()
		defer d.node.mu.Unlock()
		if d.migCurrent == nvml.DEVICE_MIG_ENABLE {
			return nil, nvml.ERROR_NOT_SUPPORTED
		}
		if len(d.procs) == 0 || lastSeen >= now {
			return nil, nvml.ERROR_NOT_FOUND
		}
		pids := make([]uint32, 0, len(d.procs))
		total := 0.0
		for pid, p := range d.procs {
			pids = append(pids, pid)
			total += weight(p)
		}
		sort.Slice(pids, func(i, j int) bool { return pids[i] < pids[j] })
		out := make([]nvml.ProcessUtilizationSample, 0, len(pids))
		for _, pid := range pids {
			share := weight(d.procs[pid]) / total
			out = append(out, nvml.ProcessUtilizationSample{
				Pid: pid, TimeStamp: now,
				SmUtil:  uint32(math.Round(util * 100 * share)),
				MemUtil: uint32(math.Round(util * 60 * share)),
			})
		}
		return out, nvml.SUCCESS
	}
}

// weight is a process's claim on the GPU's time: its MPS active-thread
// percentage, else a full turn.
func weight(p process) float64 {
	if p.mps && p.threadPct > 0 {
		return float64(p.threadPct)
	}
	return 100
}
