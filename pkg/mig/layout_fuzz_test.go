package mig

import (
	"errors"
	"testing"
)

// FuzzParseLayoutFile feeds layout files (YAML and JSON): parsing never
// panics, errors wrap ErrBadLayout, and an accepted file resolves every
// config on a dgx-a100 without asking any GPU for more than
// MaxSlicesPerGPU slices.
func FuzzParseLayoutFile(f *testing.F) {
	for _, tc := range badLayouts {
		if len(tc.file) < 4096 {
			f.Add([]byte(tc.file))
		}
	}
	f.Add([]byte(testLayouts))
	f.Add([]byte(`{"version": "v1", "mig-configs": {"a": [{"devices": [0, "GPU-x"], "mig-enabled": true, "mig-devices": {"3g.20gb": 2}}]}}`))
	st := a100(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		lf, err := ParseLayoutFile(data)
		if err != nil {
			if !errors.Is(err, ErrBadLayout) {
				t.Fatalf("error %v does not wrap ErrBadLayout", err)
			}
			return
		}
		for _, name := range lf.Names() {
			d, err := lf.Resolve(name, st)
			if err != nil {
				continue
			}
			for i, g := range d.GPUs {
				if len(g.Slices) > MaxSlicesPerGPU {
					t.Fatalf("config %q gpu %d wants %d slices", name, i, len(g.Slices))
				}
			}
		}
	})
}
