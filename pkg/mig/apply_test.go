package mig

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/internal/fileio"
	"github.com/gpud/gpud/pkg/simnode"
)

// layouts is every GPU's "profile@start" list, for comparing node states.
func layouts(st State) [][]string {
	out := make([][]string, len(st.GPUs))
	for i, g := range st.GPUs {
		out[i] = layoutString(g)
	}
	return out
}

func TestApplyMixedKeepsSharedSlices(t *testing.T) {
	n := simnode.NewBuiltin("dgx-a100")
	applyConfig(t, n, "all-1g.5gb")
	before := mustState(t, n)
	res := applyConfig(t, n, "mixed")
	after := res.State
	for i := range 4 {
		if got, want := layoutString(after.GPUs[i]), []string{"1g.5gb@0", "1g.5gb@1", "2g.10gb@2", "3g.20gb@4"}; !slices.Equal(got, want) {
			t.Errorf("gpu %d = %v, want %v", i, got, want)
		}
		// The kept slices are the same MIG devices, not recreated ones.
		for k := range 2 {
			if a, b := before.GPUs[i].Instances[k].CIs[0].UUID, after.GPUs[i].Instances[k].CIs[0].UUID; a != b || a == "" {
				t.Errorf("gpu %d slice %d UUID %q became %q", i, k, a, b)
			}
		}
	}
	for i := 4; i < 8; i++ {
		if !slices.Equal(layoutString(after.GPUs[i]), layoutString(before.GPUs[i])) {
			t.Errorf("gpu %d changed: %v -> %v", i, layoutString(before.GPUs[i]), layoutString(after.GPUs[i]))
		}
	}
}

func TestApplyPendingWithoutReset(t *testing.T) {
	n := simnode.NewBuiltin("dgx-a100") // enabling MIG needs a reset on A100
	st := mustState(t, n)
	w, p := mustPlan(t, mustLayouts(t), "all-1g.5gb", st)
	res, err := NewApplier(n, nil).Apply(t.Context(), st, w, p)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if len(res.Pending) != 8 {
		t.Fatalf("pending = %v, want all 8 GPUs", res.Pending)
	}
	for _, g := range res.State.GPUs {
		if !g.Pending() || len(g.Instances) != 0 {
			t.Errorf("gpu %d: pending %v with %d instances, want pending and empty", g.Index, g.Pending(), len(g.Instances))
		}
	}
}

func TestApplyRollsBackOnNVMLFailure(t *testing.T) {
	tests := []struct {
		name  string
		op    string
		after int
	}{
		{name: "second GPU fails to create", op: "CreateGpuInstance", after: 2},
		{name: "first GPU fails halfway", op: "CreateGpuInstance", after: 1},
		{name: "compute instance fails", op: "CreateComputeInstance", after: 1},
		{name: "destroy fails", op: "DestroyGpuInstance", after: 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := simnode.NewBuiltin("dgx-a100")
			applyConfig(t, n, "all-1g.5gb")
			start := mustState(t, n)
			n.InjectFault(tc.op, simnode.FaultSpec{After: tc.after, Return: nvml.ERROR_UNKNOWN})
			_, err := planAndApply(t.Context(), n, mustLayouts(t), "mixed", nil, Options{})
			if !errors.Is(err, ErrRolledBack) || !errors.Is(err, nvml.ERROR_UNKNOWN) {
				t.Fatalf("Apply error = %v, want ErrRolledBack wrapping ERROR_UNKNOWN", err)
			}
			if got, want := layouts(mustState(t, n)), layouts(start); !slices.EqualFunc(got, want, slices.Equal) {
				t.Errorf("after rollback:\n got %v\nwant %v", got, want)
			}
			for _, g := range mustState(t, n).GPUs {
				for _, in := range g.Instances {
					if !in.Complete() {
						t.Errorf("gpu %d: %s left without its compute instance", g.Index, in)
					}
				}
			}
		})
	}
}

