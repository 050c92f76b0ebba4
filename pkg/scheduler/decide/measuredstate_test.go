package decide

import (
	"testing"

	"github.com/gpud/gpud/pkg/gputel"
	"github.com/gpud/gpud/pkg/scheduler/view"
)

// TestMeasuredStateReleasing: placements use the measured telemetry,
// except inside what-ifs that release running pods, where they use the
// strict one (no overcommit room) until the last such what-if ends;
// without overcommit there is no strict one and measured holds.
func TestMeasuredStateReleasing(t *testing.T) {
	measured, strict := &view.Measured{}, &view.Measured{}
	m := measuredState{measured: measured, strict: strict}
	if m.now() != measured {
		t.Fatal("no what-if: not the measured telemetry")
	}
	m.enter(1)
	if m.now() != strict {
		t.Fatal("releasing 1 pod: not the strict telemetry")
	}
	m.enter(2) // a what-if inside another (a preemption search in a backfill check)
	if m.now() != strict {
		t.Fatal("releasing 3 pods: not the strict telemetry")
	}
	m.leave(2)
	if m.now() != strict {
		t.Fatal("still releasing 1: not the strict telemetry")
	}
	m.leave(1)
	if m.now() != measured || m.releasing != 0 {
		t.Fatalf("after the what-ifs (releasing %d): not the measured telemetry", m.releasing)
	}
	plain := measuredState{measured: measured}
	plain.enter(1)
	if plain.now() != measured {
		t.Error("no overcommit, releasing: not the measured telemetry")
	}
}

// TestNewMeasuredState: no telemetry listener, no measurements; with one,
// the measured telemetry, and a separate strict one only with overcommit.
func TestNewMeasuredState(t *testing.T) {
	e := newEnv(t)
	e.node("a", "dgx-h100", nil)
	if m := newMeasuredState(Config{Overcommit: true}, e.snapshot()); m.on() || m.now() != nil || m.strict != nil {
		t.Fatalf("no listener: %+v", m)
	}
	e.reportGPU("a", 0, gputel.Device{MemoryUsedBytes: uint64(gib)})
	m := newMeasuredState(Config{}, e.snapshot())
	if !m.on() || m.strict != nil {
		t.Errorf("listener, no overcommit: on %v, strict %v; want on, no strict", m.on(), m.strict)
	}
	m = newMeasuredState(Config{Overcommit: true}, e.snapshot())
	if !m.on() || m.strict == nil || m.strict == m.measured {
		t.Errorf("listener, overcommit: on %v, strict %p, measured %p; want on, a separate strict", m.on(), m.strict, m.measured)
	}
}
