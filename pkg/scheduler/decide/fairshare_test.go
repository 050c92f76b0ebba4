package decide

import (
	"slices"
	"testing"

	"github.com/gpud/gpud/pkg/allocator"
	"github.com/gpud/gpud/pkg/allocator/jobs"
	"github.com/gpud/gpud/pkg/scheduler/plan"
	"github.com/gpud/gpud/pkg/scheduler/view"
)

const (
	a100 = "NVIDIA A100-SXM4-80GB"
	h100 = "NVIDIA H100 80GB HBM3"
)

// shareNodes are two nodes: one A100 whole, one A100 in MIG mode; one
// H100 whole.
func shareNodes() []*view.Node {
	return []*view.Node{
		{Name: "a", CPUMilli: 8000, MemoryMiB: 64 << 10, GPUs: []view.GPU{
			{Model: a100, MemoryBytes: 80 << 30, Whole: "gpu-0"},
			{Model: a100, MemoryBytes: 80 << 30},
		}},
		{Name: "b", CPUMilli: 4000, MemoryMiB: 32 << 10, GPUs: []view.GPU{{Model: h100, MemoryBytes: 80 << 30, Whole: "gpu-0"}}},
	}
}

// TestFairShareCapacity: the capacity DRF shares are taken of sums the
// nodes (a whole GPU 1000 milli-GPU, a MIG-mode GPU its compute slices),
// and the models are listed once each, in node order.
func TestFairShareCapacity(t *testing.T) {
	f := newFairShare(shareNodes(), nil)
	want := jobs.Resources{CPUMilli: 12000, MemoryMiB: 96 << 10, GPUMilli: 2 * allocator.MilliPerGPU,
		GPUMemoryMiB: 3 * 80 << 10, MIGSlices: jobs.MIGSlicesPerGPU}
	if f.capacity != want {
		t.Errorf("capacity %+v, want %+v", f.capacity, want)
	}
	if !slices.Equal(f.models, []string{a100, h100}) {
		t.Errorf("models %v", f.models)
	}
	if got := f.gfdModel("NVIDIA-H100-80GB-HBM3"); got != h100 {
		t.Errorf("GFD label for the H100: %q", got)
	}
	if got := f.gfdModel("Tesla-T4"); got != "Tesla-T4" {
		t.Errorf("GFD label of no cluster model: %q", got)
	}
}

// TestFairShareQueueOf: a pod is in its label's leaf queue; no label, or
// no queues defined, is the unqueued queue; a label naming no leaf is an
// error, as is every label when the queues are malformed (the tree falls
// back to the unqueued queue alone).
func TestFairShareQueueOf(t *testing.T) {
	labelled := func(q string) *plan.Pod { return &plan.Pod{Queue: q} }
	none := newFairShare(shareNodes(), nil)
	if q, err := none.queueOf(labelled("team-a")); q != unqueued || err != nil {
		t.Errorf("no queues defined: %q, %v", q, err)
	}
	f := newFairShare(shareNodes(), []jobs.Queue{{Name: "org"}, {Name: "team-a", Parent: "org"}})
	for label, want := range map[string]string{"team-a": "team-a", "": unqueued} {
		if q, err := f.queueOf(labelled(label)); q != want || err != nil {
			t.Errorf("label %q: %q, %v; want %q", label, q, err, want)
		}
	}
	for _, label := range []string{"org", "team-b"} {
		if _, err := f.queueOf(labelled(label)); err == nil {
			t.Errorf("label %q (no leaf): no error", label)
		}
	}
	bad := newFairShare(shareNodes(), []jobs.Queue{{Name: "team-a", Parent: "nowhere"}})
	if !bad.tree.Has(unqueued) || bad.tree.Has("team-a") {
		t.Fatal("malformed queues: not the unqueued queue alone")
	}
	if _, err := bad.queueOf(labelled("team-a")); err == nil {
		t.Error("malformed queues, labelled pod: no error")
	}
}

// TestFairShareBlockedModels: a queue at a per-model limit is blocked on
// that model only, for what would break it; charged usage counts.
func TestFairShareBlockedModels(t *testing.T) {
	f := newFairShare(shareNodes(), []jobs.Queue{{Name: "team", Quota: jobs.Quota{ModelLimit: map[string]int64{a100: 2000}}}})
	whole := func(n int) []*view.Item { return []*view.Item{{Kind: view.Whole, Count: n}} }
	if got := f.blockedModels("team", whole(2)); got != nil {
		t.Fatalf("2 GPUs under a 2-GPU limit: blocked %v", got)
	}
	got := f.blockedModels("team", whole(3))
	if len(got) != 1 || got[a100].Limit != 2000 || got[a100].Queue != "team" {
		t.Fatalf("3 GPUs over a 2-GPU A100 limit: blocked %v, want the A100 alone", got)
	}
	if got := f.blockedModels("team", nil); got != nil {
		t.Errorf("no GPUs asked: blocked %v", got)
	}
	f.tree.Charge("team", jobs.Resources{GPUMilli: 2000}, []jobs.ModelMilli{{Model: a100, Milli: 2000}}, 1)
	frac := []*view.Item{{Kind: view.Fraction, Count: 1}}
	if got := f.blockedModels("team", frac); len(got) != 1 || got[a100].Use != 2000 {
		t.Errorf("a fraction with the A100 limit used up: blocked %v, want the A100", got)
	}
	if got := f.blockedModels(unqueued, frac); got != nil {
		t.Errorf("the unqueued queue (no limits): blocked %v", got)
	}
}
