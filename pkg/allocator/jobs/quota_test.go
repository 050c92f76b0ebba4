package jobs

import (
	"strings"
	"testing"

	"github.com/gpud/gpud/pkg/allocator"
)

func TestQuotaLimits(t *testing.T) {
	twoModels := append(mkNodes(1, 8, "H100", 0, false), mkNodes(1, 8, "A100", 0, false)...)
	twoModels[1].Name = "a100"
	tests := []struct {
		name     string
		nodes    []allocator.Node
		queues   []Queue
		jobs     []Job
		started  []string
		pending  map[string]string // id -> substring of the reason
		wantCode map[string]string
	}{
		{
			name:   "gpu limit",
			nodes:  mkNodes(4, 8, "H100", 0, false),
			queues: []Queue{{Name: "q", Quota: Quota{Limit: Resources{GPUMilli: 16000}}}},
			jobs: []Job{{ID: "a", Queue: "q", Pod: gpus(8)}, {ID: "b", Queue: "q", Pod: gpus(8), Submit: 1},
				{ID: "c", Queue: "q", Pod: gpus(8), Submit: 2}},
			started:  []string{"a", "b"},
			pending:  map[string]string{"c": `queue "q" gpu_milli limit 16000: 16000 in use, job needs 8000, 8000 over`},
			wantCode: map[string]string{"c": CodeQuota},
		},
		{
			name:   "parent limit binds children",
			nodes:  mkNodes(4, 8, "H100", 0, false),
			queues: []Queue{{Name: "org", Quota: Quota{Limit: Resources{GPUMilli: 16000}}}, {Name: "x", Parent: "org"}, {Name: "y", Parent: "org"}},
			jobs: []Job{{ID: "x1", Queue: "x", Pod: gpus(8)}, {ID: "y1", Queue: "y", Pod: gpus(8), Submit: 1},
				{ID: "x2", Queue: "x", Pod: gpus(8), Submit: 2}},
			started:  []string{"x1", "y1"},
			pending:  map[string]string{"x2": `queue "org" gpu_milli limit 16000`},
			wantCode: map[string]string{"x2": CodeQuota},
		},
		{
			name:   "per-model limit steers to the other model",
			nodes:  twoModels,
			queues: []Queue{{Name: "q", Quota: Quota{ModelLimit: map[string]int64{"H100": 8000}}}},
			jobs: []Job{
				{ID: "h", Queue: "q", Pod: Pod{NumGPU: 8, Models: []string{"H100"}}},
				{ID: "any", Queue: "q", Pod: Pod{NumGPU: 8, Models: []string{"H100", "A100"}}, Submit: 1},
				{ID: "h2", Queue: "q", Pod: Pod{NumGPU: 1, Models: []string{"H100"}}, Submit: 2},
			},
			started:  []string{"h", "any"},
			pending:  map[string]string{"h2": `queue "q" H100 limit 8000 milli: 8000 in use, job needs 1000, 1000 over`},
			wantCode: map[string]string{"h2": CodeModelQuota},
		},
		{
			name:   "memory fraction limit counts exact MiB",
			nodes:  mkNodes(1, 2, "H100", 0, false),
			queues: []Queue{{Name: "q", Quota: Quota{Limit: Resources{GPUMemoryMiB: 30000}}}},
			jobs: []Job{
				{ID: "m1", Queue: "q", Pod: Pod{NumGPU: 1, GPUMilli: 100, GPUMemoryMiB: 20000}},
				{ID: "m2", Queue: "q", Pod: Pod{NumGPU: 1, GPUMilli: 100, GPUMemoryMiB: 10000}, Submit: 1},
				{ID: "m3", Queue: "q", Pod: Pod{NumGPU: 1, GPUMilli: 100, GPUMemoryMiB: 1}, Submit: 2},
			},
			started:  []string{"m1", "m2"},
			pending:  map[string]string{"m3": "gpu_memory_mib limit 30000: 30000 in use, job needs 1, 1 over"},
			wantCode: map[string]string{"m3": CodeQuota},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := mustNew(t, tc.nodes, tc.queues, nil, Gpud)
			mustSubmit(t, s, tc.jobs...)
			r := s.Schedule(10)
			checkInvariants(t, s)
			st := started(r)
			for _, id := range tc.started {
				if !st[id] {
					t.Errorf("%s not started; pending %+v", id, r.Pending)
				}
			}
			for id, want := range tc.pending {
				why, ok := pendingReason(r, id)
				if !ok || !strings.Contains(why.Message, want) || why.Code != tc.wantCode[id] {
					t.Errorf("%s: reason %v, want %s containing %q", id, why, tc.wantCode[id], want)
				}
			}
			if tc.name == "per-model limit steers to the other model" {
				if ps, _ := s.Placement("any"); len(ps) != 1 || ps[0].NodeName != "a100" {
					t.Errorf("job accepting both models went to %+v, want the A100 node", ps)
				}
			}
		})
	}
}

