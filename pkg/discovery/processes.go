package discovery

import (
	"context"
	"fmt"
	"sort"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/pkg/usage"
)

// Process is a compute process on a GPU or a MIG device.
type Process = usage.Process

// ProcessReader is the node's one reader of GPU processes: the memory
// watchdog, the MIG service and the CLI all read through it.
type ProcessReader struct{ Lib nvml.Interface }

// GPUProcesses lists the processes on every GPU and MIG device (see
// [ReadProcesses]).
func (r ProcessReader) GPUProcesses(context.Context) ([]Process, error) { return ReadProcesses(r.Lib) }

// ReadProcesses lists the compute processes on every GPU and MIG device. A
// GPU that cannot be read (lost, say) is skipped; the error of the first
// such GPU is returned with what could be read.
func ReadProcesses(lib nvml.Interface) ([]Process, error) {
	n, ret := lib.DeviceGetCount()
	if err := nvmlErr(ret); err != nil {
		return nil, fmt.Errorf("discovery: count GPUs: %w", err)
	}
	var out []Process
	var firstErr error
	for i := range n {
		ps, err := gpuProcesses(lib, i)
		if err != nil && firstErr == nil {
			firstErr = fmt.Errorf("discovery: processes on gpu %d: %w", i, err)
		}
		out = append(out, ps...)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].PID < out[b].PID })
	return out, firstErr
}

func gpuProcesses(lib nvml.Interface, i int) ([]Process, error) {
	dev, ret := lib.DeviceGetHandleByIndex(i)
	if err := nvmlErr(ret); err != nil {
		return nil, err
	}
	return GPUProcesses(dev, i)
}

// GPUProcesses lists the compute processes on one GPU (index i) and, in
// MIG mode, on each of its MIG devices. It is the one way the agent reads
// processes: [ReadProcesses] calls it for every GPU, and telemetry calls
// it per GPU inside its timed sweep. What could be read comes back with
// the first error.
func GPUProcesses(dev nvml.Device, i int) ([]Process, error) {
	uuid, ret := dev.GetUUID()
	if err := nvmlErr(ret); err != nil {
		return nil, err
	}
	cur, _, ret := dev.GetMigMode()
	if ret != nvml.SUCCESS || cur != nvml.DEVICE_MIG_ENABLE {
		infos, ret := dev.GetComputeRunningProcesses()
		if err := nvmlErr(ret); err != nil {
			return nil, err
		}
		out := make([]Process, 0, len(infos))
		for _, p := range infos {
			out = append(out, Process{PID: p.Pid, GPU: i, GPUUUID: uuid, DeviceUUID: uuid, UsedBytes: p.UsedGpuMemory})
		}
		return out, nil
	}
	maxN, ret := dev.GetMaxMigDeviceCount()
	if err := nvmlErr(ret); err != nil {
		return nil, err
	}
	var out []Process
	for m := range maxN {
		h, ret := dev.GetMigDeviceHandleByIndex(m)
		if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue
		}
		if err := nvmlErr(ret); err != nil {
			return out, err
		}
		mu, ret := h.GetUUID()
		if err := nvmlErr(ret); err != nil {
			return out, err
		}
		infos, ret := h.GetComputeRunningProcesses()
		if err := nvmlErr(ret); err != nil {
			return out, err
		}
		for _, p := range infos {
			out = append(out, Process{PID: p.Pid, GPU: i, GPUUUID: uuid, DeviceUUID: mu, UsedBytes: p.UsedGpuMemory})
		}
	}
	return out, nil
}
