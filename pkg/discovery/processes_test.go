package discovery

import (
	"slices"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/pkg/simnode"
)

// TestReadProcesses: a process on a MIG device is read with the device's
// UUID and its GPU's, a process on a whole GPU with the GPU's UUID twice;
// the list is in PID order, and ProcessReader reads the same.
func TestReadProcesses(t *testing.T) {
	n := simnode.NewBuiltin("dgx-h100")
	d, _ := n.DeviceGetHandleByIndex(0)
	if _, ret := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
		t.Fatalf("enable MIG: %v", ret)
	}
	info, _ := d.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_3_SLICE)
	gi, ret := d.CreateGpuInstance(&info)
	if ret != nvml.SUCCESS {
		t.Fatalf("create GI: %v", ret)
	}
	ci, _ := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if _, ret := gi.CreateComputeInstance(&ci); ret != nvml.SUCCESS {
		t.Fatalf("create CI: %v", ret)
	}
	h, _ := d.GetMigDeviceHandleByIndex(0)
	migUUID, _ := h.GetUUID()
	gpu0, _ := d.GetUUID()
	d3, _ := n.DeviceGetHandleByIndex(3)
	gpu3, _ := d3.GetUUID()
	if err := n.AddProcess(3, 101, 2<<30); err != nil {
		t.Fatal(err)
	}
	if err := n.AddMIGProcess(migUUID, 202, 1<<30); err != nil {
		t.Fatal(err)
	}

	want := []Process{
		{PID: 101, GPU: 3, GPUUUID: gpu3, DeviceUUID: gpu3, UsedBytes: 2 << 30},
		{PID: 202, GPU: 0, GPUUUID: gpu0, DeviceUUID: migUUID, UsedBytes: 1 << 30},
	}
	ps, err := ReadProcesses(n)
	if err != nil || !slices.Equal(ps, want) {
		t.Fatalf("ReadProcesses = %+v, %v; want %+v", ps, err, want)
	}
	ps, err = ProcessReader{Lib: n}.GPUProcesses(t.Context())
	if err != nil || !slices.Equal(ps, want) {
		t.Fatalf("ProcessReader.GPUProcesses = %+v, %v; want %+v", ps, err, want)
	}
}
