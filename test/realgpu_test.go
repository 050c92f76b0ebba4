//go:build gpu

// Tests against the real NVML library on a machine with NVIDIA GPUs:
// `make test-gpu` (go test -tags gpu ./test -run RealGPU). They are the
// device check the simulated node stands in for everywhere else.
package test

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/mig"
)

func realNVML(t *testing.T) nvml.Interface {
	t.Helper()
	lib := nvml.New()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Skipf("no NVML here: %v", ret)
	}
	t.Cleanup(func() { _ = lib.Shutdown() })
	return lib
}

func TestRealGPUInventory(t *testing.T) {
	lib := realNVML(t)
	inv, err := discovery.New(lib, "real", nil).Inventory()
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.GPUs) == 0 {
		t.Fatal("NVML reports no GPUs")
	}
	for _, g := range inv.GPUs {
		t.Logf("gpu %d %s %s mem=%d MiB bus=%s numa=%d cc=%s mig=%v/%v pending=%v migDevices=%d",
			g.Index, g.UUID, g.Name, g.MemoryBytes>>20, g.PCIBusID, g.NUMANode, g.ComputeCapability, g.MIGCapable, g.MIGEnabled, g.MIGPending, len(g.MIGDevices))
		if g.UUID == "" || g.MemoryBytes == 0 || g.PCIBusID == "" || g.Name == "" {
			t.Errorf("gpu %d incomplete: %+v", g.Index, g)
		}
	}
	if want := len(inv.GPUs) * (len(inv.GPUs) - 1) / 2; len(inv.Links) != want {
		t.Errorf("%d links, want %d", len(inv.Links), want)
	}
}

func TestRealGPUMIGCatalog(t *testing.T) {
	lib := realNVML(t)
	st, err := mig.ReadState(lib)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range st.GPUs {
		t.Logf("gpu %s: MIG enabled %v, %d instances", g.UUID, g.MIGEnabled, len(g.Instances))
	}
}
