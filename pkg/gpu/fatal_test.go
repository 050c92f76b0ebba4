package gpu

import "testing"

func TestFatal(t *testing.T) {
	for _, c := range []struct {
		h      Health
		reason string
		want   bool
	}{
		{Healthy, "xid 79", false},
		{"", "", false},
		{Lost, "", true},
		{Unhealthy, "gpu lost", true},
		{Unhealthy, "HEALTH_LOST", true},
		{Unhealthy, "Xid 79: GPU has fallen off the bus", true},
		{Unhealthy, "xid 48", true},
		{Unhealthy, "double-bit ECC error", true},
		{Unhealthy, "Xid 95: uncontained uncorrectable ECC", true},
		{Unhealthy, "xid 94: contained ECC error", false},
		{Unhealthy, "xid 13: graphics engine exception", false},
		{Unhealthy, "thermal slowdown", false},
	} {
		if got := Fatal(c.h, c.reason); got != c.want {
			t.Errorf("Fatal(%q, %q) = %v, want %v", c.h, c.reason, got, c.want)
		}
	}
}
