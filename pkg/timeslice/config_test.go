package timeslice

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gpud/gpud/pkg/gpu"
)

// a100Node is two 40 GB GPUs; the second has a 10 GB MIG device.
func a100Node() gpu.Inventory {
	return gpu.Inventory{GPUs: []gpu.GPU{
		{Index: 0, UUID: "GPU-a", MemoryBytes: 40960 << 20},
		{Index: 1, UUID: "GPU-b", MemoryBytes: 40960 << 20, MIGEnabled: true,
			MIGDevices: []gpu.MIGDevice{{UUID: "MIG-b1", MemoryBytes: 9984 << 20}}},
	}}
}

func TestValidateFor(t *testing.T) {
	invented := map[string]Sharing{}
	for i := range 100000 {
		invented[fmt.Sprintf("GPU-invented-%d", i)] = Sharing{Replicas: 2}
	}
	tests := []struct {
		name   string
		cfg    Config
		errHas []string // empty: valid
	}{
		{name: "by uuid, index and MIG uuid", cfg: Config{Default: &Sharing{Replicas: 4}, Devices: map[string]Sharing{
			"GPU-a": {Replicas: 2}, "1": {Replicas: 8}, "MIG-b1": {Shares: []Share{{MemoryMiB: 4096}, {MemoryMiB: 4096}}}}}},
		{name: "unknown index", cfg: Config{Devices: map[string]Sharing{"99": {Replicas: 2}}}, errHas: []string{`"99"`, "no GPU 99", "gpud inventory"}},
		{name: "negative index", cfg: Config{Devices: map[string]Sharing{"-1": {Replicas: 2}}}, errHas: []string{`"-1"`, "GPU index"}},
		{name: "padded index", cfg: Config{Devices: map[string]Sharing{"01": {Replicas: 2}}}, errHas: []string{`"01"`, "GPU index"}},
		{name: "unknown uuid", cfg: Config{Devices: map[string]Sharing{"GPU-zzz": {Replicas: 2}}}, errHas: []string{"GPU-zzz", "no GPU GPU-zzz"}},
		{name: "unknown MIG uuid", cfg: Config{Devices: map[string]Sharing{"MIG-zzz": {Replicas: 2}}}, errHas: []string{"no MIG device MIG-zzz"}},
		{name: "100,000 invented keys", cfg: Config{Devices: invented}, errHas: []string{"100000 device keys", fmt.Sprint(MaxDeviceKeys)}},
		{name: "memory sum overflows uint64", cfg: Config{Devices: map[string]Sharing{"GPU-a": {Shares: []Share{{MemoryMiB: 18446744073709551615}, {MemoryMiB: 2}}}}},
			errHas: []string{`"GPU-a"`, "memoryMiB"}},
		{name: "overflow without a huge single share", cfg: Config{Devices: map[string]Sharing{"GPU-a": {Shares: []Share{{MemoryMiB: 40000}, {MemoryMiB: 2000}}}}},
			errHas: []string{`"GPU-a"`, "42000 MiB", "40960 MiB"}},
		{name: "default bigger than every GPU", cfg: Config{Default: &Sharing{Shares: []Share{{MemoryMiB: 999999999}}}}, errHas: []string{"default", "999999999"}},
		{name: "default bigger than this node's GPUs", cfg: Config{Default: &Sharing{Shares: []Share{{MemoryMiB: 50000}}}}, errHas: []string{"default", "GPU 0 GPU-a", "list that GPU"}},
		{name: "default only for unlisted GPUs", cfg: Config{Default: &Sharing{Shares: []Share{{MemoryMiB: 30000}}},
			Devices: map[string]Sharing{"0": {Replicas: 2}, "GPU-b": {Replicas: 2}}}},
		{name: "replicas beyond the bound", cfg: Config{Devices: map[string]Sharing{"0": {Replicas: MaxReplicas + 1}}}, errHas: []string{`"0"`, "want 2 to 64"}},
		{name: "exclusive GPUs", cfg: Config{Default: &Sharing{Replicas: 2}, Devices: map[string]Sharing{"GPU-a": {Exclusive: true}, "1": {Exclusive: true}}}},
		{name: "exclusive with replicas", cfg: Config{Devices: map[string]Sharing{"GPU-a": {Exclusive: true, Replicas: 2}}},
			errHas: []string{`device "GPU-a"`, "exclusive", "contradicts replicas"}},
		{name: "exclusive with shares by index", cfg: Config{Devices: map[string]Sharing{"1": {Exclusive: true, Shares: []Share{{MemoryMiB: 1024}}}}},
			errHas: []string{`device "1"`, "exclusive"}},
		{name: "exclusive default with limitMemory", cfg: Config{Default: &Sharing{Exclusive: true, LimitMemory: true}},
			errHas: []string{"default: ", "exclusive"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.ValidateFor(a100Node())
			if len(tc.errHas) == 0 {
				if err != nil {
					t.Fatalf("ValidateFor = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("ValidateFor = %v, want ErrInvalid", err)
			}
			for _, s := range tc.errHas {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
			if len(err.Error()) > 1000 {
				t.Errorf("error is %d bytes long, want one short line per problem", len(err.Error()))
			}
		})
	}
}

func TestValidateMapRefusesUnknownKeys(t *testing.T) {
	mem := map[string]uint64{"GPU-a": 40960, "0": 40960}
	if err := (Config{Devices: map[string]Sharing{"99": {Replicas: 2}}}).Validate(mem); !errors.Is(err, ErrInvalid) {
		t.Fatalf("unknown index with a memory map: %v, want ErrInvalid", err)
	}
	if err := (Config{Devices: map[string]Sharing{"99": {Replicas: 2}}}).Validate(nil); err != nil {
		t.Fatalf("syntax-only check of index 99: %v, want nil", err)
	}
	if err := (Config{Default: &Sharing{Shares: []Share{{MemoryMiB: 50000}}}}).Validate(mem); !errors.Is(err, ErrInvalid) {
		t.Fatalf("default bigger than every device: %v, want ErrInvalid", err)
	}
}

// TestExclusiveOnly: a GPU is exclusive-only by its UUID entry, else its
// index entry, else the default, as Config.For resolves entries.
func TestExclusiveOnly(t *testing.T) {
	inv := a100Node()
	inv.GPUs = append(inv.GPUs, gpu.GPU{Index: 2, UUID: "GPU-c"})
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string
	}{
		{"none", Config{Default: &Sharing{Replicas: 2}}, nil},
		{"by uuid and index", Config{Devices: map[string]Sharing{"GPU-a": {Exclusive: true}, "2": {Exclusive: true}, "MIG-b1": {Exclusive: true}}}, []string{"GPU-a", "GPU-c"}},
		{"uuid entry wins over index", Config{Devices: map[string]Sharing{"GPU-a": {Replicas: 2}, "0": {Exclusive: true}}}, nil},
		{"default for unlisted", Config{Default: &Sharing{Exclusive: true}, Devices: map[string]Sharing{"1": {Replicas: 2}}}, []string{"GPU-a", "GPU-c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.cfg.ExclusiveOnly(inv)
			if len(got) != len(tc.want) {
				t.Fatalf("ExclusiveOnly = %v, want %v", got, tc.want)
			}
			for _, u := range tc.want {
				if !got[u] {
					t.Errorf("ExclusiveOnly = %v, want %s in it", got, u)
				}
			}
			for _, g := range inv.GPUs {
				if _, shared := tc.cfg.For(g.UUID, g.Index); shared && got[g.UUID] {
					t.Errorf("GPU %s both shared and exclusive", g.UUID)
				}
			}
		})
	}
}
