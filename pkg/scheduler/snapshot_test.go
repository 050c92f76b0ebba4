package scheduler

import (
	"testing"
	"time"

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
