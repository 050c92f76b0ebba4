package discovery

import (
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/pkg/gpu"
)

// readMIG fills MIG capability, mode and devices.
func (d *Discoverer) readMIG(h nvml.Device, g *gpu.GPU) error {
	current, pending, ret := h.GetMigMode()
	if ret == nvml.ERROR_NOT_SUPPORTED {
		return nil
	}
	if d.optional(g.UUID, "migMode", ret) {
		return nil
	}
	g.MIGCapable = true
	g.MIGEnabled = current == nvml.DEVICE_MIG_ENABLE
	g.MIGPending = pending != current
	if !g.MIGEnabled {
		return nil
	}
	max, ret := h.GetMaxMigDeviceCount()
	if d.optional(g.UUID, "maxMigDeviceCount", ret) {
		return nil
	}
	for i := range max {
		mh, ret := h.GetMigDeviceHandleByIndex(i)
		if ret == nvml.ERROR_NOT_FOUND {
			continue
		}
		if err := nvmlErr(ret); err != nil {
			return fmt.Errorf("discovery: gpu %s mig device %d: %w", g.UUID, i, err)
		}
		m, err := d.readMIGDevice(h, mh, g.MemoryBytes)
		if errors.Is(err, nvml.ERROR_NOT_FOUND) {
			// Destroyed while it was read (a MIG reconfiguration or a
			// DRA unprepare runs beside discovery): it is gone, as if the
			// index had been empty; the next read sees the new layout.
			continue
		}
		if err != nil {
			return fmt.Errorf("discovery: gpu %s mig device %d: %w", g.UUID, i, err)
		}
		g.MIGDevices = append(g.MIGDevices, m)
	}
	return nil
}

func (d *Discoverer) readMIGDevice(parent, mh nvml.Device, parentMemBytes uint64) (gpu.MIGDevice, error) {
	var m gpu.MIGDevice
	var ret nvml.Return
	if m.UUID, ret = mh.GetUUID(); ret != nvml.SUCCESS {
		return m, fmt.Errorf("uuid: %w", ret)
	}
	if m.GPUInstanceID, ret = mh.GetGpuInstanceId(); ret != nvml.SUCCESS {
		return m, fmt.Errorf("gpu instance id: %w", ret)
	}
	if m.ComputeInstanceID, ret = mh.GetComputeInstanceId(); ret != nvml.SUCCESS {
		return m, fmt.Errorf("compute instance id: %w", ret)
	}
	attrs, ret := mh.GetAttributes()
	if ret != nvml.SUCCESS {
		return m, fmt.Errorf("attributes: %w", ret)
	}
	m.MemoryBytes = attrs.MemorySizeMB << 20
	m.SMCount = int(attrs.MultiprocessorCount)

	gi, ret := parent.GetGpuInstanceById(m.GPUInstanceID)
	if ret != nvml.SUCCESS {
		return m, fmt.Errorf("gpu instance %d: %w", m.GPUInstanceID, ret)
	}
	giInfo, ret := gi.GetInfo()
	if ret != nvml.SUCCESS {
		return m, fmt.Errorf("gpu instance %d info: %w", m.GPUInstanceID, ret)
	}
	m.PlacementStart, m.PlacementSize = int(giInfo.Placement.Start), int(giInfo.Placement.Size)
	ci, ret := gi.GetComputeInstanceById(m.ComputeInstanceID)
	if ret != nvml.SUCCESS {
		return m, fmt.Errorf("compute instance %d: %w", m.ComputeInstanceID, ret)
	}
	ciInfo, ret := ci.GetInfo()
	if ret != nvml.SUCCESS {
		return m, fmt.Errorf("compute instance %d info: %w", m.ComputeInstanceID, ret)
	}
	giIdx, err := giProfileIndex(parent, giInfo.ProfileId)
	if err != nil {
		return m, err
	}
	ciIdx, err := ciProfileIndex(gi, ciInfo.ProfileId)
	if err != nil {
		return m, err
	}
	p, err := d.devlib.NewMigProfile(giIdx, ciIdx, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, attrs.MemorySizeMB, parentMemBytes)
	if err != nil {
		return m, fmt.Errorf("profile name: %w", err)
	}
	m.Profile = p.String()
	return m, nil
}

var errProfileNotFound = errors.New("discovery: profile not found")

// giProfileIndex maps a GPU-instance profile ID (what GpuInstanceInfo
// carries) to the index GetGpuInstanceProfileInfo takes.
func giProfileIndex(h nvml.Device, id uint32) (int, error) {
	for i := range nvml.GPU_INSTANCE_PROFILE_COUNT {
		info, ret := h.GetGpuInstanceProfileInfo(i)
		if ret == nvml.SUCCESS && info.Id == id {
			return i, nil
		}
	}
	return 0, fmt.Errorf("%w: gpu instance profile id %d", errProfileNotFound, id)
}

func ciProfileIndex(gi nvml.GpuInstance, id uint32) (int, error) {
	for i := range nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
		info, ret := gi.GetComputeInstanceProfileInfo(i, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret == nvml.SUCCESS && info.Id == id {
			return i, nil
		}
	}
	return 0, fmt.Errorf("%w: compute instance profile id %d", errProfileNotFound, id)
}
