package decide

import (
	"testing"

	"github.com/gpud/gpud/pkg/allocator/jobs"
	"github.com/gpud/gpud/pkg/scheduler/plan"
)

// TestFitCacheRemember: a lone pod's failure is found again by the same
// shape key and by no other; gangs (no key), invalid claims and messages
// naming a claim are not kept, and a later failure replaces an earlier.
func TestFitCacheRemember(t *testing.T) {
	f := newFitCache()
	full := &failure{code: jobs.CodeCapacity, msg: "no node has 2 free GPUs", room: true}
	f.remember("shape-a", full)
	if got, ok := f.failed("shape-a"); !ok || got != full {
		t.Fatalf("shape-a: got %v, %v; want the remembered failure", got, ok)
	}
	if got, ok := f.failed("shape-b"); ok {
		t.Fatalf("shape-b: found %+v, remembered under shape-a only", got)
	}
	for _, tc := range []struct {
		name, key string
		f         *failure
	}{
		{"gang (no key)", "", full},
		{"no failure", "shape-nil", nil},
		{"invalid", "shape-invalid", &failure{code: plan.CodeInvalid, msg: "bad request"}},
		{"names a claim", "shape-claim", &failure{code: jobs.CodeCapacity, msg: "claim default/c request \"gpu\": no fit", room: true}},
	} {
		f.remember(tc.key, tc.f)
		if got, ok := f.failed(tc.key); ok {
			t.Errorf("%s: kept %+v", tc.name, got)
		}
	}
	later := &failure{code: jobs.CodeQuota, msg: "queue over its limit"}
	f.remember("shape-a", later)
	if got, _ := f.failed("shape-a"); got != later {
		t.Errorf("shape-a after a later failure: %+v, want %+v", got, later)
	}
}

// TestFitCacheNever: neverFits answers are cached per pod, a "fits
// somewhere" answer too, and one pod's answer is not another's.
func TestFitCacheNever(t *testing.T) {
	f := newFitCache()
	a, b := &plan.Pod{}, &plan.Pod{}
	if _, ok := f.neverOf(a); ok {
		t.Fatal("a: cached before any answer")
	}
	f.setNever(a, "")
	if msg, ok := f.neverOf(a); !ok || msg != "" {
		t.Errorf("a: %q, %v; want the cached empty answer", msg, ok)
	}
	if _, ok := f.neverOf(b); ok {
		t.Error("b: found a's answer")
	}
	f.setNever(b, "never fits: too big")
	if msg, _ := f.neverOf(b); msg != "never fits: too big" {
		t.Errorf("b: %q", msg)
	}
	if msg, _ := f.neverOf(a); msg != "" {
		t.Errorf("a after b: %q", msg)
	}
}
