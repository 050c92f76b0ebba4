package sharingfile

import (
	"errors"
	"testing"

	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/timeslice"
)

// FuzzParseSharingConfig feeds YAML and JSON sharing configs: parsing never
// panics, every error wraps timeslice.ErrInvalid, and a config it accepts
// passes its own validation.
func FuzzParseSharingConfig(f *testing.F) {
	for _, tc := range badConfigs {
		f.Add([]byte(tc.data))
	}
	f.Add([]byte("default: {replicas: 4}\ndevices: {\"0\": {replicas: 8}, MIG-x: {shares: [{memoryMiB: 5, computePercent: 10}]}}\n"))
	f.Add([]byte(`{"devices": {"GPU-a": {"replicas": 2, "limitMemory": true}}}`))
	f.Add([]byte("devices: &a {\"0\": {replicas: 2}}\ndefault: *a\n"))
	f.Add([]byte("devices:\n  GPU-a:\n    shares: [{memoryMiB: 20480, memoryLimitMiB: 30720}, {memoryMiB: 20480}]\n"))
	f.Add([]byte(`{"default": {"shares": [{"memoryMiB": 1024, "memoryLimitMiB": 1023}]}}`))
	inv := gpu.Inventory{GPUs: []gpu.GPU{{Index: 0, UUID: "GPU-a", MemoryBytes: 40 << 30}}}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ParseConfig(data)
		if err != nil {
			if !errors.Is(err, timeslice.ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if err := cfg.Validate(nil); err != nil {
			t.Fatalf("accepted config fails Validate: %v", err)
		}
		if len(cfg.Devices) > timeslice.MaxDeviceKeys {
			t.Fatalf("accepted %d device keys", len(cfg.Devices))
		}
		for _, sh := range cfg.Devices {
			for _, share := range sh.Shares {
				if share.MemoryLimitMiB != 0 && (share.MemoryLimitMiB < share.MemoryMiB || share.MemoryLimitMiB > timeslice.MaxMemoryMiB) {
					t.Fatalf("accepted share %+v", share)
				}
			}
		}
		_ = cfg.ValidateFor(inv)
	})
}
