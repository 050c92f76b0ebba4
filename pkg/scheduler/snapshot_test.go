package scheduler

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpud/gpud/pkg/scheduler/plan"
)

// TestNewPodLastCheckpoint: gpud.io/last-checkpoint is read as RFC 3339
// (fractional seconds and offsets too); anything else leaves the zero
// time, so that preemption counts the pod's start instead.
func TestNewPodLastCheckpoint(t *testing.T) {
	want := time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC)
	tests := []struct {
		name, value string
		want        time.Time
	}{
		{"utc", "2026-12-01T09:30:00Z", want},
		{"offset", "2026-12-01T10:30:00+01:00", want},
		{"fractional seconds", "2026-12-01T09:30:00.250Z", want.Add(250 * time.Millisecond)},
		{"spaces", " 2026-12-01T09:30:00Z ", want},
		{"absent", "", time.Time{}},
		{"date only", "2026-12-01", time.Time{}},
		{"unix seconds", "1796117400", time.Time{}},
		{"garbage", "yesterday", time.Time{}},
		{"out of range", "2026-13-45T99:00:00Z", time.Time{}},
		{"too long", "2026-12-01T09:30:00.0000000000000000000000000000000000000000000000000000000000Z", time.Time{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod := claimPod("ns", "p", t0)
			if tc.value != "" {
				pod.Annotations = map[string]string{plan.LastCheckpointAnnotation: tc.value}
			}
			if got := newPod(pod, nil).LastCheckpoint; !got.Equal(tc.want) {
				t.Errorf("LastCheckpoint of %q = %v, want %v", tc.value, got, tc.want)
			}
		})
	}
}

// TestMalformedAnnotationsWarnOnce: a malformed gpud.io/runtime-estimate or
// gpud.io/last-checkpoint is reported on the pod with one Warning Event
// naming the annotation and the value (not silently dropped), again only
// when the problem changes.
func TestMalformedAnnotationsWarnOnce(t *testing.T) {
	bad := claimPod("ns", "bad", t0)
	bad.Annotations = map[string]string{plan.RuntimeEstimateAnnotation: "soon", plan.LastCheckpointAnnotation: "2026-12-01"}
	good := claimPod("ns", "good", t0)
	good.Annotations = map[string]string{plan.RuntimeEstimateAnnotation: "90m", plan.LastCheckpointAnnotation: "2026-12-01T09:30:00Z"}
	ts := newTestScheduler(t, placeAll{}, bad, good)
	sn := ts.snapshotOf(inputs{pods: []*corev1.Pod{bad, good}})
	if len(sn.badAnnotations) != 1 || sn.badAnnotations[0].Pod.Pod != bad {
		t.Fatalf("badAnnotations = %+v, want only ns/bad", sn.badAnnotations)
	}
	ts.warnAnnotations(sn.badAnnotations)
	ev := <-ts.events.Events
	for _, want := range []string{"InvalidAnnotation", `gpud.io/runtime-estimate "soon"`, `gpud.io/last-checkpoint "2026-12-01"`, "ignored"} {
		if !strings.Contains(ev, want) {
			t.Errorf("event %q lacks %q", ev, want)
		}
	}
	ts.warnAnnotations(sn.badAnnotations)
	select {
	case ev := <-ts.events.Events:
		t.Fatalf("second event for the same problem: %q", ev)
	default:
	}
	bad.Annotations[plan.RuntimeEstimateAnnotation] = "-5"
	ts.warnAnnotations(ts.snapshotOf(inputs{pods: []*corev1.Pod{bad}}).badAnnotations)
	if ev := <-ts.events.Events; !strings.Contains(ev, `"-5"`) {
		t.Fatalf("event after the value changed: %q", ev)
	}
}
