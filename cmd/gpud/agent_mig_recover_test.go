package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpud/gpud/internal/testwait"
	"github.com/gpud/gpud/pkg/nodelabels"
	"github.com/gpud/gpud/pkg/simnode"
	gpuusage "github.com/gpud/gpud/pkg/usage"
)

// flakyAllocations fails until ok is set, as the kubelet's pod-resources
// socket does while the kubelet starts.
type flakyAllocations struct {
	ok    atomic.Bool
	calls atomic.Int32
}

func (f *flakyAllocations) Allocations(context.Context) ([]gpuusage.Assignment, error) {
	f.calls.Add(1)
	if !f.ok.Load() {
		return nil, errors.New("connection refused")
	}
	return nil, nil
}

// TestMIGComponentWaitsForRecovery: the agent starts after a killed apply
// and cannot recover it yet (which slices are busy is unknown). The
// configured layout must not be applied over the interrupted apply's
// journal, whose starting layout is the way back; the node label says
// failed. Once recovery works, on a retry, the configured layout follows.
func TestMIGComponentWaitsForRecovery(t *testing.T) {
	r := newMigCLIRig(t)
	journal := filepath.Join(r.dir, "mig-journal.json")
	killApply(t, r, journal, "seven-1g")
	before, err := os.ReadFile(journal)
	if err != nil {
		t.Fatal(err)
	}

	n := simnode.NewBuiltin("dgx-a100", simnode.WithStateFile(r.state))
	allocs := &flakyAllocations{}
	svc, err := newMIGService(n, n, journal, true, allocs, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var states []string
	c := &migComponent{svc: svc, log: discardLog(), recoverRetry: 20 * time.Millisecond,
		opts:  migOptions{layoutFile: r.layouts, layoutName: "two-3g"},
		state: func(s string) { mu.Lock(); states = append(states, s); mu.Unlock() }}
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
