package scheduler

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpud/gpud/pkg/scheduler/plan"
)

// TestAutoGroups: pods naming no PodGroup join the gang Config.AutoGroups
// gives them (bound ones too, so they count toward the minimum), a pod
// naming a PodGroup keeps it, and the PodGroups' map is not written.
func TestAutoGroups(t *testing.T) {
	explicit := claimPod("ml", "explicit", t0)
	explicit.Labels = map[string]string{plan.PodGroupLabel: "pg"}
	explicit.OwnerReferences = nil
	pending := claimPod("ml", "worker-1", t0)
	bound := claimPod("ml", "worker-0", t0)
	bound.Spec.NodeName = "n1"
	alone := claimPod("ml", "web", t0)
	gang := &plan.Group{Namespace: "ml", Name: "job:train", MinMember: 2}
	calls := 0
	ts := newTestScheduler(t, placeAll{})
	ts.snap.autoGroups = func() func(*corev1.Pod) (string, *plan.Group) {
		calls++
		return func(p *corev1.Pod) (string, *plan.Group) {
			switch p.Name {
			case "web":
				return "", nil
			default: // every other pod, the explicit one included
				return "ml/job:train", gang
			}
		}
	}
	groups := map[string]*plan.Group{"ml/pg": {Namespace: "ml", Name: "pg", MinMember: 1}}
	sn := ts.snapshotOf(inputs{pods: []*corev1.Pod{explicit, pending, bound, alone}, groups: groups})
	if calls != 1 {
		t.Errorf("AutoGroups called %d times in a cycle, want once", calls)
	}
	got := map[string]string{}
	for _, p := range append(append([]*plan.Pod{}, sn.Pending...), sn.Bound...) {
		got[p.Pod.Name] = p.Group
	}
	want := map[string]string{"explicit": "ml/pg", "worker-1": "ml/job:train", "worker-0": "ml/job:train", "web": ""}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("pod %s in group %q, want %q", k, got[k], v)
		}
	}
	if sn.Groups["ml/job:train"] != gang || sn.Groups["ml/pg"] == nil {
		t.Errorf("snapshot groups %v, want the PodGroup and the automatic gang", sn.Groups)
	}
	if len(groups) != 1 {
		t.Errorf("Config.Groups' map written: %v", groups)
	}
}
