package jobsim

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeInput writes a two-node file and a three-job trace in queue q.
func writeInput(t *testing.T) (nodes, jobs string) {
	t.Helper()
	dir := t.TempDir()
	nodes, jobs = filepath.Join(dir, "nodes.csv"), filepath.Join(dir, "jobs.csv")
	files := map[string]string{
		nodes: "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,8,A100\nn1,64000,262144,8,A100\n",
		jobs: "id,submit_s,queue,pods,cpu_milli,memory_mib,num_gpu,gpu_milli,runtime_s,checkpointable\n" +
			"j0,0,q,1,1000,1024,1,0,600,true\nj1,10,q,1,1000,1024,8,0,900,false\nj2,20,q,1,1000,1024,2,0,300,true\n",
	}
	for p, c := range files {
		if err := os.WriteFile(p, []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return nodes, jobs
}

// TestLoadInputDefaultQueues: without a queue file the trace's queues
// are derived from it, and the capacity counts every healthy GPU.
func TestLoadInputDefaultQueues(t *testing.T) {
	nodes, jobs := writeInput(t)
	in, err := LoadInput(nodes, jobs, "", NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Nodes) != 2 || len(in.Trace) != 3 || len(in.Reservations) != 0 {
		t.Fatalf("LoadInput = %d nodes, %d jobs, %d reservations; want 2, 3, 0", len(in.Nodes), len(in.Trace), len(in.Reservations))
	}
	if got := CapacityMilli(in.Nodes); got != 16000 {
		t.Errorf("CapacityMilli = %d, want 16000 (16 GPUs)", got)
	}
	found := false
	for _, q := range in.Queues {
		found = found || q.Name == "q"
	}
	if !found {
		t.Errorf("default queues %+v lack the trace's queue q", in.Queues)
	}
}

// TestLoadInputQueueFileMustCoverTrace: a queue file that lacks a job's
// queue is refused, naming the flag and the file.
func TestLoadInputQueueFileMustCoverTrace(t *testing.T) {
	nodes, jobs := writeInput(t)
	_, err := LoadInput(nodes, jobs, filepath.Join("..", "..", "docs", "queues-example.yaml"), NodeOptions{})
	if err == nil || !strings.Contains(err.Error(), "--queues") || !strings.Contains(err.Error(), "queues-example.yaml") {
		t.Fatalf("LoadInput with a queue file lacking queue q = %v, want an error naming --queues and the file", err)
	}
}

// TestReplayAll: one report per variant, in order, with progress lines
// naming each policy.
func TestReplayAll(t *testing.T) {
	nodes, jobs := writeInput(t)
	in, err := LoadInput(nodes, jobs, "", NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var progress bytes.Buffer
	reports, err := in.ReplayAll(t.Context(), Variants(ReplayOptions{}, PolicyNames[:2], nil, nil), &progress)
	if err != nil {
		t.Fatal(err)
	}
	if len(reports) != 2 {
		t.Fatalf("ReplayAll = %d reports, want 2", len(reports))
	}
	for _, p := range PolicyNames[:2] {
		if !strings.Contains(progress.String(), "sim jobs: "+p+": replaying 3 jobs on 2 nodes") {
			t.Errorf("progress %q lacks the start of %s", progress.String(), p)
		}
	}
}
