package strictyaml

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestUnmarshal(t *testing.T) {
	type inner struct {
		Count int `yaml:"count"`
	}
	type doc struct {
		Name  string           `yaml:"name"`
		Items map[string]inner `yaml:"items"`
	}
	tests := []struct {
		name, data string
		errHas     string // empty: decodes
	}{
		{name: "yaml", data: "name: a\nitems: {x: {count: 3}}\n"},
		{name: "json", data: `{"name": "a", "items": {"x": {"count": 3}}}`},
		{name: "fraction", data: "items:\n  x:\n    count: 4.5\n", errHas: "[3:12] 4.5 is not a whole number"},
		{name: "exponent", data: `{"items": {"x": {"count": 1e3}}}`, errHas: "1e3 is not a whole number"},
		{name: "nan", data: "items: {x: {count: .nan}}\n", errHas: "not a whole number"},
		{name: "unknown field", data: "name: a\nbogus: 1\n", errHas: "[2:1]"},
		{name: "duplicate key", data: "name: a\nname: b\n", errHas: "[2:1]"},
		{name: "syntax", data: "name: [a\n", errHas: "["},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var d doc
			err := Unmarshal([]byte(tc.data), &d)
			if tc.errHas == "" {
				if err != nil || d.Items["x"].Count != 3 {
					t.Fatalf("Unmarshal = %+v, %v", d, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.errHas) {
				t.Fatalf("Unmarshal = %v, want an error with %q", err, tc.errHas)
			}
		})
	}
}

func TestUnmarshalRanges(t *testing.T) {
	var v struct {
		U uint64 `yaml:"u"`
		I int    `yaml:"i"`
	}
	for _, data := range []string{"u: -1\n", "u: 18446744073709551616\n", "i: 9223372036854775808\n", `u: "4.5"` + "\n", "i: 1_000\n"} {
		err := Unmarshal([]byte(data), &v)
		if data == "i: 1_000\n" {
			if err != nil || v.I != 1000 {
				t.Errorf("Unmarshal(%q) = %d, %v", data, v.I, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "[1:4]") {
			t.Errorf("Unmarshal(%q) = %v, want an error at [1:4]", data, err)
		}
	}
}

func TestUnmarshalLibraryPanicIsAnError(t *testing.T) {
	var v struct {
		Devices map[string]struct {
			Shares []struct{} `yaml:"shares"`
		} `yaml:"devices"`
	}
	// Found by FuzzParseSharingConfig: go-yaml v1.19.2 dereferences nil.
	err := Unmarshal([]byte("devices:\n 0:\n  shares: !0000000000 00000"), &v)
	if !errors.Is(err, ErrMalformed) {
		t.Fatalf("Unmarshal = %v, want ErrMalformed", err)
	}
}

func TestUnmarshalRefusesWideMappings(t *testing.T) {
	var b strings.Builder
	b.WriteString("items:\n")
	for i := range MaxKeysPerLevel + 1 {
		fmt.Fprintf(&b, "  c%d: {count: 1}\n", i)
	}
	var v map[string]map[string]map[string]int
	err := Unmarshal([]byte(b.String()), &v)
	if !errors.Is(err, ErrTooWide) || !strings.Contains(err.Error(), fmt.Sprintf("[%d:3]", MaxKeysPerLevel+2)) {
		t.Fatalf("Unmarshal(%d keys) = %v, want ErrTooWide at its line", MaxKeysPerLevel+1, err)
	}
	// Many small mappings in a list are fine: each item starts a block.
	b.Reset()
	b.WriteString("items:\n")
	for range MaxKeysPerLevel + 1 {
		b.WriteString("- a: 1\n  b: 2\n")
	}
	var w map[string][]map[string]int
	if err := Unmarshal([]byte(b.String()), &w); err != nil || len(w["items"]) != MaxKeysPerLevel+1 {
		t.Fatalf("Unmarshal(list of maps) = %d items, %v", len(w["items"]), err)
	}
}

// TestParse checks Parse has Unmarshal's guards and its errors carry their
// place: a syntax error and a too-wide mapping are *Error with a line.
func TestParse(t *testing.T) {
	if f, err := Parse([]byte("a: 1\nb: [x, y]\n")); err != nil || len(f.Docs) != 1 {
		t.Fatalf("Parse = %v, %v", f, err)
	}
	var e *Error
	_, err := Parse([]byte("a: 1\nb: [x\n"))
	if !errors.As(err, &e) || e.Line == 0 || !strings.HasPrefix(err.Error(), fmt.Sprintf("[%d:%d] ", e.Line, e.Column)) {
		t.Errorf("Parse(syntax error) = %v, want an *Error with its line", err)
	}
	var b strings.Builder
	for i := range MaxKeysPerLevel + 1 {
		fmt.Fprintf(&b, "k%d: v\n", i)
	}
	_, err = Parse([]byte(b.String()))
	if !errors.As(err, &e) || !errors.Is(err, ErrTooWide) || e.Line != MaxKeysPerLevel+1 {
		t.Errorf("Parse(%d keys) = %v, want ErrTooWide at line %d", MaxKeysPerLevel+1, err, MaxKeysPerLevel+1)
	}
}
