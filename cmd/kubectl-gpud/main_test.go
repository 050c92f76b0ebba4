package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpud/gpud/pkg/kubectlgpud"
)

// TestRunBadInput checks the command line's errors before any API call:
// each names what is wrong and what to do.
func TestRunBadInput(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "config")
	if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		args    []string
		wantErr error
		want    string
	}{
		{"no command", nil, nil, "no command given"},
		{"unknown command", []string{"gpus"}, kubectlgpud.ErrUsage, `unknown command "gpus"`},
		{"why without a pod", []string{"why", "-n", "x"}, kubectlgpud.ErrUsage, "kubectl gpud why POD"},
		{"bad output", []string{"nodes", "-o", "yaml"}, kubectlgpud.ErrUsage, `output "yaml"`},
		{"version argument", []string{"version", "x"}, nil, "takes none"},
		{"bad timeout", []string{"nodes", "--request-timeout", "0s"}, nil, "--request-timeout"},
		{"no cluster", []string{"nodes", "--kubeconfig", kubeconfig}, nil, "kubeconfig"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := run(t.Context(), tc.args, &out, &errOut)
			if err == nil || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("run(%q) = %v, want an error saying %q", tc.args, err, tc.want)
			}
		})
	}
}

// TestRunVersion checks the version the release stamps in.
func TestRunVersion(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), []string{"version"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "kubectl-gpud "+version+"\n" {
		t.Errorf("version printed %q", got)
	}
}

// TestRunFlagsAfterArguments checks kubectl's order: flags after the
// command and the pod.
func TestRunFlagsAfterArguments(t *testing.T) {
	var out, errOut bytes.Buffer
	err := run(t.Context(), []string{"why", "big-0", "-n", "Bad_NS"}, &out, &errOut)
	if !errors.Is(err, kubectlgpud.ErrUsage) || !strings.Contains(err.Error(), `namespace "Bad_NS"`) {
		t.Fatalf("run = %v, want the namespace refused (the flag after the pod was parsed)", err)
	}
}
