package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpud/gpud/internal/openbdata"
)

var openbDir = openbdata.Dir()

// TestSimJobsEndToEnd generates a small trace from the openb pod list and
// replays it under all three policies, checking the report's shape: every
// policy has a column, ratios are printed, and every job is accounted for.
func TestSimJobsEndToEnd(t *testing.T) {
	nodes := filepath.Join(openbDir, "openb_node_list_gpu_node.csv")
	pods := filepath.Join(openbDir, "openb_pod_list_default.csv")
	if _, err := os.Stat(pods); err != nil {
		t.Skipf("openb trace not available: %v", err)
	}
	out := filepath.Join(t.TempDir(), "jobs.csv")
	var stdout, stderr bytes.Buffer
	if err := runSimJobsGen(t.Context(), []string{"--pods", pods, "--nodes", nodes, "--seed", "7", "--jobs", "1500", "--load", "1.1", "-o", out}, &stdout, &stderr); err != nil {
		t.Fatalf("jobs-gen: %v\n%s", err, stderr.String())
	}
	stdout.Reset()
	if err := runSimJobs(t.Context(), []string{"--nodes", nodes, "--jobs", out, "-q"}, &stdout, &stderr); err != nil {
		t.Fatalf("sim jobs: %v\n%s", err, stderr.String())
	}
	rep := stdout.String()
	for _, want := range []string{"gpud", "fifo", "no-backfill", "vs fifo", "vs no-backfill", "avg JCT (h)", "p95 queueing delay (h)",
		"GPU-hours lost to preemption", "per-queue GPU share", "avg gang wait (h)", "utilization t01/12"} {
		if !strings.Contains(rep, want) {
			t.Errorf("report lacks %q:\n%s", want, rep)
		}
	}
	if t.Failed() || testing.Verbose() {
		t.Log(rep)
	}

	// The documented queue file replaces the default queues.
	stdout.Reset()
	if err := runSimJobs(t.Context(), []string{"--nodes", nodes, "--jobs", out, "--queues", "../../docs/queues-example.yaml", "--policies", "gpud", "-q"}, &stdout, &stderr); err != nil {
		t.Fatalf("sim jobs --queues: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), "prod (entitled") {
		t.Errorf("report with --queues lacks the prod queue:\n%s", stdout.String())
	}
}

func TestSimJobsErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.csv")
	if err := os.WriteFile(bad, []byte("id,submit_s,queue,cpu_milli,memory_mib,num_gpu,gpu_milli,runtime_s\na,0,q,1000,10,1,2000,60\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	nodes := filepath.Join(dir, "nodes.csv")
	if err := os.WriteFile(nodes, []byte("sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,8,A100\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"missing flags", []string{"--nodes", nodes}, "--nodes and --jobs are required"},
		{"unknown policy", []string{"--nodes", nodes, "--jobs", bad, "--policies", "lifo"}, `policy "lifo"`},
		{"malformed row names file and line", []string{"--nodes", nodes, "--jobs", bad}, bad + ":2: column gpu_milli"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			err := runSimJobs(t.Context(), tc.args, &out, &errb)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}
