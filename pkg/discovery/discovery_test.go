package discovery

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/simnode"
)

func TestInventoryBuiltins(t *testing.T) {
	tests := []struct {
		node      string
		gpus      int
		name      string
		memMiB    uint64
		arch, cc  string
		migCap    bool
		numaOf7   int
		pairLevel map[[2]int]string // expected labels of some pairs
	}{
		{node: "dgx-a100", gpus: 8, name: "NVIDIA A100-SXM4-40GB", memMiB: 40960, arch: "Ampere", cc: "8.0", migCap: true, numaOf7: 1,
			pairLevel: map[[2]int]string{{0, 1}: "NV12", {0, 7}: "NV12"}},
		{node: "dgx-h100", gpus: 8, name: "NVIDIA H100 80GB HBM3", memMiB: 81920, arch: "Hopper", cc: "9.0", migCap: true, numaOf7: 1,
			pairLevel: map[[2]int]string{{0, 1}: "NV18", {3, 4}: "NV18"}},
		{node: "dgx-h200", gpus: 8, name: "NVIDIA H200 141GB HBM3e", memMiB: 144384, arch: "Hopper", cc: "9.0", migCap: true, numaOf7: 1,
			pairLevel: map[[2]int]string{{0, 1}: "NV18"}},
		{node: "pcie-l40s", gpus: 4, name: "NVIDIA L40S", memMiB: 46068, arch: "Ada Lovelace", cc: "8.9", migCap: false, numaOf7: -2,
			pairLevel: map[[2]int]string{{0, 1}: "PIX", {2, 3}: "PIX", {0, 2}: "SYS", {1, 3}: "SYS"}},
	}
	for _, tc := range tests {
		t.Run(tc.node, func(t *testing.T) {
			inv, err := New(simnode.NewBuiltin(tc.node), tc.node, nil).Inventory()
			if err != nil {
				t.Fatal(err)
			}
			if inv.Node.Name != tc.node || inv.Node.DriverVersion == "" || inv.Node.CUDADriverVersion != "12.4" {
				t.Fatalf("node %+v", inv.Node)
			}
			if len(inv.GPUs) != tc.gpus {
				t.Fatalf("%d GPUs, want %d", len(inv.GPUs), tc.gpus)
			}
			for i, g := range inv.GPUs {
				if g.Index != i || g.Name != tc.name || g.MemoryBytes != tc.memMiB<<20 || g.Architecture != tc.arch ||
					g.ComputeCapability != tc.cc || g.MIGCapable != tc.migCap || g.Health != gpu.Healthy || g.PCIBusID == "" ||
					len(g.CPUAffinity) == 0 || g.PCIeGeneration == 0 || g.PowerLimitWatts == 0 {
					t.Fatalf("gpu %d: %+v", i, g)
				}
			}
			if tc.numaOf7 >= 0 && inv.GPUs[7].NUMANode != tc.numaOf7 {
				t.Fatalf("gpu 7 NUMA %d, want %d", inv.GPUs[7].NUMANode, tc.numaOf7)
			}
			if want := tc.gpus * (tc.gpus - 1) / 2; len(inv.Links) != want {
				t.Fatalf("%d links, want %d (every pair)", len(inv.Links), want)
			}
			for pair, want := range tc.pairLevel {
				a, b := inv.GPUs[pair[0]].UUID, inv.GPUs[pair[1]].UUID
				got := ""
				for _, l := range inv.Links {
					if (l.A == a && l.B == b) || (l.A == b && l.B == a) {
						got = l.Label()
					}
				}
				if got != want {
					t.Errorf("link %v = %q, want %q", pair, got, want)
				}
			}
		})
	}
}

