package simnode

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// migDevice is the nvml.Device handle of one MIG device (a compute instance).
type migDevice struct {
	mock.Device
	ci *computeInstance
}

func newMigDevice(ci *computeInstance) *migDevice {
	h := &migDevice{ci: ci}
	gi := ci.gi
	d := gi.dev
	h.IsMigDeviceHandleFunc = func() (bool, nvml.Return) { return true, nvml.SUCCESS }
	h.GetUUIDFunc = func() (string, nvml.Return) { return ci.uuid, d.lostOr("GetUUID") }
	h.GetDeviceHandleFromMigDeviceHandleFunc = func() (nvml.Device, nvml.Return) { return d, nvml.SUCCESS }
	h.GetGpuInstanceIdFunc = func() (int, nvml.Return) { return gi.id, d.lostOr("GetGpuInstanceId") }
	h.GetComputeInstanceIdFunc = func() (int, nvml.Return) { return ci.id, d.lostOr("GetComputeInstanceId") }
	h.GetNameFunc = func() (string, nvml.Return) { return d.node.model.config.Name, d.lostOr("GetName") }
	h.GetAttributesFunc = func() (nvml.DeviceAttributes, nvml.Return) {
		return nvml.DeviceAttributes{
			MultiprocessorCount:       ci.info.MultiprocessorCount,
			SharedCopyEngineCount:     gi.info.CopyEngineCount,
			SharedDecoderCount:        gi.info.DecoderCount,
			SharedEncoderCount:        gi.info.EncoderCount,
			SharedJpegCount:           gi.info.JpegCount,
			SharedOfaCount:            gi.info.OfaCount,
			GpuInstanceSliceCount:     gi.info.SliceCount,
			ComputeInstanceSliceCount: ci.info.SliceCount,
			MemorySizeMB:              gi.info.MemorySizeMB,
		}, d.lostOr("GetAttributes")
	}
	memory := func() nvml.Memory_v2 {
		total := gi.info.MemorySizeMB << 20
		var used uint64
		for _, p := range d.processes(gi.id) {
			used += p.UsedGpuMemory
		}
		free := uint64(0)
		if total > used {
			free = total - used
		}
		return nvml.Memory_v2{Total: total, Used: used, Free: free}
	}
	h.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		if r := d.lostOr("GetMemoryInfo"); r != nvml.SUCCESS {
			return nvml.Memory{}, r
		}
		m := memory()
		return nvml.Memory{Total: m.Total, Used: m.Used, Free: m.Free}, nvml.SUCCESS
	}
	h.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) {
		if r := d.lostOr("GetMemoryInfo"); r != nvml.SUCCESS {
			return nvml.Memory_v2{}, r
		}
		return memory(), nvml.SUCCESS
	}
	h.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		if r := d.lostOr("GetComputeRunningProcesses"); r != nvml.SUCCESS {
			return nil, r
		}
		return d.processes(gi.id), nvml.SUCCESS
	}
	h.setGPMFuncs()
	fillUnsupported(&h.Device)
	return h
}
