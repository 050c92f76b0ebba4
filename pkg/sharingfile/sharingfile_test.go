package sharingfile

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpud/gpud/internal/fileio"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/timeslice"
)

// badConfigs are sharing configs users sent that must be refused, with what
// the error must say. They also seed FuzzParseSharingConfig.
var badConfigs = []struct {
	name, data string
	errHas     []string
}{
	{name: "unknown field", data: "default:\n  replicas: 2\n  bogus: 1\n", errHas: []string{"[3:3]", "bogus"}},
	{name: "unknown top-level field JSON", data: `{"defaults": {"replicas": 2}}`, errHas: []string{"[1:", "defaults"}},
	{name: "trailing JSON garbage", data: `{"default": {"replicas": 2}} {"x": 1}`, errHas: []string{"[1:"}},
	{name: "duplicate key", data: "devices:\n  \"0\": {replicas: 2}\n  \"0\": {replicas: 4}\n", errHas: []string{"[3:3]", "already defined"}},
	{name: "fractional replicas", data: "default: {replicas: 2.5}\n", errHas: []string{"[1:21]", "2.5 is not a whole number"}},
	{name: "negative memory", data: "devices: {\"0\": {shares: [{memoryMiB: -1}]}}\n", errHas: []string{"[1:"}},
	{name: "memory beyond uint64", data: "devices: {\"0\": {shares: [{memoryMiB: 18446744073709551617}]}}\n", errHas: []string{"[1:"}},
	{name: "memory sum overflows", data: "devices:\n  GPU-a:\n    shares: [{memoryMiB: 18446744073709551615}, {memoryMiB: 2}]\n",
		errHas: []string{"[2:3]", `device "GPU-a"`, "memoryMiB"}},
	{name: "default of 999999999 MiB", data: "default:\n  shares: [{memoryMiB: 999999999}]\n", errHas: []string{"[1:1]", "default", "999999999"}},
	{name: "negative index", data: "devices:\n  \"-1\": {replicas: 2}\n", errHas: []string{"[2:3]", `"-1"`, "GPU index"}},
	{name: "too many replicas", data: `{"devices": {"0": {"replicas": 1000}}}`, errHas: []string{"[1:14]", "want 2 to 64"}},
	{name: "not a map", data: "- 1\n- 2\n", errHas: []string{"[1:1]"}},
	{name: "exclusive with replicas", data: "devices:\n  \"0\": {replicas: 2}\n  GPU-a:\n    exclusive: true\n    replicas: 2\n",
		errHas: []string{"[3:3]", `device "GPU-a"`, "exclusive keeps the device whole", "contradicts replicas"}},
	{name: "exclusive default with shares", data: "default:\n  exclusive: true\n  shares: [{memoryMiB: 1024}]\n", errHas: []string{"[1:1]", "default", "exclusive"}},
	{name: "exclusive not a bool", data: "devices:\n  \"1\": {exclusive: \"yes\"}\n", errHas: []string{"[2:"}},
	{name: "limit below request", data: "devices:\n  GPU-a:\n    shares: [{memoryMiB: 20480, memoryLimitMiB: 10240}]\n",
		errHas: []string{"[2:3]", `device "GPU-a"`, "share 0", "memoryLimitMiB 10240 is below memoryMiB 20480"}},
	{name: "limit without request", data: "default:\n  shares: [{computePercent: 50, memoryLimitMiB: 10240}]\n", errHas: []string{"[1:1]", "default", "without memoryMiB"}},
	{name: "limit above any GPU", data: "devices: {\"0\": {shares: [{memoryMiB: 1, memoryLimitMiB: 99999999999}]}}\n", errHas: []string{"[1:", "more than any GPU"}},
	{name: "limit misspelt", data: "devices: {\"0\": {shares: [{memoryMiB: 1, memoryLimit: 2}]}}\n", errHas: []string{"[1:", "memoryLimit"}},
}

func TestParseConfigRefuses(t *testing.T) {
	for _, tc := range badConfigs {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.data))
			if !errors.Is(err, timeslice.ErrInvalid) {
				t.Fatalf("ParseConfig = %v, want ErrInvalid", err)
			}
			for _, s := range tc.errHas {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
}

