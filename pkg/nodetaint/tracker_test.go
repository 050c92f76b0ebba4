package nodetaint

import (
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

func gpus(bad ...string) []GPU {
	out := []GPU{{UUID: "GPU-0"}, {UUID: "GPU-1"}, {UUID: "GPU-2"}}
	for i := range out {
		for _, b := range bad {
			if out[i].UUID == b {
				out[i].Unhealthy, out[i].Reason = true, "Xid 48"
			}
		}
	}
	return out
}

func newTracker(t *testing.T, cfg Config) *Tracker {
	t.Helper()
	tr, err := NewTracker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// step is one observation: minutes after t0, the unhealthy GPUs, the
// taint value wanted after it.
type step struct {
	min  int
	bad  []string
	want string
}

func TestTracker(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		steps []step
	}{
		{name: "one failure does not taint", cfg: Config{MaxGPUs: 2}, steps: []step{{0, nil, ""}, {1, []string{"GPU-0"}, ""}, {10, nil, ""}}},
		{name: "a GPU failing again after recovering taints, healthy ClearAfter clears",
			cfg: Config{MaxGPUs: 3, ClearAfter: 30 * time.Minute},
			steps: []step{{0, []string{"GPU-1"}, ""}, {5, nil, ""}, {60, []string{"GPU-1"}, ValueRepeated},
				{70, nil, ValueRepeated}, {89, nil, ValueRepeated}, {90, nil, ""},
				// History starts over: one more failure alone does not taint.
				{110, []string{"GPU-1"}, ""}}},
		{name: "still failing keeps the taint", cfg: Config{MaxGPUs: 3, ClearAfter: 30 * time.Minute},
			steps: []step{{0, []string{"GPU-1"}, ""}, {5, nil, ""}, {6, []string{"GPU-1"}, ValueRepeated}, {100, []string{"GPU-1"}, ValueRepeated},
				{120, nil, ValueRepeated}, {150, nil, ""}}},
		{name: "N GPUs within the window", cfg: Config{MaxGPUs: 2, Window: time.Hour},
			steps: []step{{0, []string{"GPU-0"}, ""}, {30, []string{"GPU-0", "GPU-2"}, ValueMultiple}}},
		{name: "N GPUs spread wider than the window", cfg: Config{MaxGPUs: 2, Window: time.Hour},
			steps: []step{{0, []string{"GPU-0"}, ""}, {10, nil, ""}, {100, []string{"GPU-2"}, ""}}},
		{name: "a failure after recovery outside the window does not count", cfg: Config{MaxGPUs: 3, Window: time.Hour},
			steps: []step{{0, []string{"GPU-0"}, ""}, {10, nil, ""}, {200, []string{"GPU-0"}, ""}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTracker(t, tc.cfg)
			for _, s := range tc.steps {
				got := tr.Observe(gpus(s.bad...), t0.Add(time.Duration(s.min)*time.Minute))
				if got.Value != s.want {
					t.Fatalf("at %dm with %v unhealthy: taint %q (%s), want %q", s.min, s.bad, got.Value, got.Reason, s.want)
				}
			}
		})
	}
}

func TestTrackerReasons(t *testing.T) {
	tr := newTracker(t, Config{MaxGPUs: 2})
	tr.Observe(gpus("GPU-0"), t0)
	got := tr.Observe(gpus("GPU-0", "GPU-1"), t0.Add(time.Minute))
	if want := "2 GPUs failed within 24h0m0s: GPU-0 (Xid 48), GPU-1 (Xid 48)"; got.Reason != want {
		t.Errorf("reason %q, want %q", got.Reason, want)
	}
	tr = newTracker(t, Config{MaxGPUs: 5})
	tr.Observe(gpus("GPU-2"), t0)
	tr.Observe(gpus(), t0.Add(time.Minute))
	if got := tr.Observe(gpus("GPU-2"), t0.Add(2*time.Minute)); !strings.Contains(got.Reason, "GPU GPU-2 failed again after recovering (Xid 48)") {
		t.Errorf("reason %q", got.Reason)
	}
}

func TestTrackerResume(t *testing.T) {
	tr := newTracker(t, Config{ClearAfter: 10 * time.Minute})
	tr.Resume(Taint{Value: ValueMultiple, Reason: "before the restart"}, t0)
	if got := tr.Observe(gpus(), t0.Add(time.Minute)); got.Value != ValueMultiple {
		t.Fatalf("taint %q after a restart, want it kept until the GPUs stay healthy", got.Value)
	}
	if at := tr.Next(); !at.Equal(t0.Add(10 * time.Minute)) {
		t.Errorf("Next() = %s, want t0+10m", at)
	}
	if got := tr.Observe(gpus(), t0.Add(10*time.Minute)); got.Value != "" {
		t.Fatalf("taint %q after ClearAfter healthy", got.Value)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{{Window: time.Second}, {MaxGPUs: -1}, {ClearAfter: 30 * 24 * time.Hour}, {NoExecuteAfter: 30 * time.Second}, {NoExecuteAfter: -time.Minute}} {
		if _, err := NewTracker(c); err == nil {
			t.Errorf("NewTracker(%+v) = nil error", c)
		}
	}
}

// The NoExecute step: after NoExecuteAfter tainted with a GPU still
// unhealthy, the node gets NoExecute too; a node whose GPUs recovered in
// time never does; both go together; 0 never adds it.
func TestTrackerNoExecute(t *testing.T) {
	type ne struct {
		min       int
		bad       []string
		value     string
		noExecute bool
		next      int // minutes after t0 Next() says, -1 zero
	}
	for _, tc := range []struct {
		name  string
		after time.Duration
		steps []ne
	}{
		{name: "still failing", after: 10 * time.Minute, steps: []ne{
			{0, []string{"GPU-1"}, "", false, -1}, {5, nil, "", false, -1},
			{6, []string{"GPU-1"}, ValueRepeated, false, 16}, {15, []string{"GPU-1"}, ValueRepeated, false, 16},
			{16, []string{"GPU-1"}, ValueRepeated, true, -1}, {20, nil, ValueRepeated, true, 46},
			{45, nil, ValueRepeated, true, 46}, {46, nil, "", false, -1}}},
		{name: "recovered in time", after: 10 * time.Minute, steps: []ne{
			{0, []string{"GPU-1"}, "", false, -1}, {5, nil, "", false, -1},
			{6, []string{"GPU-1"}, ValueRepeated, false, 16}, {8, nil, ValueRepeated, false, 36},
			{20, nil, ValueRepeated, false, 36}, {36, nil, "", false, -1}}},
		{name: "off", steps: []ne{
			{0, []string{"GPU-1"}, "", false, -1}, {5, nil, "", false, -1},
			{6, []string{"GPU-1"}, ValueRepeated, false, -1}, {600, []string{"GPU-1"}, ValueRepeated, false, -1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTracker(t, Config{MaxGPUs: 3, ClearAfter: 30 * time.Minute, NoExecuteAfter: tc.after})
			for _, s := range tc.steps {
				got := tr.Observe(gpus(s.bad...), t0.Add(time.Duration(s.min)*time.Minute))
				if got.Value != s.value || got.NoExecute != s.noExecute {
					t.Fatalf("at %dm with %v unhealthy: taint %+v, want value %q NoExecute %v", s.min, s.bad, got, s.value, s.noExecute)
				}
				want := time.Time{}
				if s.next >= 0 {
					want = t0.Add(time.Duration(s.next) * time.Minute)
				}
				if at := tr.Next(); !at.Equal(want) {
					t.Fatalf("at %dm: Next() = %s, want %s", s.min, at, want)
				}
			}
		})
	}
	// A restart finds both taints: the NoExecute one stays.
	tr := newTracker(t, Config{ClearAfter: 10 * time.Minute, NoExecuteAfter: time.Hour})
	tr.Resume(Taint{Value: ValueMultiple, NoExecute: true}, t0)
	if got := tr.Observe(gpus("GPU-0"), t0.Add(time.Minute)); !got.NoExecute {
		t.Fatalf("taint %+v after a restart, want NoExecute kept", got)
	}
}
