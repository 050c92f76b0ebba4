package simnode

import (
	"errors"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// enableMIG turns MIG on for GPU i and applies it (with a reset on models
// that need one).
func enableMIG(t *testing.T, n *Node, i int) nvml.Device {
	t.Helper()
	d, _ := n.DeviceGetHandleByIndex(i)
	if _, ret := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
		t.Fatalf("SetMigMode: %v", ret)
	}
	if cur, _, _ := d.GetMigMode(); cur != nvml.DEVICE_MIG_ENABLE {
		if err := n.ResetGPU(i); err != nil {
			t.Fatalf("ResetGPU: %v", err)
		}
	}
	return d
}

// profileByName returns the GPU-instance profile info for a short name like
// "3g" (slices) or "1g.20gb"-style index constant.
func profile(t *testing.T, d nvml.Device, idx int) *nvml.GpuInstanceProfileInfo {
	t.Helper()
	info, ret := d.GetGpuInstanceProfileInfo(idx)
	if ret != nvml.SUCCESS {
		t.Fatalf("GetGpuInstanceProfileInfo(%d): %v", idx, ret)
	}
	return &info
}

func TestMIGPlacementRules(t *testing.T) {
	const (
		p1g   = nvml.GPU_INSTANCE_PROFILE_1_SLICE
		p1g2x = nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2
		p2g   = nvml.GPU_INSTANCE_PROFILE_2_SLICE
		p3g   = nvml.GPU_INSTANCE_PROFILE_3_SLICE
		p4g   = nvml.GPU_INSTANCE_PROFILE_4_SLICE
		p7g   = nvml.GPU_INSTANCE_PROFILE_7_SLICE
	)
	tests := []struct {
		name    string
		node    string
		create  []int       // profiles created in order, all must succeed
		then    int         // the profile tried last
		want    nvml.Return // its result
		wantMax int         // with want==SUCCESS: how many more of `then` fit (-1: skip)
	}{
		{name: "a100 seven 1g.5gb", node: "dgx-a100", create: []int{p1g, p1g, p1g, p1g, p1g, p1g, p1g}, then: p1g, want: nvml.ERROR_INSUFFICIENT_RESOURCES},
		{name: "a100 three 2g.10gb", node: "dgx-a100", create: []int{p2g, p2g, p2g}, then: p2g, want: nvml.ERROR_INSUFFICIENT_RESOURCES},
		{name: "a100 two 3g.20gb", node: "dgx-a100", create: []int{p3g, p3g}, then: p1g, want: nvml.ERROR_INSUFFICIENT_RESOURCES},
		{name: "a100 4g then 3g fits", node: "dgx-a100", create: []int{p4g}, then: p3g, want: nvml.SUCCESS},
		{name: "a100 4g+3g is full", node: "dgx-a100", create: []int{p4g, p3g}, then: p1g, want: nvml.ERROR_INSUFFICIENT_RESOURCES},
		{name: "a100 one 7g", node: "dgx-a100", create: []int{p7g}, then: p1g, want: nvml.ERROR_INSUFFICIENT_RESOURCES},
		{name: "a100 3g+2g+1g+1g", node: "dgx-a100", create: []int{p3g, p2g, p1g}, then: p1g, want: nvml.SUCCESS},
		{name: "a100 no second 4g", node: "dgx-a100", create: []int{p4g}, then: p4g, want: nvml.ERROR_INSUFFICIENT_RESOURCES},
		{name: "h100 four 1g.20gb", node: "dgx-h100", create: []int{p1g2x, p1g2x, p1g2x, p1g2x}, then: p1g2x, want: nvml.ERROR_INSUFFICIENT_RESOURCES},
		{name: "h100 1g.20gb blocks 7g", node: "dgx-h100", create: []int{p1g2x}, then: p7g, want: nvml.ERROR_INSUFFICIENT_RESOURCES},
		{name: "h100 seven 1g.10gb", node: "dgx-h100", create: []int{p1g, p1g, p1g, p1g, p1g, p1g, p1g}, then: p2g, want: nvml.ERROR_INSUFFICIENT_RESOURCES},
		{name: "h200 3g then 3g", node: "dgx-h200", create: []int{p3g}, then: p3g, want: nvml.SUCCESS},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := NewBuiltin(tc.node)
			d := enableMIG(t, n, 0)
			for _, p := range tc.create {
				if _, ret := d.CreateGpuInstance(profile(t, d, p)); ret != nvml.SUCCESS {
					t.Fatalf("create profile %d: %v", p, ret)
				}
			}
			if _, ret := d.CreateGpuInstance(profile(t, d, tc.then)); ret != tc.want {
				t.Fatalf("create profile %d last = %v, want %v", tc.then, ret, tc.want)
			}
		})
	}
}

