package mig

import (
	"context"
	"testing"

	"github.com/gpud/gpud/pkg/simnode"
)

const testLayouts = `version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  all-enabled:
    - devices: all
      mig-enabled: true
      mig-devices: {}
  all-1g.5gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.5gb": 7
  mixed:
    - devices: [0, 1, 2, 3]
      mig-enabled: true
      mig-devices:
        "1g.5gb": 2
        "2g.10gb": 1
        "3g.20gb": 1
    - devices: [4, 5, 6, 7]
      mig-enabled: true
      mig-devices:
        "1g.5gb": 7
  big-small:
    - devices: [0]
      mig-enabled: true
      mig-devices:
        "4g.20gb": 1
        "1g.5gb": 3
  two-3g:
    - devices: [0]
      mig-enabled: true
      mig-devices:
        "3g.20gb": 2
  pinned:
    - devices: [0]
      mig-enabled: true
      mig-placements: ["3g.20gb@4", "1g.5gb@0"]
`

func mustLayouts(t testing.TB) LayoutFile {
	t.Helper()
	f, err := ParseLayoutFile([]byte(testLayouts))
	if err != nil {
		t.Fatalf("ParseLayoutFile: %v", err)
	}
	return f
}

func mustState(t testing.TB, n *simnode.Node) State {
	t.Helper()
	st, err := ReadState(n)
	if err != nil {
		t.Fatalf("ReadState: %v", err)
	}
	return st
}

// applyConfig plans and applies a named layout, failing the test on error.
func applyConfig(t testing.TB, n *simnode.Node, name string) Result {
	t.Helper()
	res, err := planAndApply(t.Context(), n, mustLayouts(t), name, nil, Options{})
	if err != nil {
		t.Fatalf("apply %s: %v", name, err)
	}
	return res
}

// planAndApply plans layout name of f on n's current state and applies it
// with a resetter (n.ResetGPU) and aopts.
func planAndApply(ctx context.Context, n *simnode.Node, f LayoutFile, name string, busy Busy, opts Options, aopts ...ApplierOption) (Result, error) {
	st, err := ReadState(n)
	if err != nil {
		return Result{}, err
	}
	want, err := f.Resolve(name, st)
	if err != nil {
		return Result{}, err
	}
	p, err := NewPlan(st, want, busy, opts)
	if err != nil {
		return Result{}, err
	}
	return NewApplier(n, nil, append([]ApplierOption{WithResetter(n.ResetGPU)}, aopts...)...).Apply(ctx, st, want, p)
}

// mustPlan resolves layout name of f against st and plans it (nothing
// busy, default options), failing the test on error.
func mustPlan(t testing.TB, f LayoutFile, name string, st State) (Desired, Plan) {
	t.Helper()
	want, err := f.Resolve(name, st)
	if err != nil {
		t.Fatalf("resolve %s: %v", name, err)
	}
	p, err := NewPlan(st, want, nil, Options{})
	if err != nil {
		t.Fatalf("plan %s: %v", name, err)
	}
	return want, p
}

// layoutString is a GPU's instances as "profile@start" in start order.
func layoutString(g GPUState) []string {
	out := make([]string, 0, len(g.Instances))
	for _, in := range g.Instances {
		out = append(out, in.String())
	}
	return out
}
