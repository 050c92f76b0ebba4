package main

import (
	"bytes"
	"fmt"
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
		{"unknown estimates", []string{"--nodes", nodes, "--jobs", bad, "--estimates", "none,guess"}, `estimates "guess": want one of user, none, learned, user+learned, oracle`},
		{"estimates twice", []string{"--nodes", nodes, "--jobs", bad, "--estimates", "none,none"}, `"none" given twice`},
		{"learn quantile", []string{"--nodes", nodes, "--jobs", bad, "--learn-quantile", "1"}, "--learn-quantile 1: want a number in (0, 0.999]"},
		{"failure rate", []string{"--nodes", nodes, "--jobs", bad, "--gpu-failures", "-0.1"}, "--gpu-failures -0.1: want a number in [0, 10]"},
		{"bursts", []string{"--nodes", nodes, "--jobs", bad, "--failure-bursts", "NaN"}, "--failure-bursts NaN"},
		{"healing", []string{"--nodes", nodes, "--jobs", bad, "--healing", "pray"}, `healing "pray": want heal or manual`},
		{"repair", []string{"--nodes", nodes, "--jobs", bad, "--repair-s", "0"}, "--repair-s 0: want 1..2592000"},
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

// TestSimJobsEstimatesAndFailures replays a small written trace with every
// estimate source compared, then with failures under both healing modes,
// and checks each gets a labelled column and its rows.
func TestSimJobsEstimatesAndFailures(t *testing.T) {
	dir := t.TempDir()
	nodes := filepath.Join(dir, "nodes.csv")
	if err := os.WriteFile(nodes, []byte("sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,8,A100\nn1,64000,262144,8,A100\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("id,submit_s,queue,pods,cpu_milli,memory_mib,num_gpu,gpu_milli,runtime_s,checkpointable\n")
	for i := range 200 {
		gpus, runtime := 1, 600+i%7*10
		if i%5 == 0 {
			gpus, runtime = 8, 7200+i%3*100
		}
		fmt.Fprintf(&b, "j%03d,%d,q,1,1000,1024,%d,0,%d,true\n", i, i*300, gpus, runtime)
	}
	jobsPath := filepath.Join(dir, "jobs.csv")
	if err := os.WriteFile(jobsPath, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if err := runSimJobs(t.Context(), []string{"--nodes", nodes, "--jobs", jobsPath, "--policies", "gpud", "--estimates", "none,learned,oracle", "-q"}, &stdout, &stderr); err != nil {
		t.Fatalf("sim jobs --estimates: %v\n%s", err, stderr.String())
	}
	rep := stdout.String()
	for _, want := range []string{"gpud/none", "gpud/learned", "gpud/oracle", "median |est-run|/run", "p90 |est-run|/run", "jobs with an estimate", "vs gpud/oracle"} {
		if !strings.Contains(rep, want) {
			t.Errorf("report lacks %q:\n%s", want, rep)
		}
	}
	stdout.Reset()
	if err := runSimJobs(t.Context(), []string{"--nodes", nodes, "--jobs", jobsPath, "--policies", "gpud,fifo", "--gpu-failures", "2", "--failure-seed", "5", "--repair-s", "3600", "-q"}, &stdout, &stderr); err != nil {
		t.Fatalf("sim jobs --gpu-failures: %v\n%s", err, stderr.String())
	}
	rep = stdout.String()
	for _, want := range []string{"gpud/heal", "gpud/manual", "fifo/heal", "fifo/manual", "GPU-h lost to failures", "GPU failure events", "GPU-h out for repair"} {
		if !strings.Contains(rep, want) {
			t.Errorf("report lacks %q:\n%s", want, rep)
		}
	}
	if t.Failed() || testing.Verbose() {
		t.Log(rep)
	}
}