func TestParseConfigYAMLAndJSON(t *testing.T) {
	want := timeslice.Config{Default: &timeslice.Sharing{Replicas: 4}, Devices: map[string]timeslice.Sharing{
		"1": {Shares: []timeslice.Share{{MemoryMiB: 20480, MemoryLimitMiB: 30720, ComputePercent: 50}}}}}
	for _, data := range []string{
		"default: {replicas: 4}\ndevices:\n  \"1\":\n    shares:\n    - {memoryMiB: 20480, memoryLimitMiB: 30720, computePercent: 50}\n",
		`{"default": {"replicas": 4}, "devices": {"1": {"shares": [{"memoryMiB": 20480, "memoryLimitMiB": 30720, "computePercent": 50}]}}}`,
	} {
		got, err := ParseConfig([]byte(data))
		if err != nil {
			t.Fatalf("ParseConfig(%q) = %v", data, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("ParseConfig(%q) = %+v, want %+v", data, got, want)
		}
	}
}

func TestLoadConfigFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	inv := gpu.Inventory{GPUs: []gpu.GPU{{Index: 0, UUID: "GPU-a", MemoryBytes: 40960 << 20}}}

	bad := write("bad.yaml", "default:\n  replicas: 2\n  bogus: 1\n")
	if _, err := LoadConfigFile(bad); err == nil || !strings.HasPrefix(err.Error(), bad+": ") || !strings.Contains(err.Error(), "[3:3]") {
		t.Errorf("LoadConfigFile(bad) = %v, want the path and line 3", err)
	}

	unknown := write("unknown.yaml", "devices:\n  \"0\": {replicas: 2}\n  \"99\": {replicas: 2}\n")
	if _, err := LoadConfigFile(unknown); err != nil {
		t.Errorf("LoadConfigFile without an inventory = %v, want nil (syntax only)", err)
	}
	_, err := LoadConfigFileFor(unknown, inv)
	if !errors.Is(err, timeslice.ErrInvalid) || !strings.Contains(err.Error(), unknown+": [3:3] device \"99\"") {
		t.Errorf("LoadConfigFileFor(unknown index) = %v, want path, line 3 and the key", err)
	}
	big := write("big.yaml", "devices:\n  GPU-a:\n    shares: [{memoryMiB: 40000}, {memoryMiB: 2000}]\n")
	if _, err := LoadConfigFileFor(big, inv); err == nil || !strings.Contains(err.Error(), "[2:3]") || !strings.Contains(err.Error(), "42000 MiB") {
		t.Errorf("LoadConfigFileFor(over memory) = %v, want line 2 and the sum", err)
	}
	over := write("over.yaml", "devices:\n  GPU-a:\n    shares: [{memoryMiB: 20000, memoryLimitMiB: 50000}]\n")
	if _, err := LoadConfigFileFor(over, inv); err == nil || !strings.Contains(err.Error(), "[2:3]") || !strings.Contains(err.Error(), "memoryLimitMiB 50000 is more than the device has (40960 MiB)") {
		t.Errorf("LoadConfigFileFor(limit over memory) = %v, want line 2 and the limit", err)
	}
	if cfg, err := LoadConfigFileFor(write("ok.yaml", "devices: {GPU-a: {replicas: 2}}\n"), inv); err != nil || cfg.Devices["GPU-a"].Replicas != 2 {
		t.Errorf("LoadConfigFileFor(ok) = %+v, %v", cfg, err)
	}

	huge := write("huge.yaml", strings.Repeat("#", fileio.MaxConfigBytes+1))
	if _, err := LoadConfigFile(huge); !errors.Is(err, fileio.ErrTooLarge) {
		t.Errorf("LoadConfigFile(huge) = %v, want ErrTooLarge", err)
	}
	if _, err := LoadConfigFile(filepath.Join(dir, "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LoadConfigFile(missing) = %v, want ErrNotExist", err)
	}
}

// TestParseConfigExclusive: exclusive parses per device and as the default.
func TestParseConfigExclusive(t *testing.T) {
	want := timeslice.Config{Default: &timeslice.Sharing{Replicas: 2}, Devices: map[string]timeslice.Sharing{
		"0": {Exclusive: true}, "GPU-b": {Exclusive: true}}}
	for _, data := range []string{
		"default: {replicas: 2}\ndevices:\n  \"0\": {exclusive: true}\n  GPU-b:\n    exclusive: true\n",
		`{"default": {"replicas": 2}, "devices": {"0": {"exclusive": true}, "GPU-b": {"exclusive": true}}}`,
	} {
		got, err := ParseConfig([]byte(data))
		if err != nil {
			t.Fatalf("ParseConfig(%q) = %v", data, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("ParseConfig(%q) = %+v, want %+v", data, got, want)
		}
	}
}
