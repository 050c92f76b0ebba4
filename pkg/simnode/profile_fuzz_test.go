package simnode

import (
	"errors"
	"testing"
)

// FuzzParseProfile feeds node profiles: parsing never panics, errors wrap
// ErrBadProfile, and an accepted profile builds a node within the bounds.
func FuzzParseProfile(f *testing.F) {
	for _, tc := range badProfiles {
		f.Add([]byte(tc.yaml))
	}
	f.Add([]byte("name: n\nmodel: H100-SXM5-80GB\ncount: 8\nnumaNodes: 2\ninterconnect: nvswitch\ngpusPerPCIeSwitch: 2\n"))
	f.Add([]byte(`{"name": "j", "model": "A100-SXM4-40GB", "count": 4, "numaNodes": 4, "seed": -3}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParseProfile(data)
		if err != nil {
			if !errors.Is(err, ErrBadProfile) {
				t.Fatalf("error %v does not wrap ErrBadProfile", err)
			}
			return
		}
		if p.Count < 1 || p.Count > MaxGPUs || p.Count%p.NUMANodes != 0 {
			t.Fatalf("accepted %+v", p)
		}
		n, err := New(p)
		if err != nil {
			t.Fatalf("New(accepted profile %+v) = %v", p, err)
		}
		if got, _ := n.DeviceGetCount(); got != p.Count {
			t.Fatalf("node has %d GPUs, profile %d", got, p.Count)
		}
	})
}