func TestMIGNeedsMIGMode(t *testing.T) {
	n := NewBuiltin("dgx-h100")
	d, _ := n.DeviceGetHandleByIndex(0)
	if _, ret := d.CreateGpuInstance(profile(t, d, nvml.GPU_INSTANCE_PROFILE_1_SLICE)); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Fatalf("create with MIG disabled = %v, want ERROR_NOT_SUPPORTED", ret)
	}
	l40s := NewBuiltin("pcie-l40s")
	d, _ = l40s.DeviceGetHandleByIndex(0)
	if _, _, ret := d.GetMigMode(); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Fatalf("L40S GetMigMode = %v, want ERROR_NOT_SUPPORTED", ret)
	}
}

func TestMIGModePendingUntilReset(t *testing.T) {
	n := NewBuiltin("dgx-a100") // A100 needs a GPU reset to enable MIG
	d, _ := n.DeviceGetHandleByIndex(2)
	act, ret := d.SetMigMode(nvml.DEVICE_MIG_ENABLE)
	if ret != nvml.SUCCESS || act != nvml.ERROR_RESET_REQUIRED {
		t.Fatalf("SetMigMode = (%v, %v), want (ERROR_RESET_REQUIRED, SUCCESS)", act, ret)
	}
	if cur, pend, _ := d.GetMigMode(); cur != 0 || pend != 1 {
		t.Fatalf("GetMigMode = %d,%d, want current 0 pending 1", cur, pend)
	}
	if err := n.AddProcess(2, 100, 1<<30); err != nil {
		t.Fatal(err)
	}
	if err := n.ResetGPU(2); err == nil {
		t.Fatal("ResetGPU with a running process succeeded")
	}
	n.RemoveProcess(100)
	if err := n.ResetGPU(2); err != nil {
		t.Fatal(err)
	}
	if cur, pend, _ := d.GetMigMode(); cur != 1 || pend != 1 {
		t.Fatalf("after reset GetMigMode = %d,%d, want 1,1", cur, pend)
	}

	h := NewBuiltin("dgx-h100") // Hopper switches without a reset when idle
	hd, _ := h.DeviceGetHandleByIndex(0)
	if act, _ := hd.SetMigMode(nvml.DEVICE_MIG_ENABLE); act != nvml.SUCCESS {
		t.Fatalf("H100 SetMigMode activation = %v, want SUCCESS", act)
	}
}

