package mig

import (
	"errors"
	"os"
	"slices"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/simnode"
)

// slicesRig is an H100 node (MIG mode turns on without a reset), MIG off,
// with a journalled service and its slice manager; changed counts the
// service's Changed calls.
func slicesRig(t *testing.T) (*simnode.Node, *Slices, string, *int) {
	t.Helper()
	n := simnode.NewBuiltin("dgx-h100")
	t.Cleanup(n.Close)
	journal := t.TempDir() + "/journal.json"
	changed := 0
	svc, err := NewService(ServiceConfig{
		Lib: n, Applier: NewApplier(n, nil, WithJournal(journal)),
		Processes: discovery.ProcessReader{Lib: n}, Changed: func(Result) { changed++ },
	})
	if err != nil {
		t.Fatal(err)
	}
	return n, NewSlices(svc), journal, &changed
}

func TestSlicesCreateDestroy(t *testing.T) {
	n, m, _, changed := slicesRig(t)
	parent := mustState(t, n).GPUs[2].UUID

	a, err := m.Create(t.Context(), parent, "1g.10gb", 6)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	b, err := m.Create(t.Context(), parent, "2g.20gb", 0)
	if err != nil {
		t.Fatalf("Create second: %v", err)
	}
	g := mustState(t, n).GPUs[2]
	if !g.MIGEnabled || !slices.Equal(layoutString(g), []string{"2g.20gb@0", "1g.10gb@6"}) {
		t.Fatalf("gpu 2 after two creates: mig %v %v", g.MIGEnabled, layoutString(g))
	}
	if a.GPU != 2 || a.UUID == "" || a.UUID == b.UUID || !a.ModeEnabled || b.ModeEnabled {
		t.Fatalf("created %+v and %+v", a, b)
	}
	for _, other := range mustState(t, n).GPUs {
		if other.Index != 2 && (other.MIGEnabled || len(other.Instances) > 0) {
			t.Errorf("gpu %d touched: mig %v %v", other.Index, other.MIGEnabled, layoutString(other))
		}
	}

	if off, err := m.Destroy(t.Context(), parent, a.UUID, true); err != nil || off {
		t.Fatalf("Destroy = %v, %v; want MIG mode kept for the other slice", off, err)
	}
	g = mustState(t, n).GPUs[2]
	if !g.MIGEnabled || !slices.Equal(layoutString(g), []string{"2g.20gb@0"}) {
		t.Fatalf("gpu 2 after destroying one: mig %v %v, want 2g.20gb@0 kept", g.MIGEnabled, layoutString(g))
	}
	if _, err := m.Destroy(t.Context(), parent, a.UUID, false); err != nil {
		t.Fatalf("Destroy of a gone slice = %v, want nil", err)
	}
	// A new Slices (an agent restart) knows nothing: restoreMode, which
	// the caller persisted, turns MIG mode off with the last slice.
	m = NewSlices(m.svc)
	if off, err := m.Destroy(t.Context(), parent, b.UUID, true); err != nil || !off {
		t.Fatalf("Destroy last = %v, %v; want MIG mode off", off, err)
	}
	if g = mustState(t, n).GPUs[2]; g.MIGEnabled || len(g.Instances) > 0 {
		t.Fatalf("gpu 2 after destroying the last slice: mig %v %v, want MIG off again", g.MIGEnabled, layoutString(g))
	}
	if *changed != 4 { // two creates, two destroys; the destroy of a gone slice changed nothing
		t.Errorf("Changed called %d times, want 4 (one per change)", *changed)
	}
}

// TestSlicesCreateFailureLeavesNothing: a compute instance that fails to
// be created rolls the GPU back (no GPU instance without its compute
// instance, MIG mode as before) and removes the journal.
func TestSlicesCreateFailureLeavesNothing(t *testing.T) {
	n, m, journal, _ := slicesRig(t)
	parent := mustState(t, n).GPUs[1].UUID
	n.InjectFault("CreateComputeInstance", simnode.FaultSpec{Return: nvml.ERROR_UNKNOWN})
	_, err := m.Create(t.Context(), parent, "1g.10gb", 3)
	if !errors.Is(err, ErrRolledBack) || !errors.Is(err, nvml.ERROR_UNKNOWN) {
		t.Fatalf("Create = %v, want ErrRolledBack wrapping ERROR_UNKNOWN", err)
	}
	if g := mustState(t, n).GPUs[1]; g.MIGEnabled || len(g.Instances) > 0 {
		t.Fatalf("gpu 1 after a failed create: mig %v %v, want as before", g.MIGEnabled, layoutString(g))
	}
	if _, err := os.Stat(journal); !errors.Is(err, os.ErrNotExist) {
		t.Error("journal left after a rolled-back create")
	}
}

func TestSlicesErrors(t *testing.T) {
	n, m, _, _ := slicesRig(t)
	if _, err := m.Create(t.Context(), "GPU-nope", "1g.10gb", 0); !errors.Is(err, ErrSliceNotFound) {
		t.Errorf("Create on an unknown GPU = %v, want ErrSliceNotFound", err)
	}
	parent := mustState(t, n).GPUs[0].UUID
	s, err := m.Create(t.Context(), parent, "3g.40gb", 4)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(t.Context(), parent, "1g.10gb", 6); !errors.Is(err, ErrNoFit) {
		t.Errorf("Create overlapping 3g.40gb@4 = %v, want ErrNoFit", err)
	}
	if err := n.AddMIGProcess(s.UUID, 4242, 1<<30); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Destroy(t.Context(), parent, s.UUID, true); !errors.Is(err, ErrBusy) {
		t.Errorf("Destroy with a process on it = %v, want ErrBusy", err)
	}
	if g := mustState(t, n).GPUs[0]; !slices.Equal(layoutString(g), []string{"3g.40gb@4"}) {
		t.Errorf("gpu 0 after a refused destroy: %v", layoutString(g))
	}
	if _, err := m.Destroy(t.Context(), "GPU-nope", s.UUID, true); !errors.Is(err, ErrSliceNotFound) {
		t.Errorf("Destroy on an unknown GPU = %v, want ErrSliceNotFound", err)
	}
}

// TestSlicesRestoreModeWithNoSlices: a GPU left in MIG mode with no slice
// (the device was destroyed, MIG mode not turned off before a crash, or by
// an older gpud) is turned back when the caller asks to restore it.
func TestSlicesRestoreModeWithNoSlices(t *testing.T) {
	n, m, _, _ := slicesRig(t)
	parent := mustState(t, n).GPUs[3].UUID
	s, err := m.Create(t.Context(), parent, "1g.10gb", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Destroy(t.Context(), parent, s.UUID, false); err != nil {
		t.Fatal(err)
	}
	if g := mustState(t, n).GPUs[3]; !g.MIGEnabled {
		t.Fatal("MIG mode off without restoreMode")
	}
	if off, err := m.Destroy(t.Context(), parent, s.UUID, true); err != nil || !off {
		t.Fatalf("Destroy of a gone slice with restoreMode = %v, %v; want MIG mode off", off, err)
	}
	if g := mustState(t, n).GPUs[3]; g.MIGEnabled {
		t.Fatal("MIG mode still on")
	}
	if _, found, on, err := m.Find(parent, "1g.10gb", 0); err != nil || found || on {
		t.Fatalf("Find = %v, %v, %v", found, on, err)
	}
}
