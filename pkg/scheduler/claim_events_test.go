package scheduler

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

// TestClaimAddedUrgentOnlyForWaitingPods: a new claim starts a cycle at
// once only when a pending pod of this scheduler uses it (it names the
// claim, or owns it as its template's claim); a claim created ahead of its
// pod, or one only another scheduler's pod names, waits out Debounce, so
// that the pod created a moment later does not wait for a cycle with
// nothing to place.
func TestClaimAddedUrgentOnlyForWaitingPods(t *testing.T) {
	s, err := New(Config{Client: fake.NewClientset(), Decider: placeAll{}})
	if err != nil {
		t.Fatal(err)
	}
	named := claimPod("ns", "named", t0, "c-named")
	other := claimPod("ns", "other", t0, "c-other")
	other.Spec.SchedulerName = "default-scheduler"
	bound := claimPod("ns", "bound", t0, "c-bound")
	bound.Spec.NodeName = "n0"
	owner := claimPod("ns", "owner", t0)
	for _, p := range []any{named, other, bound, owner} {
		if err := s.podsByClaim.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	templated := wholeClaim("ns", "owner-gpu-x7k2", "gpu.gpud.io")
	templated.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: owner.Name, UID: owner.UID, Controller: ptr.To(true)}}
	podNotSeenYet := wholeClaim("ns", "late-gpu-q9", "gpu.gpud.io")
	podNotSeenYet.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "late", UID: "pod-late"}}
	tests := []struct {
		name   string
		claim  any
		urgent bool
	}{
		{"named by a pending pod of this scheduler", wholeClaim("ns", "c-named", "gpu.gpud.io"), true},
		{"its template's pod is pending", templated, true},
		{"its template's pod not seen yet", podNotSeenYet, true},
		{"created ahead of its pod", wholeClaim("ns", "c-ahead", "gpu.gpud.io"), false},
		{"named only by another scheduler's pod", wholeClaim("ns", "c-other", "gpu.gpud.io"), false},
		{"named only by a bound pod", wholeClaim("ns", "c-bound", "gpu.gpud.io"), false},
		{"same name in another namespace", wholeClaim("other-ns", "c-named", "gpu.gpud.io"), false},
	}
	for _, tc := range tests {
		s.claimAdded(tc.claim)
		urgent := false
		select {
		case <-s.urgent:
			urgent = true
		default:
		}
		select {
		case <-s.trigger:
		default:
			t.Errorf("%s: no cycle asked for", tc.name)
		}
		if urgent != tc.urgent {
			t.Errorf("%s: urgent %v, want %v", tc.name, urgent, tc.urgent)
		}
	}
}
