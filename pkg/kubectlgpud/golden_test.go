package kubectlgpud

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the output")

// TestGolden runs each command on the fixture cluster through a fake
// clientset and compares what it prints with testdata/<name>.golden
// (go test -run TestGolden -update rewrites them).
func TestGolden(t *testing.T) {
	tests := []struct {
		name string
		opt  Options
	}{
		{"nodes", Options{Command: "nodes"}},
		{"nodes-json", Options{Command: "nodes", Output: OutputJSON}},
		{"pods-all", Options{Command: "pods", AllNamespaces: true}},
		{"pods-team-a", Options{Command: "pods", Namespace: "team-a"}},
		{"pods-json", Options{Command: "pods", Namespace: "team-b", Output: OutputJSON}},
		{"why-big", Options{Command: "why", Args: []string{"big-0"}, Namespace: "team-a"}},
		{"why-big-json", Options{Command: "why", Args: []string{"big-0"}, Namespace: "team-a", Output: OutputJSON}},
		{"why-mig", Options{Command: "why", Args: []string{"mig-wait"}, Namespace: "team-a"}},
		{"why-device-plugin", Options{Command: "why", Args: []string{"dp-wait"}, Namespace: "team-b"}},
		{"why-bound", Options{Command: "why", Args: []string{"infer-1"}, Namespace: "team-b"}},
		{"queues", Options{Command: "queues"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := Run(t.Context(), fakeClient(t), tc.opt, &out); err != nil {
				t.Fatalf("Run(%+v): %v", tc.opt, err)
			}
			golden(t, tc.name, out.Bytes())
		})
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run TestGolden -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (go test -update rewrites it):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// TestBadInput checks that a command line the plugin cannot run fails
// with an error that names the problem and what to do.
func TestBadInput(t *testing.T) {
	tests := []struct {
		name    string
		opt     Options
		wantErr error
		want    []string
	}{
		{"unknown command", Options{Command: "gpus"}, ErrUsage, []string{`unknown command "gpus"`, "nodes, pods, why, queues"}},
		{"no command", Options{}, ErrUsage, []string{"no command given"}},
		{"why without pod", Options{Command: "why"}, ErrUsage, []string{"kubectl gpud why POD"}},
		{"why two pods", Options{Command: "why", Args: []string{"a", "b"}}, ErrUsage, []string{"one pod name"}},
		{"why bad name", Options{Command: "why", Args: []string{"Not/A/Pod"}}, ErrUsage, []string{`"Not/A/Pod" is not a pod name`}},
		{"why all namespaces", Options{Command: "why", Args: []string{"big-0"}, AllNamespaces: true}, ErrUsage, []string{"not -A"}},
		{"missing pod", Options{Command: "why", Args: []string{"nope"}, Namespace: "team-a"}, ErrNotFound,
			[]string{`pod "nope" in namespace "team-a": not found`, "kubectl get pods -n team-a"}},
		{"bad output", Options{Command: "nodes", Output: "yaml"}, ErrUsage, []string{`output "yaml"`, "table or json"}},
		{"bad namespace", Options{Command: "pods", Namespace: "Team A"}, ErrUsage, []string{`namespace "Team A"`}},
		{"nodes argument", Options{Command: "nodes", Args: []string{"gpu-a"}}, ErrUsage, []string{"nodes takes no arguments"}},
		{"bad prefix", Options{Command: "nodes", ResourcePrefix: "nvidia"}, ErrUsage, []string{"resource prefix"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := Run(t.Context(), fakeClient(t), tc.opt, &out)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Run(%+v) = %v, want %v", tc.opt, err, tc.wantErr)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if out.Len() > 0 {
				t.Errorf("printed %q on error", out.String())
			}
		})
	}
}
