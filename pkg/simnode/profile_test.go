package simnode

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseProfileErrorsNameFieldAndLine(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string // substrings of the error
	}{
		{name: "unknown model", yaml: "name: n\nmodel: H900\ncount: 2\n", want: []string{`"model"`, "line 2", "H900"}},
		{name: "count range", yaml: "name: n\nmodel: L40S\ncount: 40\n", want: []string{`"count"`, "line 3"}},
		{name: "unknown field", yaml: "name: n\nmodel: L40S\ncount: 2\ngpuz: 3\n", want: []string{"gpuz"}},
		{name: "nvswitch without nvlink", yaml: "name: n\nmodel: L40S\ncount: 2\ninterconnect: nvswitch\n", want: []string{`"interconnect"`, "line 4"}},
		{name: "missing name", yaml: "model: L40S\ncount: 2\n", want: []string{`"name"`, "required"}},
		{name: "wrong type", yaml: "name: n\nmodel: L40S\ncount: two\n", want: []string{"Count", "3:8"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseProfile([]byte(tc.yaml))
			if err == nil {
				t.Fatal("ParseProfile succeeded")
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
