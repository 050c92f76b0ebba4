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
		{"unknown objective term", []string{"--nodes", nodes, "--jobs", bad, "--objectives", "util=1;speed=2"},
			`--objectives: line 1, setting "speed=2": invalid objective: unknown term "speed": want one of util, wait, fair, energy, cost`},
		{"negative weight", []string{"--nodes", nodes, "--jobs", bad, "--objectives", "energy=-1"}, "--objectives: line 1, setting \"energy=-1\": invalid objective: energy=-1: want a number in [0, 1e+06]"},
		{"all weights zero", []string{"--nodes", nodes, "--jobs", bad, "--objectives", "util=0"}, "--objectives: line 1, setting \"util=0\": invalid objective: every weight is 0: give at least one term a positive weight"},
		{"objectives file missing", []string{"--nodes", nodes, "--jobs", bad, "--objectives", filepath.Join(dir, "nope.txt")}, "--objectives \"" + filepath.Join(dir, "nope.txt") + "\": not term=weight settings, and as a file: open"},
		{"gpu models", []string{"--nodes", nodes, "--jobs", bad, "--gpu-models", bad}, "--gpu-models: " + bad + ":1: invalid objective: column \"id\""},
		{"unknown policy lists new ones", []string{"--nodes", nodes, "--jobs", bad, "--policies", "srtf"}, "want one of gpud, fifo, no-backfill, sjf, las"},
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

// TestSimJobsObjectives sweeps weight settings next to the sjf and las
// policies and checks each gets a labelled column and the objective rows;
// without --objectives, sjf/las or --gpu-models the rows are not printed.
func TestSimJobsObjectives(t *testing.T) {
	dir := t.TempDir()
	nodes := filepath.Join(dir, "nodes.csv")
	if err := os.WriteFile(nodes, []byte("sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,4,V100M32\nn1,64000,262144,8,T4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("id,submit_s,queue,pods,cpu_milli,memory_mib,num_gpu,gpu_milli,runtime_s,estimate_s\n")
	for i := range 100 {
		fmt.Fprintf(&b, "j%03d,%d,q,1,1000,1024,%d,0,%d,%d\n", i, i*200, 1+i%4/3*3, 600+i%9*400, 900+i%9*400)
	}
	jobsPath := filepath.Join(dir, "jobs.csv")
	models := filepath.Join(dir, "models.csv")
	sweep := filepath.Join(dir, "sweep.txt")
	for p, c := range map[string]string{jobsPath: b.String(), models: "model,price_per_gpu_hour\nV100M32,2.5\nT4,0.5\n",
		sweep: "# the operator's candidates\ndefault\nutil=1,wait=1\nenergy=1\ncost=1\n"} {
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var stdout, stderr bytes.Buffer
	if err := runSimJobs(t.Context(), []string{"--nodes", nodes, "--jobs", jobsPath, "--policies", "gpud", "--objectives", sweep, "--gpu-models", models, "-q"}, &stdout, &stderr); err != nil {
		t.Fatalf("sim jobs --objectives: %v\n%s", err, stderr.String())
	}
	rep := stdout.String()
	for _, want := range []string{"gpud/default", "gpud/util=1,wait=1", "gpud/energy=1", "gpud/cost=1", "GPUs unallocated % (avg)",
		"Jain fairness (queues)", "GPU energy (kWh)", "GPU cost", "vs gpud/cost=1"} {
		if !strings.Contains(rep, want) {
			t.Errorf("report lacks %q:\n%s", want, rep)
		}
	}
	stdout.Reset()
	if err := runSimJobs(t.Context(), []string{"--nodes", nodes, "--jobs", jobsPath, "--policies", "fifo,sjf,las", "-q"}, &stdout, &stderr); err != nil {
		t.Fatalf("sim jobs --policies fifo,sjf,las: %v\n%s", err, stderr.String())
	}
	if rep := stdout.String(); !strings.Contains(rep, "vs las") || !strings.Contains(rep, "GPU energy (kWh)") {
		t.Errorf("report lacks the las column or the objective rows:\n%s", rep)
	}
	stdout.Reset()
	if err := runSimJobs(t.Context(), []string{"--nodes", nodes, "--jobs", jobsPath, "--policies", "gpud,fifo", "-q"}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stdout.String(), "GPU energy") {
		t.Errorf("objective rows printed without being asked for:\n%s", stdout.String())
	}
	if t.Failed() || testing.Verbose() {
		t.Log(rep)
	}
}