func TestRecoverAfterKilledApply(t *testing.T) {
	dir := t.TempDir()
	statePath, journal := filepath.Join(dir, "node.json"), filepath.Join(dir, "mig-journal.json")
	first := simnode.NewBuiltin("dgx-h100", simnode.WithStateFile(statePath))
	f, err := ParseLayoutFile([]byte(`version: v1
mig-configs:
  small:
    - devices: [0, 1]
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
  mixed:
    - devices: [0, 1]
      mig-enabled: true
      mig-devices: {"1g.10gb": 3, "4g.40gb": 1}
`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := planAndApply(t.Context(), first, f, "small", nil, Options{}); err != nil {
		t.Fatal(err)
	}
	// The 2nd compute instance of the apply stalls: the agent is as good as
	// killed with a GPU instance created and its CI missing. Closing the
	// node at the end ends the stall (as the process exit would), and the
	// test waits for the apply to return: nothing outlives the test.
	stalled := make(chan struct{}, 1)
	first.InjectFault("CreateComputeInstance", simnode.FaultSpec{After: 1, Delay: time.Hour, Hit: stalled})
	st := mustState(t, first)
	w, p := mustPlan(t, f, "mixed", st)
	applied := make(chan struct{})
	go func() {
		defer close(applied)
		_, _ = NewApplier(first, nil, WithJournal(journal)).Apply(context.WithoutCancel(t.Context()), st, w, p)
	}()
	t.Cleanup(func() {
		first.Close()
		<-applied
	})
	<-stalled
	if !hasGIWithoutCI(t, statePath) {
		t.Fatal("state file has no GPU instance without its compute instance while the apply is stalled")
	}

	// The agent restarts: a new node from the same state file.
	second, err := simnode.New(first.Profile(), simnode.WithStateFile(statePath))
	if err != nil {
		t.Fatal(err)
	}
	// Until it is recovered, no apply may overwrite the journal (it holds
	// the layout to go back to) or touch the GPUs.
	before, err := os.ReadFile(journal)
	if err != nil {
		t.Fatal(err)
	}
	cur := mustState(t, second)
	w2, p2 := mustPlan(t, f, "small", cur)
	if _, err := NewApplier(second, nil, WithJournal(journal)).Apply(t.Context(), cur, w2, p2); !errors.Is(err, ErrInterrupted) ||
		!strings.Contains(err.Error(), "gpud mig recover") {
		t.Fatalf("Apply before recovery = %v, want ErrInterrupted naming `gpud mig recover`", err)
	}
	if after, _ := os.ReadFile(journal); !bytes.Equal(after, before) {
		t.Fatal("a refused Apply changed the interrupted apply's journal")
	}
	if got := layouts(mustState(t, second)); !slices.EqualFunc(got, layouts(cur), slices.Equal) {
		t.Fatalf("a refused Apply changed the layout: %v", got)
	}
	recovered, res, err := NewApplier(second, nil, WithJournal(journal)).Recover(t.Context(), nil)
	if err != nil || !recovered {
		t.Fatalf("Recover = %v, %v; want recovered", recovered, err)
	}
	for i := range 2 {
		g := res.State.GPUs[i]
		if err := checkGPU(g, w.GPUs[i], nil); err != nil {
			t.Errorf("after recovery: %v (layout %v)", err, layoutString(g))
		}
	}
	if _, err := os.Stat(journal); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("journal still there after recovery: %v", err)
	}
	again, _, err := NewApplier(second, nil, WithJournal(journal)).Recover(t.Context(), nil)
	if again || err != nil {
		t.Errorf("second Recover = %v, %v; want nothing to do", again, err)
	}
}

// hasGIWithoutCI reports whether the simulated node's state file holds a
// GPU instance without a compute instance.
func hasGIWithoutCI(t *testing.T, statePath string) bool {
	t.Helper()
	data, err := os.ReadFile(statePath)
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		GPUs []struct {
			GPUInstances []struct {
				ComputeInstances []json.RawMessage `json:"computeInstances"`
			} `json:"gpuInstances"`
		} `json:"gpus"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatalf("state file: %v", err)
	}
	for _, g := range raw.GPUs {
		for _, gi := range g.GPUInstances {
			if len(gi.ComputeInstances) == 0 {
				return true
			}
		}
	}
	return false
}

func TestJournalErrors(t *testing.T) {
	dir := t.TempDir()
	f, err := ParseLayoutFile([]byte("version: v1\nmig-configs:\n  a:\n    - devices: [0]\n      mig-enabled: true\n      mig-devices: {\"3g.40gb\": 2}\n"))
	if err != nil {
		t.Fatal(err)
	}

	t.Run("unwritable journal stops the apply before any change", func(t *testing.T) {
		notDir := filepath.Join(dir, "file")
		if err := os.WriteFile(notDir, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		n := simnode.NewBuiltin("dgx-h100")
		st := mustState(t, n)
		w, p := mustPlan(t, f, "a", st)
		_, err = NewApplier(n, nil, WithJournal(filepath.Join(notDir, "sub", "journal.json"))).Apply(t.Context(), st, w, p)
		if err == nil || !strings.Contains(err.Error(), "journal") {
			t.Fatalf("Apply with an unwritable journal = %v, want a journal error", err)
		}
		if got := layouts(mustState(t, n)); !slices.EqualFunc(got, layouts(st), slices.Equal) {
			t.Fatalf("layout changed without a journal: %v", got)
		}
	})

	t.Run("journal written atomically leaves no temp file", func(t *testing.T) {
		jdir := filepath.Join(dir, "j")
		n := simnode.NewBuiltin("dgx-h100")
		if _, err := planAndApplyJournal(t, n, f, filepath.Join(jdir, "journal.json")); err != nil {
			t.Fatal(err)
		}
		if ents, _ := os.ReadDir(jdir); len(ents) != 0 {
			t.Fatalf("journal dir holds %d entries after a clean apply, want none", len(ents))
		}
	})

	t.Run("journal that cannot be removed after the apply is an error", func(t *testing.T) {
		// The resetter, called mid-apply, puts a non-empty directory where
		// the journal is (root removes files from read-only directories).
		journal := filepath.Join(dir, "kept", "journal.json")
		n := simnode.NewBuiltin("dgx-a100")
		reset := func(gpu int) error {
			if fi, err := os.Stat(journal); err == nil && !fi.IsDir() {
				if err := os.Remove(journal); err != nil {
					return err
				}
				if err := os.MkdirAll(filepath.Join(journal, "x"), 0o700); err != nil {
					return err
				}
			}
			return n.ResetGPU(gpu)
		}
		st := mustState(t, n)
		w, p := mustPlan(t, mustLayouts(t), "two-3g", st)
		res, err := NewApplier(n, nil, WithJournal(journal), WithResetter(reset)).Apply(t.Context(), st, w, p)
		if !errors.Is(err, ErrJournalKept) || errors.Is(err, ErrRolledBack) || !strings.Contains(err.Error(), journal) {
			t.Fatalf("Apply whose journal cannot be removed = %v, want ErrJournalKept naming %s", err, journal)
		}
		if got := strings.Join(layoutString(res.State.GPUs[0]), ","); got != "3g.20gb@0,3g.20gb@4" {
			t.Errorf("gpu 0 = %s: the apply itself should be done", got)
		}
	})

	t.Run("recovery of a layout already in place removes the journal", func(t *testing.T) {
		jpath := filepath.Join(dir, "done.json")
		n := simnode.NewBuiltin("dgx-h100")
		start := mustState(t, n)
		if _, err := planAndApplyJournal(t, n, f, jpath); err != nil {
			t.Fatal(err)
		}
		w, err := f.Resolve("a", start)
		if err != nil {
			t.Fatal(err)
		}
		a := NewApplier(n, nil, WithJournal(jpath))
		if err := a.writeJournal(journal{Config: "a", Start: start, Want: w}); err != nil {
			t.Fatal(err)
		}
		if ok, _, err := a.Recover(t.Context(), nil); !ok || err != nil {
			t.Fatalf("Recover = %v, %v; want a clean recovery", ok, err)
		}
		if _, err := os.Stat(jpath); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("journal after the recovery: %v, want it removed (else every start recovers again)", err)
		}
	})

	t.Run("huge journal is refused, not read", func(t *testing.T) {
		path := filepath.Join(dir, "huge.json")
		fh, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := fh.Truncate(fileio.MaxStateBytes + 1); err != nil {
			t.Fatal(err)
		}
		_ = fh.Close()
		_, _, err = NewApplier(simnode.NewBuiltin("dgx-h100"), nil, WithJournal(path)).Recover(t.Context(), nil)
		if !errors.Is(err, fileio.ErrTooLarge) {
			t.Fatalf("Recover with a huge journal = %v, want ErrTooLarge", err)
		}
	})
}

func planAndApplyJournal(t *testing.T, n *simnode.Node, f LayoutFile, journal string) (Result, error) {
	t.Helper()
	return planAndApply(t.Context(), n, f, "a", nil, Options{}, WithJournal(journal))
}
