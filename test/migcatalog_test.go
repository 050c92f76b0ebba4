package test

import (
	"regexp"
	"strconv"
	"testing"

	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/pkg/mig"
	"github.com/gpud/gpud/pkg/simnode"
)

// migName is a GPU-instance profile name as go-nvlib prints it:
// <slices>g.<GB>gb, then attributes such as +me.
var migName = regexp.MustCompile(`^([1-8])g\.([0-9]+)gb(\+[a-z.]+)*$`)

// checkCatalog checks the MIG catalog of a MIG-capable GPU is one a layout
// can be planned against: it offers profiles, each with memory, a slice
// count the GPU has, placements inside its memory slices, and a name that
// reads <slices>g.<GB>gb and looks up to the same profile. The real-GPU
// test (make test-gpu) runs it on the driver's catalog.
func checkCatalog(t *testing.T, lib nvml.Interface, g mig.GPUState) {
	t.Helper()
	devlib := device.New(lib)
	cat := g.Catalog
	t.Logf("gpu %d %s: MIG enabled %v, %d instances, %d memory and %d compute slices, profiles %v",
		g.Index, g.Name, g.MIGEnabled, len(g.Instances), cat.MemorySlices, cat.ComputeSlices, cat.Names())
	if len(cat.Profiles) == 0 {
		t.Fatalf("MIG-capable gpu %d %s (MIG enabled %v) reports no MIG profiles", g.Index, g.Name, g.MIGEnabled)
	}
	if cat.ComputeSlices < 1 || cat.ComputeSlices > 7 || cat.MemorySlices < cat.ComputeSlices || cat.MemorySlices > 8 {
		t.Errorf("%d compute and %d memory slices, want 1-7 compute and up to 8 memory", cat.ComputeSlices, cat.MemorySlices)
	}
	dev, ret := lib.DeviceGetHandleByIndex(g.Index)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	mem, ret := dev.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	whole := false
	for i, p := range cat.Profiles {
		if i > 0 && p.Slices < cat.Profiles[i-1].Slices {
			t.Errorf("profile %s listed after %s: want smallest first", p.Name, cat.Profiles[i-1].Name)
		}
		if p.MemoryMiB == 0 || p.MemoryMiB > mem.Total>>20 {
			t.Errorf("%s: memory %d MiB, want 1 to the GPU's %d MiB", p.Name, p.MemoryMiB, mem.Total>>20)
		}
		if p.Slices < 1 || p.Slices > cat.ComputeSlices {
			t.Errorf("%s: %d slices, want 1-%d", p.Name, p.Slices, cat.ComputeSlices)
		}
		whole = whole || p.Slices == cat.ComputeSlices
		if p.MaxCount < 1 || p.MaxCount > 7 {
			t.Errorf("%s: at most %d instances, want 1-7", p.Name, p.MaxCount)
		}
		if len(p.Placements) == 0 {
			t.Errorf("%s: no placements", p.Name)
		}
		for _, pl := range p.Placements {
			if pl.Size < 1 || pl.Start < 0 || pl.Start+pl.Size > cat.MemorySlices {
				t.Errorf("%s: placement %v outside memory slices 0-%d", p.Name, pl, cat.MemorySlices-1)
			}
		}
		m := migName.FindStringSubmatch(p.Name)
		if m == nil || m[1] != strconv.Itoa(p.Slices) {
			t.Errorf("name %q does not read <%d>g.<GB>gb", p.Name, p.Slices)
		}
		if err := devlib.AssertValidMigProfileFormat(p.Name); err != nil {
			t.Errorf("go-nvlib refuses the name %q: %v", p.Name, err)
		}
		if got, err := cat.Lookup(p.Name); err != nil || got.Index != p.Index {
			t.Errorf("Lookup(%q) = profile %d, %v; want profile %d", p.Name, got.Index, err, p.Index)
		}
	}
	if !whole {
		t.Errorf("no profile spans all %d compute slices", cat.ComputeSlices)
	}
	for _, in := range g.Instances {
		if _, err := cat.Lookup(in.Profile); err != nil {
			t.Errorf("instance %s: %v", in, err)
		}
	}
}

// TestSimulatedMIGCatalog runs checkCatalog on every simulated MIG-capable
// GPU: the simulated node stands in for real hardware everywhere else, so
// its catalog must pass what the driver's must.
func TestSimulatedMIGCatalog(t *testing.T) {
	for _, profile := range []string{"dgx-a100", "dgx-h100", "dgx-h200"} {
		t.Run(profile, func(t *testing.T) {
			node := simnode.NewBuiltin(profile)
			st, err := mig.ReadState(node)
			if err != nil {
				t.Fatal(err)
			}
			if len(st.GPUs) == 0 {
				t.Fatal("no GPUs")
			}
			for _, g := range st.GPUs {
				if !g.MIGCapable {
					t.Fatalf("gpu %d %s is not MIG-capable", g.Index, g.Name)
				}
				checkCatalog(t, node, g)
			}
		})
	}
}
