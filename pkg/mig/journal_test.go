package mig

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/internal/fileio"
	"github.com/gpud/gpud/pkg/simnode"
)

const journalLayouts = `version: v1
mig-configs:
  small:
    - devices: [0, 1]
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
  mixed:
    - devices: [0, 1]
      mig-enabled: true
      mig-devices: {"1g.10gb": 3, "4g.40gb": 1}
`

// killedApply applies "small", then kills an apply of "mixed" at its 2nd
// compute instance (the process as good as SIGKILLed: a GPU instance
// without its compute instance in the node's state file, the journal on
// disk) and returns the node an agent restarted on that state file sees,
// the journal, and the two layouts' GPU 0 and 1 wants.
func killedApply(t *testing.T) (second *simnode.Node, journal string, small, mixed Desired) {
	t.Helper()
	dir := t.TempDir()
	statePath := filepath.Join(dir, "node.json")
	journal = filepath.Join(dir, "mig-journal.json")
	first := simnode.NewBuiltin("dgx-h100", simnode.WithStateFile(statePath))
	f, err := ParseLayoutFile([]byte(journalLayouts))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := planAndApply(t.Context(), first, f, "small", nil, Options{}); err != nil {
		t.Fatal(err)
	}
	small, _ = mustPlan(t, f, "small", mustState(t, first))
	stalled := make(chan struct{}, 1)
	first.InjectFault("CreateComputeInstance", simnode.FaultSpec{After: 1, Delay: time.Hour, Hit: stalled})
	st := mustState(t, first)
	w, p := mustPlan(t, f, "mixed", st)
	applied := make(chan struct{})
	go func() {
		defer close(applied)
		_, _ = NewApplier(first, nil, WithJournal(journal)).Apply(context.WithoutCancel(t.Context()), st, w, p)
	}()
	<-stalled
	// The kill: copy what is on disk now, then let the stalled call end.
	killed := filepath.Join(t.TempDir(), "node.json")
	data, err := os.ReadFile(statePath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(killed, data, 0o600); err != nil {
		t.Fatal(err)
	}
	jdata, err := os.ReadFile(journal)
	if err != nil {
		t.Fatalf("no journal while the apply runs: %v", err)
	}
	first.Close()
	<-applied
	if err := os.WriteFile(journal, jdata, 0o600); err != nil {
		t.Fatal(err)
	}
	second, err = simnode.New(first.Profile(), simnode.WithStateFile(killed))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(second.Close)
	return second, journal, small, w
}

// TestRollBackAfterKilledApply: an interrupted apply is reported by
// ReadJournal (layout, GPUs) and RollBack puts its GPUs back to the layout
// before it, removing the journal.
func TestRollBackAfterKilledApply(t *testing.T) {
	n, journal, small, _ := killedApply(t)
	in, err := ReadJournal(journal)
	if err != nil || in == nil || in.Config != "mixed" || !slices.Equal(in.GPUs, []int{0, 1}) {
		t.Fatalf("ReadJournal = %+v, %v; want mixed on GPUs 0, 1", in, err)
	}
	ok, res, err := NewApplier(n, nil, WithJournal(journal)).RollBack(t.Context(), nil, false)
	if err != nil || !ok {
		t.Fatalf("RollBack = %v, %v", ok, err)
	}
	for i := range 2 {
		if err := checkGPU(res.State.GPUs[i], small.GPUs[i], nil); err != nil {
			t.Errorf("after rollback: %v (layout %v)", err, layoutString(res.State.GPUs[i]))
		}
	}
	if _, err := os.Stat(journal); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("journal kept after the rollback: %v", err)
	}
	if in, err := ReadJournal(journal); in != nil || err != nil {
		t.Errorf("ReadJournal after rollback = %+v, %v; want nothing", in, err)
	}
}

// TestJournalVersions: the journal is written as version 2 with a
// checksum; a version 1 journal (gpud before issue 24) is still recovered;
// a damaged, edited or newer journal is refused naming the file, and left
// in place.
func TestJournalVersions(t *testing.T) {
	n, jpath, _, mixed := killedApply(t)
	data, err := os.ReadFile(jpath)
	if err != nil {
		t.Fatal(err)
	}
	var v2 journalFileV2
	if err := json.Unmarshal(data, &v2); err != nil || v2.Version != 2 || v2.Checksum == 0 || v2.Config != "mixed" {
		t.Fatalf("journal on disk = %+v, %v; want version 2 with a checksum", v2, err)
	}
	bad := map[string]string{
		"edited":  strings.Replace(string(data), `"mixed"`, `"small"`, 1),
		"newer":   `{"version":7,"config":"x"}`,
		"garbage": `{"config":`,
	}
	for name, body := range bad {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "j.json")
			if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			_, _, err := NewApplier(n, nil, WithJournal(p)).Recover(t.Context(), nil)
			if !errors.Is(err, ErrBadJournal) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "gpud mig show") {
				t.Fatalf("Recover on a %s journal = %v, want ErrBadJournal naming %s and what to do", name, err, p)
			}
			if _, err := ReadJournal(p); !errors.Is(err, ErrBadJournal) {
				t.Fatalf("ReadJournal = %v", err)
			}
			if got, _ := os.ReadFile(p); string(got) != body {
				t.Fatal("refused journal changed")
			}
		})
	}
	// Version 1: the bare journal, as the previous gpud wrote it, plus a
	// temp file a kill during its write left.
	v1, err := json.Marshal(journal{Config: v2.Config, Start: v2.Start, Want: v2.Want})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(jpath, v1, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fileio.TempName(jpath), []byte(`{"vers`), 0o600); err != nil {
		t.Fatal(err)
	}
	in, err := ReadJournal(jpath)
	if err != nil || in == nil || !reflect.DeepEqual(in.Want, v2.Want) {
		t.Fatalf("ReadJournal of version 1 = %+v, %v", in, err)
	}
	ok, res, err := NewApplier(n, nil, WithJournal(jpath)).Recover(t.Context(), nil)
	if err != nil || !ok {
		t.Fatalf("Recover from a version 1 journal = %v, %v", ok, err)
	}
	for i := range 2 {
		if err := checkGPU(res.State.GPUs[i], mixed.GPUs[i], nil); err != nil {
			t.Errorf("after recovery: %v", err)
		}
	}
	if _, err := os.Stat(fileio.TempName(jpath)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale journal temp file kept: %v", err)
	}
}

// FuzzJournal: any bytes either decode to a journal that survives a write
// and read, or are refused; never a panic.
func FuzzJournal(f *testing.F) {
	v2, err := encodeJournal(journal{Config: "c", Want: Desired{Config: "c", GPUs: map[int]GPUWants{0: {MIGEnabled: true, Slices: []Want{{Profile: "1g.10gb", Start: 6}}}}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(v2)
	f.Add([]byte(`{"config":"c","start":{"gpus":null},"want":{"config":"c","gpus":{}}}`))
	f.Add([]byte(`{"version":3}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		j, err := decodeJournal(data)
		if err != nil {
			return
		}
		enc, err := encodeJournal(j)
		if err != nil {
			t.Fatalf("encode an accepted journal: %v", err)
		}
		again, err := decodeJournal(enc)
		if err != nil {
			t.Fatalf("re-read of a written journal: %v", err)
		}
		if again.Config != j.Config || len(again.Want.GPUs) != len(j.Want.GPUs) {
			t.Fatalf("round trip changed it: %+v → %+v", j, again)
		}
	})
}