func TestMIGDevicesAndHandles(t *testing.T) {
	n := NewBuiltin("dgx-h100")
	d := enableMIG(t, n, 1)
	if max, ret := d.GetMaxMigDeviceCount(); ret != nvml.SUCCESS || max != 7 {
		t.Fatalf("GetMaxMigDeviceCount = %d, %v", max, ret)
	}
	gi, ret := d.CreateGpuInstance(profile(t, d, nvml.GPU_INSTANCE_PROFILE_3_SLICE))
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	ciInfo, ret := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if _, ret := gi.CreateComputeInstance(&ciInfo); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if _, ret := gi.CreateComputeInstance(&ciInfo); ret != nvml.ERROR_INSUFFICIENT_RESOURCES {
		t.Fatalf("second full CI = %v, want ERROR_INSUFFICIENT_RESOURCES", ret)
	}
	h, ret := d.GetMigDeviceHandleByIndex(0)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if _, ret := d.GetMigDeviceHandleByIndex(1); ret != nvml.ERROR_NOT_FOUND {
		t.Fatalf("handle 1 = %v, want ERROR_NOT_FOUND", ret)
	}
	uuid, _ := h.GetUUID()
	if uuid[:4] != "MIG-" {
		t.Fatalf("MIG UUID %q", uuid)
	}
	if again, ret := n.DeviceGetHandleByUUID(uuid); ret != nvml.SUCCESS || again != h {
		t.Fatalf("DeviceGetHandleByUUID(%s) = %v", uuid, ret)
	}
	attrs, _ := h.GetAttributes()
	if attrs.MemorySizeMB != 40960 || attrs.GpuInstanceSliceCount != 3 {
		t.Fatalf("attributes %+v", attrs)
	}
	if err := n.AddMIGProcess(uuid, 42, 1<<30); err != nil {
		t.Fatal(err)
	}
	// cudaMalloc in the slice: up to its 40 GiB, not a byte more.
	if err := n.Allocate(42, 39<<30); err != nil {
		t.Fatalf("allocate up to the slice's memory: %v", err)
	}
	if err := n.Allocate(42, 1); !errors.Is(err, nvml.ERROR_MEMORY) {
		t.Fatalf("allocate beyond the slice's memory = %v, want ERROR_MEMORY", err)
	}
	ci, _ := gi.GetComputeInstanceById(0)
	if ret := ci.Destroy(); ret != nvml.ERROR_IN_USE {
		t.Fatalf("destroy busy CI = %v, want ERROR_IN_USE", ret)
	}
	if ret := gi.Destroy(); ret != nvml.ERROR_IN_USE {
		t.Fatalf("destroy GI with CI = %v, want ERROR_IN_USE", ret)
	}
	if _, ret := d.SetMigMode(nvml.DEVICE_MIG_DISABLE); ret != nvml.ERROR_IN_USE {
		t.Fatalf("disable MIG with instances = %v, want ERROR_IN_USE", ret)
	}
	n.RemoveProcess(42)
	if ret := ci.Destroy(); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if ret := gi.Destroy(); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
}

func TestStateFileKeepsLayout(t *testing.T) {
	path := t.TempDir() + "/state.json"
	n, err := New(builtins["dgx-h100"], WithStateFile(path))
	if err != nil {
		t.Fatal(err)
	}
	d := enableMIG(t, n, 0)
	gi, _ := d.CreateGpuInstance(profile(t, d, nvml.GPU_INSTANCE_PROFILE_2_SLICE))
	ciInfo, _ := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	gi.CreateComputeInstance(&ciInfo)
	h, _ := d.GetMigDeviceHandleByIndex(0)
	wantUUID, _ := h.GetUUID()

	restarted, err := New(builtins["dgx-h100"], WithStateFile(path))
	if err != nil {
		t.Fatal(err)
	}
	d2, _ := restarted.DeviceGetHandleByIndex(0)
	if cur, _, _ := d2.GetMigMode(); cur != nvml.DEVICE_MIG_ENABLE {
		t.Fatal("MIG mode lost across restart")
	}
	h2, ret := d2.GetMigDeviceHandleByIndex(0)
	if ret != nvml.SUCCESS {
		t.Fatalf("MIG device lost across restart: %v", ret)
	}
	if got, _ := h2.GetUUID(); got != wantUUID {
		t.Fatalf("MIG UUID %s after restart, want %s", got, wantUUID)
	}
	if _, err := New(builtins["dgx-a100"], WithStateFile(path)); err == nil {
		t.Fatal("state file of another node accepted")
	}
}
