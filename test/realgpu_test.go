//go:build gpu

// Tests against the real NVML library on a machine with NVIDIA GPUs:
// `make test-gpu` (go test -tags gpu ./test -run RealGPU). They are the
// device check the simulated node stands in for everywhere else.
package test

import (
	"fmt"
	"strings"
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

// TestRealGPUMIGCatalog reads the MIG catalog the driver reports and checks
// it is one a layout can be planned against (see checkCatalog).
func TestRealGPUMIGCatalog(t *testing.T) {
	lib := realNVML(t)
	st, err := mig.ReadState(lib)
	if err != nil {
		t.Fatal(err)
	}
	var capable int
	var names []string
	for _, g := range st.GPUs {
		names = append(names, g.Name)
		if !g.MIGCapable {
			continue
		}
		capable++
		t.Run(fmt.Sprintf("gpu%d", g.Index), func(t *testing.T) {
			if len(g.Catalog.Profiles) == 0 && !g.MIGEnabled {
				// NVML may list profiles only in MIG mode; changing the
				// mode of a shared machine is not a test's to do.
				t.Skipf("gpu %d %s: MIG mode is off and the driver lists no profiles; enable it (nvidia-smi -i %d -mig 1) to check the catalog", g.Index, g.Name, g.Index)
			}
			checkCatalog(t, lib, g)
		})
	}
	if capable == 0 {
		t.Skipf("no MIG-capable GPU here (%s): the catalog exists only on A100, A30, H100, H200 and later data-center GPUs", strings.Join(names, ", "))
	}
}
