package dra

import (
	"errors"
	"maps"
	"sync"
	"testing"

	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/timeslice"
)

// fixedSharing is a sharing config that never changes.
type fixedSharing struct{ c timeslice.Config }

func (f fixedSharing) Sharing() timeslice.Config       { return f.c }
func (f fixedSharing) SharingChanged() <-chan struct{} { return nil }

var testCatalog = MIGCatalog{MemorySlices: 8, ComputeSlices: 7, Profiles: []MIGProfile{
	{Name: "1g.10gb", ComputeSlices: 1, MemoryBytes: 10 << 30, Placements: []Placement{{Start: 0, Size: 1}}},
}}

func TestNodeStateSource(t *testing.T) {
	inv := gpu.Inventory{GPUs: []gpu.GPU{
		{UUID: "GPU-h", Index: 0, MIGCapable: true, Architecture: "Hopper"},
		{UUID: "GPU-a", Index: 1, MIGCapable: true, Architecture: "Ampere"},
		{UUID: "GPU-l", Index: 2, Architecture: "Ada Lovelace"},
	}}
	var mu sync.Mutex
	catReads, rootReads := 0, map[string]int{}
	s := NewNodeStateSource(NodeStateConfig{
		MIGCatalogs: func() (map[string]MIGCatalog, error) {
			mu.Lock()
			defer mu.Unlock()
			catReads++
			// GPU-a's catalog has no profiles (not read yet) and the read
			// fails: what came back is kept, GPU-a is read again later.
			return map[string]MIGCatalog{"GPU-h": testCatalog, "GPU-a": {}}, errors.New("nvml: partial")
		},
		PCIeRoot: func(g gpu.GPU) (string, error) {
			mu.Lock()
			defer mu.Unlock()
			rootReads[g.UUID]++
			if g.Index == 2 {
				return "", errors.New("no such device")
			}
			return "pci0000:0" + string(rune('0'+g.Index)), nil
		},
		Sharing: fixedSharing{timeslice.Config{Devices: map[string]timeslice.Sharing{"1": {Exclusive: true}}}},
	})
	for range 2 {
		st := s.NodeState(inv)
		if len(st.Inventory.GPUs) != len(inv.GPUs) {
			t.Fatalf("NodeState's inventory has %d GPUs, want %d: the state must carry it", len(st.Inventory.GPUs), len(inv.GPUs))
		}
		if got := len(st.MIG); got != 1 {
			t.Fatalf("catalogs for %d GPUs, want 1 (GPU-h)", got)
		}
		if c := st.MIG["GPU-h"]; !c.LiveModeChange || len(c.Profiles) != 1 {
			t.Errorf("GPU-h catalog %+v, want its profile and live mode change (Hopper)", c)
		}
		if want := map[string]string{"GPU-h": "pci0000:00", "GPU-a": "pci0000:01"}; !maps.Equal(st.PCIeRoots, want) {
			t.Errorf("PCIeRoots = %v, want %v (GPU-l unreadable: none)", st.PCIeRoots, want)
		}
		if want := map[string]bool{"GPU-a": true}; !maps.Equal(st.ExclusiveOnly, want) {
			t.Errorf("ExclusiveOnly = %v, want %v", st.ExclusiveOnly, want)
		}
	}
	if catReads != 2 {
		t.Errorf("catalogs read %d times, want 2 (GPU-a still has none)", catReads)
	}
	if want := map[string]int{"GPU-h": 1, "GPU-a": 1, "GPU-l": 1}; !maps.Equal(rootReads, want) {
		t.Errorf("roots read %v, want once per GPU (a failure too)", rootReads)
	}
}

// TestNodeStateSourceNone: without readers and sharing, no catalogs, roots
// or exclusive GPUs.
func TestNodeStateSourceNone(t *testing.T) {
	st := NewNodeStateSource(NodeStateConfig{}).NodeState(gpu.Inventory{GPUs: []gpu.GPU{{UUID: "GPU-h", MIGCapable: true}}})
	if len(st.MIG) != 0 || len(st.PCIeRoots) != 0 || st.ExclusiveOnly != nil {
		t.Fatalf("NodeState = %+v, want nothing", st)
	}
}
