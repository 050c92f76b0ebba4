package simnode

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpud/gpud/internal/fileio"
)

// badProfiles are node profiles that must be refused, with what the error
// must say. They also seed FuzzParseProfile.
var badProfiles = []struct {
	name string
	yaml string
	want []string // substrings of the error
}{
	{name: "fractional count", yaml: "name: n\nmodel: L40S\ncount: 4.5\n", want: []string{"[3:8]", "4.5 is not a whole number"}},
	{name: "exponent count", yaml: "name: n\nmodel: L40S\ncount: 4e0\n", want: []string{"[3:8]", "not a whole number"}},
	{name: "quoted count", yaml: "name: n\nmodel: L40S\ncount: \"4\"\n", want: []string{"[3:8]", "not a whole number"}},
	{name: "uneven NUMA split", yaml: "name: n\nmodel: L40S\ncount: 4\nnumaNodes: 3\n", want: []string{`"numaNodes"`, "line 4", "does not divide count 4", "divisor"}},
	{name: "huge count", yaml: "name: n\nmodel: L40S\ncount: 64000\n", want: []string{`"count"`, "want 1 to 16"}},
	{name: "count beyond int64", yaml: "name: n\nmodel: L40S\ncount: 99999999999999999999\n", want: []string{"[3:8]"}},
	{name: "too many NUMA nodes", yaml: "name: n\nmodel: L40S\ncount: 16\nnumaNodes: 16\n", want: []string{`"numaNodes"`, "want 1 to 8"}},
	{name: "negative CUDA version", yaml: "name: n\nmodel: L40S\ncount: 2\ncudaDriverVersion: -1\n", want: []string{`"cudaDriverVersion"`}},
	{name: "driver version without a branch", yaml: "name: n\nmodel: L40S\ncount: 2\ndriverVersion: \"r615\"\n", want: []string{`"driverVersion"`, "line 4", "such as 615.40.01"}},
	{name: "unknown model", yaml: "name: n\nmodel: H900\ncount: 2\n", want: []string{`"model"`, "line 2", "H900"}},
	{name: "name with a newline", yaml: "name: \"a\\nb\"\nmodel: L40S\ncount: 2\n", want: []string{`"name"`, "not a Kubernetes node name"}},
	{name: "uppercase name", yaml: "name: GPU_Node\nmodel: L40S\ncount: 2\n", want: []string{`"name"`, "not a Kubernetes node name"}},
	{name: "count range", yaml: "name: n\nmodel: L40S\ncount: 40\n", want: []string{`"count"`, "line 3"}},
	{name: "unknown field", yaml: "name: n\nmodel: L40S\ncount: 2\ngpuz: 3\n", want: []string{"gpuz"}},
	{name: "nvswitch without nvlink", yaml: "name: n\nmodel: L40S\ncount: 2\ninterconnect: nvswitch\n", want: []string{`"interconnect"`, "line 4"}},
	{name: "missing name", yaml: "model: L40S\ncount: 2\n", want: []string{`"name"`, "required"}},
	{name: "wrong type", yaml: "name: n\nmodel: L40S\ncount: two\n", want: []string{"two", "[3:8]"}},
}

func TestParseProfileErrorsNameFieldAndLine(t *testing.T) {
	for _, tc := range badProfiles {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseProfile([]byte(tc.yaml))
			if !errors.Is(err, ErrBadProfile) {
				t.Fatalf("ParseProfile = %v, want ErrBadProfile", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestLoadProfile(t *testing.T) {
	for _, name := range BuiltinNames() {
		if _, err := LoadProfile(name); err != nil {
			t.Errorf("built-in %s: %v", name, err)
		}
	}
	if _, err := LoadProfile("dgx-z9"); err == nil || !strings.Contains(err.Error(), "dgx-h100") {
		t.Errorf("unknown name error %v should list the built-ins", err)
	}
	example, err := LoadProfile(filepath.Join("..", "..", "deploy", "examples", "simnode.yaml"))
	if err != nil {
		t.Fatalf("example profile: %v", err)
	}
	if example.Count != 4 || example.Model != "H100-SXM5-80GB" {
		t.Fatalf("example profile %+v", example)
	}
	path := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(path, []byte("name: x\nmodel: nope\ncount: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadProfile(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("bad file error %v should name the file", err)
	}
}

func TestLoadProfileCapsTheRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "huge.yaml")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(fileio.MaxConfigBytes + 1); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	if _, err := LoadProfile(path); !errors.Is(err, fileio.ErrTooLarge) {
		t.Fatalf("LoadProfile(huge) = %v, want ErrTooLarge", err)
	}
}
