package heal

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func FuzzParseAction(f *testing.F) {
	for _, s := range []string{"", "evict", "delete", "keep", " Keep ", "kep", strings.Repeat("x", 100), "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseAction(s, Evict)
		switch a {
		case Evict, Delete, Keep:
		default:
			t.Fatalf("ParseAction(%q) = %q", s, a)
		}
		if err != nil {
			if a != Evict {
				t.Fatalf("error %v with action %q, want the default", err, a)
			}
			if len(err.Error()) > 300 {
				t.Fatalf("error of %d bytes", len(err.Error()))
			}
		}
		if utf8.ValidString(s) && err == nil && strings.TrimSpace(s) != "" && Action(strings.ToLower(strings.TrimSpace(s))) != a {
			t.Fatalf("ParseAction(%q) = %q without error", s, a)
		}
	})
}
