package migctl

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpud/gpud/internal/fileio"
	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/pkg/mig"
	"github.com/gpud/gpud/pkg/nodelabels"
	"github.com/gpud/gpud/pkg/simnode"
	"github.com/gpud/gpud/pkg/usage"
)

// flakyAllocations fails until ok is set, as the kubelet's pod-resources
// socket does while the kubelet starts.
type flakyAllocations struct {
	ok    atomic.Bool
	calls atomic.Int32
}

func (f *flakyAllocations) Allocations(context.Context) ([]usage.Assignment, error) {
	f.calls.Add(1)
	if !f.ok.Load() {
		return nil, errors.New("connection refused")
	}
	return nil, nil
}

// killApply kills an apply of layout with a journal in the middle (its
// 2nd GPU instance creation stalls, the files are copied as a SIGKILL
// leaves them, the stalled apply is ended and the copies put back): the
// node's state file holds a half-applied layout and journal the apply's
// journal, with a temp file a killed journal write would leave.
func killApply(t *testing.T, statePath, journal, layout string) {
	t.Helper()
	n := simnode.NewBuiltin("dgx-a100", simnode.WithStateFile(statePath))
	stalled := make(chan struct{}, 1)
	n.InjectFault("CreateGpuInstance", simnode.FaultSpec{After: 1, Delay: time.Hour, Hit: stalled})
	svc := newService(t, n, journal, true, nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = svc.Apply(t.Context(), mustLayouts(t), layout, false)
	}()
	<-stalled
	state, err := os.ReadFile(statePath)
	if err != nil {
		t.Fatal(err)
	}
	jdata, err := os.ReadFile(journal)
	if err != nil {
		t.Fatalf("no journal while the apply runs: %v", err)
	}
	n.Close()
	<-done
	for path, data := range map[string][]byte{statePath: state, journal: jdata, fileio.TempName(journal): []byte(`{"ver`)} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func profiles(g mig.GPUState) string {
	var ps []string
	for _, in := range g.Instances {
		ps = append(ps, in.Profile)
	}
	return strings.Join(ps, ",")
}

// TestControllerWaitsForRecovery: the agent starts after a killed apply
// and cannot recover it yet (which slices are busy is unknown). The
// configured layout must not be applied over the interrupted apply's
// journal, whose starting layout is the way back; the node label says
// failed. Once recovery works, on a retry, the configured layout follows.
func TestControllerWaitsForRecovery(t *testing.T) {
	dir := t.TempDir()
	statePath, journal := filepath.Join(dir, "node.json"), filepath.Join(dir, "mig-journal.json")
	setup := simnode.NewBuiltin("dgx-a100", simnode.WithStateFile(statePath))
	if _, err := newService(t, setup, "", true, nil).Apply(t.Context(), mustLayouts(t), "two-3g", false); err != nil {
		t.Fatalf("set up two 3g.20gb slices: %v", err)
	}
	setup.Close()
	killApply(t, statePath, journal, "seven-1g")
	before, err := os.ReadFile(journal)
	if err != nil {
		t.Fatal(err)
	}

	n := simnode.NewBuiltin("dgx-a100", simnode.WithStateFile(statePath))
	allocs := &flakyAllocations{}
	svc := newService(t, n, journal, true, allocs)
	var mu sync.Mutex
	var states []string
	c, err := New(Config{Service: svc, Log: discardLog(), RecoverRetry: 20 * time.Millisecond,
		Layout: Layout{File: writeLayouts(t), Name: "two-3g"},
		State:  func(s string) { mu.Lock(); states = append(states, s); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		n.Close()
	})

	testwait.For(t, 10*time.Second, "three failed recoveries", func() bool { return allocs.calls.Load() >= 3 })
	if after, err := os.ReadFile(journal); err != nil || !bytes.Equal(after, before) {
		t.Fatalf("journal changed while recovery failed (err %v)", err)
	}
	mu.Lock()
	got := append([]string(nil), states...)
	mu.Unlock()
	for _, s := range got {
		if s != nodelabels.StateFailed {
			t.Fatalf("states while recovery fails: %v, want only %q (the configured layout must wait)", got, nodelabels.StateFailed)
		}
	}

	allocs.ok.Store(true)
	testwait.For(t, 10*time.Second, "configured layout in place", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(states) > 0 && states[len(states)-1] == nodelabels.StateSuccess
	})
	st, err := svc.State()
	if err != nil {
		t.Fatal(err)
	}
	if got := profiles(st.GPUs[0]); got != "3g.20gb,3g.20gb" {
		t.Errorf("GPU 0 = %s, want the configured two 3g.20gb", got)
	}
	if _, err := os.Stat(journal); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("journal left after recovery and apply: %v", err)
	}
}

// TestReloadKeepsConfigOnError: an invalid reread keeps the layout the
// controller has.
func TestReloadKeepsConfigOnError(t *testing.T) {
	n := simnode.NewBuiltin("dgx-a100")
	c, err := New(Config{Service: newService(t, n, "", false, nil), Layout: Layout{Name: "a", File: "l.yaml"}, Force: true, Log: discardLog(),
		Reload: func() (Layout, error) { return Layout{}, errors.New("agent.yaml:3: unknown key") }})
	if err != nil {
		t.Fatal(err)
	}
	c.reloadConfig()
	if c.layout != (Layout{Name: "a", File: "l.yaml"}) {
		t.Fatalf("after a failed reload: %+v, want the old layout", c.layout)
	}
	c.cfg.Reload = func() (Layout, error) { return Layout{Name: "b", File: "m.yaml"}, nil }
	c.reloadConfig()
	if c.layout != (Layout{Name: "b", File: "m.yaml"}) || !c.cfg.Force {
		t.Fatalf("after a reload: %+v (force %v), want layout b from m.yaml and --mig-force unchanged", c.layout, c.cfg.Force)
	}
}

func TestNewNeedsService(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Fatal("New without a Service: no error")
	}
}

func TestStateOf(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pending int
		err     error
		want    string
	}{
		{"applied", 0, nil, nodelabels.StateSuccess},
		{"gpus wait for a reset", 2, nil, nodelabels.StatePending},
		{"failed", 0, io.EOF, nodelabels.StateFailed},
		{"failed with pending", 1, io.EOF, nodelabels.StateFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := stateOf(tc.pending, tc.err); got != tc.want {
				t.Errorf("stateOf(%d, %v) = %q, want %q", tc.pending, tc.err, got, tc.want)
			}
		})
	}
}
