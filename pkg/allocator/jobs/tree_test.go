package jobs

import (
	"errors"
	"testing"
)

// TestQueueTreeMatchesScheduler: QueueTree charges, limits and shares as
// the Scheduler's own queue tree does.
func TestQueueTreeMatchesScheduler(t *testing.T) {
	const model = "H100"
	qs := []Queue{
		{Name: "org", Quota: Quota{Limit: Resources{GPUMilli: 12000}}},
		{Name: "a", Parent: "org", Weight: 2, Quota: Quota{Guaranteed: Resources{GPUMilli: 4000}, Limit: Resources{GPUMilli: 8000}}},
		{Name: "b", Parent: "org", Quota: Quota{ModelLimit: map[string]int64{model: 2000}}},
	}
	tr, err := NewQueueTree(qs, []string{model})
	if err != nil {
		t.Fatal(err)
	}
	if !tr.Leaf("a") || tr.Leaf("org") || tr.Has("zzz") || tr.Parent("a") != "org" || !tr.Within("a", "org") || tr.Within("org", "a") {
		t.Fatal("tree shape")
	}
	if got := tr.Children("org"); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Fatalf("children %v", got)
	}
	s := mustNew(t, mkNodes(2, 8, model, 0, false), qs, nil, Gpud)
	mustSubmit(t, s, Job{ID: "j", Queue: "a", Pods: 1, Pod: Pod{NumGPU: 6}})
	s.Schedule(0)
	tr.Charge("a", s.QueueUsage("a"), []ModelMilli{{model, 6000}}, 1)
	for _, q := range []string{"org", "a", "b"} {
		if tr.Usage(q) != s.QueueUsage(q) {
			t.Errorf("%s: tree %+v, scheduler %+v", q, tr.Usage(q), s.QueueUsage(q))
		}
	}
	if tr.UnderGuarantee("b") || tr.UnderGuarantee("a") || !tr.OverGuarantee("a", Resources{}) || tr.OverGuarantee("a", Resources{GPUMilli: 2000}) {
		t.Error("guarantees")
	}
	if e, over := tr.Over("a", Resources{GPUMilli: 3000}, nil); !over || e.Queue != "a" || e.Resource != "gpu_milli" || e.Limit != 8000 || e.Use != 6000 || e.Need != 3000 {
		t.Errorf("over a: %+v %v", e, over)
	}
	if e, over := tr.Over("b", Resources{GPUMilli: 7000}, nil); !over || e.Queue != "org" {
		t.Errorf("over org: %+v %v", e, over)
	}
	if e, over := tr.Over("b", Resources{GPUMilli: 3000}, []ModelMilli{{model, 3000}}); !over || e.Model != model || e.Limit != 2000 {
		t.Errorf("model: %+v %v", e, over)
	}
	if sh := tr.Share("a", s.Capacity()); sh != 6000.0/16000/2 {
		t.Errorf("share %v", sh)
	}
	if !(VictimCost{Victims: 1, NonCheckpointable: 1}).Less(VictimCost{Victims: 2}) || (VictimCost{Victims: 1, NonCheckpointable: 1}).Less(VictimCost{Victims: 1}) {
		t.Error("victim cost order")
	}
	if _, err := NewQueueTree([]Queue{{Name: "x", Parent: "nope"}}, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad parent: %v", err)
	}
}

// TestVictimCostOrder: fewer victims, then fewer that cannot resume, then
// less GPU-time lost since the last checkpoint, then less run time.
func TestVictimCostOrder(t *testing.T) {
	tests := []struct {
		name        string
		cheap, dear VictimCost
	}{
		{"fewer victims", VictimCost{Victims: 1, NonCheckpointable: 1, LostGPUMilliSeconds: 9e9}, VictimCost{Victims: 2}},
		{"checkpointable", VictimCost{Victims: 1, LostGPUMilliSeconds: 9e9}, VictimCost{Victims: 1, NonCheckpointable: 1}},
		{"less GPU-time lost", VictimCost{Victims: 1, LostGPUMilliSeconds: 1000, ElapsedSeconds: 9e6}, VictimCost{Victims: 1, LostGPUMilliSeconds: 2000}},
		{"less run time", VictimCost{Victims: 1, LostGPUMilliSeconds: 1000, ElapsedSeconds: 10}, VictimCost{Victims: 1, LostGPUMilliSeconds: 1000, ElapsedSeconds: 20}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.cheap.Less(tc.dear) || tc.dear.Less(tc.cheap) {
				t.Errorf("%+v should be cheaper than %+v", tc.cheap, tc.dear)
			}
			if tc.cheap.Less(tc.cheap) {
				t.Errorf("%+v less than itself", tc.cheap)
			}
		})
	}
}