func TestInventoryMIGDevices(t *testing.T) {
	n := simnode.NewBuiltin("dgx-h100")
	d, _ := n.DeviceGetHandleByIndex(0)
	d.SetMigMode(nvml.DEVICE_MIG_ENABLE)
	create := func(giIdx, ciIdx int) {
		info, _ := d.GetGpuInstanceProfileInfo(giIdx)
		gi, ret := d.CreateGpuInstance(&info)
		if ret != nvml.SUCCESS {
			t.Fatalf("create GI %d: %v", giIdx, ret)
		}
		ci, _ := gi.GetComputeInstanceProfileInfo(ciIdx, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if _, ret := gi.CreateComputeInstance(&ci); ret != nvml.SUCCESS {
			t.Fatalf("create CI: %v", ret)
		}
	}
	create(nvml.GPU_INSTANCE_PROFILE_3_SLICE, nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE)
	create(nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE)
	create(nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE)

	inv, err := New(n, "x", nil).Inventory()
	if err != nil {
		t.Fatal(err)
	}
	g := inv.GPUs[0]
	if !g.MIGEnabled || g.MIGPending || len(g.MIGDevices) != 3 {
		t.Fatalf("gpu 0 MIG: enabled %v pending %v devices %+v", g.MIGEnabled, g.MIGPending, g.MIGDevices)
	}
	got := map[string]uint64{}
	for _, m := range g.MIGDevices {
		got[m.Profile] = m.MemoryBytes >> 20
		if m.UUID == "" || m.SMCount == 0 || m.PlacementSize == 0 {
			t.Errorf("MIG device %+v", m)
		}
	}
	want := map[string]uint64{"3g.40gb": 40960, "1g.20gb": 20480, "1g.10gb": 10240}
	for p, mem := range want {
		if got[p] != mem {
			t.Errorf("profile %s: %d MiB, want %d (got %v)", p, got[p], mem, got)
		}
	}
	if inv.GPUs[1].MIGEnabled || len(inv.GPUs[1].MIGDevices) != 0 {
		t.Errorf("gpu 1 should be untouched: %+v", inv.GPUs[1])
	}
}

func TestInventoryLostGPU(t *testing.T) {
	n := simnode.NewBuiltin("dgx-h100")
	if err := n.FallOffBus(3); err != nil {
		t.Fatal(err)
	}
	inv, err := New(n, "x", nil).Inventory()
	if err != nil {
		t.Fatalf("one lost GPU failed the whole inventory: %v", err)
	}
	if len(inv.GPUs) != 8 {
		t.Fatalf("%d GPUs, want 8", len(inv.GPUs))
	}
	for i, g := range inv.GPUs {
		want := gpu.Healthy
		if i == 3 {
			want = gpu.Lost
		}
		if g.Health != want {
			t.Errorf("gpu %d health %s, want %s", i, g.Health, want)
		}
	}
	if inv.GPUs[3].UUID == "" {
		t.Error("lost GPU lost its UUID")
	}
	if want := 7 * 6 / 2; len(inv.Links) != want {
		t.Errorf("%d links, want %d among the 7 live GPUs", len(inv.Links), want)
	}
}

func TestInventoryLeavesOutUnsupported(t *testing.T) {
	n := simnode.NewBuiltin("pcie-l40s")
	n.InjectFault("GetNumaNodeId", simnode.FaultSpec{Times: -1, Return: nvml.ERROR_NOT_SUPPORTED})
	n.InjectFault("GetPowerManagementLimit", simnode.FaultSpec{Times: -1, Return: nvml.ERROR_UNKNOWN})
	inv, err := New(n, "x", nil).Inventory()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range inv.GPUs {
		if g.NUMANode != -1 || g.PowerLimitWatts != 0 || g.Name == "" {
			t.Fatalf("gpu %d: NUMA %d power %d name %q", g.Index, g.NUMANode, g.PowerLimitWatts, g.Name)
		}
	}
}

func TestInventoryCountFailure(t *testing.T) {
	n := simnode.NewBuiltin("dgx-h100")
	n.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_UNINITIALIZED }
	if _, err := New(n, "x", nil).Inventory(); err == nil {
		t.Fatal("Inventory succeeded without a GPU count")
	}
}

// TestNVLinkWithoutRemoteType covers drivers that cannot report the remote
// device type: links to a PCI device that is no GPU are NVSwitch links.
func TestNVLinkWithoutRemoteType(t *testing.T) {
	n := simnode.NewBuiltin("dgx-h100")
	for i := range 8 {
		n.Device(i).GetNvLinkRemoteDeviceTypeFunc = func(int) (nvml.IntNvLinkDeviceType, nvml.Return) {
			return nvml.NVLINK_DEVICE_TYPE_UNKNOWN, nvml.ERROR_NOT_SUPPORTED
		}
	}
	inv, err := New(n, "x", nil).Inventory()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range inv.Links {
		if l.Label() != "NV18" {
			t.Fatalf("link %s-%s = %s, want NV18", l.A, l.B, l.Label())
		}
	}
}
