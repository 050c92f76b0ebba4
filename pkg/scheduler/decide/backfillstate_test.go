package decide

import "testing"

// TestBackfillStateTryHead: the first unit whose shadow is active becomes
// the head; units before it (inactive: they never fit) do not, no unit is
// checked once there is a head, and at most maxHeadTries are checked.
func TestBackfillStateTryHead(t *testing.T) {
	var b backfillState
	if b.blocked() || b.admit(&unit{key: "x"}, nil) != nil {
		t.Fatal("no head: blocked, or a unit refused")
	}
	b.ensure() // no head: nothing to compute, no panic
	var built []string
	build := func(active bool) func(*unit) *shadow {
		return func(u *unit) *shadow {
			built = append(built, u.key)
			return &shadow{head: u, ready: true, active: active}
		}
	}
	b.tryHead(&unit{key: "never"}, build(false))
	if b.blocked() {
		t.Fatal("a unit that never fits became the head")
	}
	head := &unit{key: "head"}
	b.tryHead(head, build(true))
	b.tryHead(&unit{key: "later"}, build(true))
	if b.head != head || b.shadow == nil || b.shadow.head != head || !b.blocked() {
		t.Fatalf("head %v, want the first active unit", b.head)
	}
	if len(built) != 2 || b.tries != 2 {
		t.Errorf("checked %v (%d tries), want never and head only", built, b.tries)
	}

	var capped backfillState
	built = nil
	for range maxHeadTries + 3 {
		capped.tryHead(&unit{key: "never"}, build(false))
	}
	capped.tryHead(&unit{key: "fits"}, build(true))
	if len(built) != maxHeadTries || capped.blocked() {
		t.Errorf("checked %d units, head %v; want %d checked, no head", len(built), capped.head, maxHeadTries)
	}
}
