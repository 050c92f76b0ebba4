package mig

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/simnode"
	"github.com/gpud/gpud/pkg/usage"
)

type fakeAllocs struct {
	as  []usage.Assignment
	err error
}

func (f fakeAllocs) Allocations(context.Context) ([]usage.Assignment, error) { return f.as, f.err }

// serviceRig is an A100 node with GPU 0 split into two 3g.20gb slices and
// a service on it; slice is the second one's MIG UUID.
func serviceRig(t *testing.T, allocs AllocationLister) (*simnode.Node, *Service, string, *int) {
	t.Helper()
	n := simnode.NewBuiltin("dgx-a100")
	applyConfig(t, n, "two-3g")
	st := mustState(t, n)
	changed := 0
	svc, err := NewService(ServiceConfig{
		Lib: n, Applier: NewApplier(n, nil, WithResetter(n.ResetGPU)),
		Processes: discovery.ProcessReader{Lib: n}, Allocations: allocs,
		Changed: func(Result) { changed++ },
	})
	if err != nil {
		t.Fatal(err)
	}
	return n, svc, st.GPUs[0].Instances[1].UUIDs()[0], &changed
}

// TestServiceKeepsAllocatedSlice: a slice the kubelet allocated is busy
// even with no process on it.
func TestServiceKeepsAllocatedSlice(t *testing.T) {
	allocs := &fakeAllocs{}
	n, svc, slice, changed := serviceRig(t, allocs)
	allocs.as = []usage.Assignment{{Namespace: "ml", Pod: "train-1", DeviceIDs: []string{slice + "::1"}}}
	_, err := svc.Apply(t.Context(), mustLayouts(t), "big-small", false)
	if !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "ml/train-1") {
		t.Fatalf("Apply over an allocated slice = %v, want ErrBusy naming ml/train-1", err)
	}
	if *changed != 0 {
		t.Error("a refused apply reported a change")
	}
	if got := layoutString(mustState(t, n).GPUs[0]); strings.Join(got, ",") != "3g.20gb@0,3g.20gb@4" {
		t.Fatalf("gpu 0 after the refusal: %v", got)
	}
	if _, err := svc.Apply(t.Context(), mustLayouts(t), "big-small", true); err != nil {
		t.Fatalf("forced Apply: %v", err)
	}
	if *changed != 1 {
		t.Errorf("Changed called %d times after an apply, want 1", *changed)
	}
}

// TestServiceKeepsSliceWithProcess: a slice a process runs on, read by
// discovery's process reader, is busy (named by its PID); a process on a
// whole GPU holds nothing the layout destroys.
func TestServiceKeepsSliceWithProcess(t *testing.T) {
	n, svc, slice, changed := serviceRig(t, nil)
	if err := n.AddMIGProcess(slice, 101, 1<<30); err != nil {
		t.Fatal(err)
	}
	if err := n.AddProcess(3, 202, 2<<30); err != nil {
		t.Fatal(err)
	}
	_, err := svc.Apply(t.Context(), mustLayouts(t), "big-small", false)
	if !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "pid 101") || strings.Contains(err.Error(), "pid 202") {
		t.Fatalf("Apply over a slice running pid 101 = %v, want ErrBusy naming pid 101 only", err)
	}
	if *changed != 0 {
		t.Error("a refused apply reported a change")
	}
	b, err := svc.Busy(t.Context())
	if err != nil || strings.Join(b[slice], ",") != "pid 101" {
		t.Fatalf("Busy = %v, %v; want %s held by pid 101", b, err, slice)
	}
}

// TestServiceBusyUnknown: when the kubelet does not answer, a plan that
// destroys slices is refused unless forced; one that destroys nothing
// goes ahead.
func TestServiceBusyUnknown(t *testing.T) {
	_, svc, _, _ := serviceRig(t, fakeAllocs{err: errors.New("kubelet does not answer")})
	if _, err := svc.Plan(t.Context(), mustLayouts(t), "big-small", false); !errors.Is(err, ErrBusyUnknown) {
		t.Fatalf("Plan = %v, want ErrBusyUnknown", err)
	}
	if _, err := svc.Plan(t.Context(), mustLayouts(t), "two-3g", false); err != nil {
		t.Fatalf("a plan that changes nothing: %v", err)
	}
	if _, err := svc.Plan(t.Context(), mustLayouts(t), "big-small", true); err != nil {
		t.Fatalf("forced Plan: %v", err)
	}
	if _, _, err := svc.Recover(t.Context()); !errors.Is(err, ErrBusyUnknown) {
		t.Fatalf("Recover = %v, want it postponed with ErrBusyUnknown", err)
	}
}

func TestBusyFrom(t *testing.T) {
	b := BusyFrom(
		[]usage.Process{{PID: 7, DeviceUUID: "MIG-a"}},
		[]usage.Assignment{{Namespace: "ns", Pod: "p", DeviceIDs: []string{"MIG-a", "GPU-b::3"}}},
	)
	if got := strings.Join(b["MIG-a"], ","); got != "pid 7,ns/p" {
		t.Errorf("busy[MIG-a] = %s", got)
	}
	if got := strings.Join(b["GPU-b"], ","); got != "ns/p" {
		t.Errorf("busy[GPU-b] = %s: a replica holds its device", got)
	}
}
