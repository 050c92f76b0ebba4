package queues

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpud/gpud/pkg/allocator/jobs"
)

func TestDesiredStatus(t *testing.T) {
	ok := queue("a", "org", func(s *Spec) { s.Guaranteed.GPUMilli = 1000; s.Limit.GPUMilli = 4000 })
	ok.Generation = 2
	bad := queue("b", "org", func(s *Spec) { s.Limit.GPUMilli = -1 })
	set := Resolve([]*Queue{queue("org", ""), ok, bad}, nil, nil)
	now := metav1.NewTime(t0)
	st := DesiredStatus(ok, set, jobs.Resources{GPUMilli: 2000}, 3, now)
	if st.Usage.GPUMilli != 2000 || st.PendingPods != 3 || st.ObservedGeneration != 2 {
		t.Fatalf("status %+v, want 2000 milli-GPU used, 3 pending, generation 2", st)
	}
	if c := meta.FindStatusCondition(st.Conditions, ConditionAccepted); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("Accepted %+v, want True", c)
	}
	if c := meta.FindStatusCondition(st.Conditions, ConditionOverGuarantee); c == nil || c.Status != metav1.ConditionTrue ||
		c.Message != "borrowing beyond the guarantee (preemptible by queues under theirs): gpuMilli 2000 used, 1000 guaranteed" {
		t.Fatalf("OverGuarantee %+v, want True naming gpuMilli", c)
	}
	// Unchanged conditions keep their transition time.
	ok.Status = st
	again := DesiredStatus(ok, set, jobs.Resources{GPUMilli: 2000}, 3, metav1.NewTime(t0.Add(time.Minute)))
	if c := meta.FindStatusCondition(again.Conditions, ConditionAccepted); !c.LastTransitionTime.Equal(&now) {
		t.Fatalf("Accepted's transition time moved to %v with nothing changed", c.LastTransitionTime)
	}
	st = DesiredStatus(bad, set, jobs.Resources{}, 0, now)
	c := meta.FindStatusCondition(st.Conditions, ConditionAccepted)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonInvalid ||
		c.Message != "spec.limit.gpuMilli: Invalid value: -1: want 0 to 281474976710656" {
		t.Fatalf("Accepted of the invalid queue %+v, want False naming spec.limit.gpuMilli", c)
	}
}

func TestPendingBySubtree(t *testing.T) {
	set := Resolve([]*Queue{queue("org", ""), queue("a", "org"), queue("b", "org")}, nil, nil)
	got := set.pendingBySubtree(map[string]int{"a": 2, "b": 1, "unknown": 5})
	if got["org"] != 3 || got["a"] != 2 || got["b"] != 1 || len(got) != 3 {
		t.Fatalf("pending by subtree %v, want org 3, a 2, b 1", got)
	}
}