// Queue a borrows the whole cluster; queue b, under its guarantee, takes
// back exactly one job's worth, from a's most recently started job.
func TestQuotaBorrowAndReclaim(t *testing.T) {
	qs := []Queue{
		{Name: "a", Quota: Quota{Guaranteed: Resources{GPUMilli: 16000}, Limit: Resources{GPUMilli: 32000}}},
		{Name: "b", Quota: Quota{Guaranteed: Resources{GPUMilli: 16000}}},
	}
	s := mustNew(t, mkNodes(4, 8, "H100", 0, false), qs, nil, Gpud)
	for i, id := range []string{"a1", "a2", "a3", "a4"} {
		mustSubmit(t, s, Job{ID: id, Queue: "a", Pod: gpus(8), Submit: int64(i)})
		s.Schedule(int64(i))
	}
	if got := s.QueueUsage("a").GPUMilli; got != 32000 {
		t.Fatalf("a borrows %d milli, want 32000", got)
	}
	mustSubmit(t, s, Job{ID: "b1", Queue: "b", Pod: gpus(8), Submit: 10})
	r := s.Schedule(10)
	checkInvariants(t, s)
	if got := preempted(r); len(got) != 1 || got["a4"] != "b1" {
		t.Fatalf("preempted %v, want exactly a4 for b1", got)
	}
	if r.Preempted[0].Why != "reclaim" || !started(r)["b1"] {
		t.Fatalf("want reclaim starting b1, got %+v", r)
	}
	// b is at its guarantee now: a second b job must not reclaim below a's guarantee.
	mustSubmit(t, s, Job{ID: "b2", Queue: "b", Pod: gpus(8), Submit: 11}, Job{ID: "b3", Queue: "b", Pod: gpus(8), Submit: 12})
	r = s.Schedule(12)
	if got := preempted(r); len(got) != 1 {
		t.Fatalf("second round preempted %v, want one (b up to 16 GPUs)", got)
	}
	why, _ := pendingReason(r, "b3")
	if why.Code != CodeCapacity {
		t.Fatalf("b3 reason %v, want capacity (a is at its guarantee)", why)
	}
	checkInvariants(t, s)
}

// DRF: two equal queues split the cluster; FIFO gives it to the first.
func TestFairShareOrder(t *testing.T) {
	tests := []struct {
		name  string
		opts  Options
		wantB int
	}{{"drf", Gpud, 2}, {"fifo", Options{}, 0}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := mustNew(t, mkNodes(2, 8, "H100", 0, false), []Queue{{Name: "a"}, {Name: "b"}}, nil, tc.opts)
			for i := range 4 {
				mustSubmit(t, s, Job{ID: "a" + string(rune('0'+i)), Queue: "a", Pod: gpus(4), Submit: int64(i)})
			}
			for i := range 4 {
				mustSubmit(t, s, Job{ID: "b" + string(rune('0'+i)), Queue: "b", Pod: gpus(4), Submit: int64(10 + i)})
			}
			s.Schedule(20)
			if got := s.QueueUsage("b").GPUMilli / 4000; int(got) != tc.wantB {
				t.Fatalf("b runs %d jobs, want %d", got, tc.wantB)
			}
		})
	}
}

// TestSubmitQueueErrors: an undefined queue is reported as undefined, not as
// "not a leaf queue"; a parent queue as a parent.
func TestSubmitQueueErrors(t *testing.T) {
	s, err := New(mkNodes(1, 8, "H100", 0, false), []Queue{{Name: "org"}, {Name: "x", Parent: "org"}}, nil, Gpud)
	if err != nil {
		t.Fatal(err)
	}
	for queue, want := range map[string]string{"nope": `queue "nope" is not defined`, "org": `queue "org" is a parent queue`} {
		if err := s.Submit(Job{ID: "j-" + queue, Queue: queue, Pod: gpus(1)}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Submit to %q: %v, want %q", queue, err, want)
		}
	}
}
