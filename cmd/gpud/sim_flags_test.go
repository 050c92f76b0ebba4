package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSimBadInput shows each bad flag or file the issue lists as a clear
// error, returned before any simulation starts.
func TestSimBadInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	nodes := write("nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,8,A100\n")
	huge := write("huge.csv", "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,1000000000,P100\n")
	negCPU := write("negcpu.csv", "sn,cpu_milli,memory_mib,gpu,model\nn0,-1,262144,8,P100\n")
	cpuNodes := write("cpunodes.csv", "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,0,nan\n")
	headerOnly := write("empty.csv", "sn,cpu_milli,memory_mib,gpu,model\n")
	pods := write("pods.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"+
		"p0,1000,100,1,500,,LS,Running,0,10,0\np1,2000,100,1,1000,,BE,Running,1,20,1\n")
	negPod := write("negpod.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np0,-1000,100,1,500,\n")
	cpuPods := write("cpupods.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np0,1000,100,0,0,\n")
	jobs := write("jobs.csv", "id,submit_s,queue,cpu_milli,memory_mib,num_gpu,gpu_milli,runtime_s\na,0,q,1000,10,1,1000,60\n")
	unsorted := write("unsorted.csv", "id,submit_s,queue,cpu_milli,memory_mib,num_gpu,gpu_milli,runtime_s\na,5,q,1000,10,1,1000,60\nb,1,q,1000,10,1,1000,60\n")
	queues := write("queues.yaml", "queues:\n  - name: q\n    bogus: 1\n")
	orphan := write("orphan.yaml", "queues:\n  - name: p\n  - name: other\n")

	type cmd func(context.Context, []string, io.Writer, io.Writer) error
	tests := []struct {
		name string
		run  cmd
		args []string
		want string
	}{
		{"openb huge gpu count", runSimOpenB, []string{"--nodes", huge, "--pods", pods}, huge + ":2: column gpu: 1000000000 outside 0..64"},
		{"replay huge gpu count", runSimReplay, []string{"--nodes", huge, "--pods", pods}, huge + ":2: column gpu"},
		{"jobs huge gpu count", runSimJobs, []string{"--nodes", huge, "--jobs", jobs}, huge + ":2: column gpu"},
		{"jobs-gen huge gpu count", runSimJobsGen, []string{"--nodes", huge, "--pods", pods}, huge + ":2: column gpu"},
		{"node cpu names its column", runSimOpenB, []string{"--nodes", negCPU, "--pods", pods}, negCPU + ":2: column cpu_milli"},
		{"pod cpu names its column", runSimOpenB, []string{"--nodes", nodes, "--pods", negPod}, negPod + ":2: column cpu_milli"},
		{"header-only node list", runSimOpenB, []string{"--nodes", headerOnly, "--pods", pods}, headerOnly + ":1: no rows after the header"},
		{"no GPU pod", runSimOpenB, []string{"--nodes", nodes, "--pods", cpuPods, "-q"}, cpuPods + ": no pod asks for a GPU"},
		{"no GPU node", runSimOpenB, []string{"--nodes", cpuNodes, "--pods", pods, "-q"}, cpuNodes + ": no node has a GPU"},
		{"tune NaN", runSimOpenB, []string{"--nodes", nodes, "--pods", pods, "--tune", "NaN"}, "--tune NaN: want a number in (0, 10]"},
		{"tune Inf", runSimOpenB, []string{"--nodes", nodes, "--pods", pods, "--tune", "Inf"}, "--tune +Inf"},
		{"tune 1e6", runSimOpenB, []string{"--nodes", nodes, "--pods", pods, "--tune", "1e6"}, "--tune 1e+06"},
		{"seed range over the limit", runSimOpenB, []string{"--nodes", nodes, "--pods", pods, "--seeds", "1-100000"}, "100000 seeds, more than 10000"},
		{"trailing comma policy", runSimOpenB, []string{"--nodes", nodes, "--pods", pods, "--policy", "gpud,"}, `--policy "gpud,": empty policy name`},
		{"unknown family", runSimOpenB, []string{"--nodes", nodes, "--pods", pods, "--family", "gpuspec99"}, `--family: tracefamily: unknown family "gpuspec99" (want one of gpuspec05`},
		{"duplicate policy", runSimReplay, []string{"--nodes", nodes, "--pods", pods, "--policy", "FGD,gpud,fgd"}, `policy "fgd" given twice`},
		{"jobs duplicate policy", runSimJobs, []string{"--nodes", nodes, "--jobs", jobs, "--policies", "gpud,gpud"}, `policy "gpud" given twice`},
		{"jobs empty policy", runSimJobs, []string{"--nodes", nodes, "--jobs", jobs, "--policies", "gpud,"}, "empty policy name"},
		{"negative checkpoint", runSimJobs, []string{"--nodes", nodes, "--jobs", jobs, "--checkpoint-s", "-5"}, "--checkpoint-s -5: want 1.."},
		{"zero buckets", runSimJobs, []string{"--nodes", nodes, "--jobs", jobs, "--buckets", "0"}, "--buckets 0"},
		{"unsorted trace", runSimJobs, []string{"--nodes", nodes, "--jobs", unsorted}, unsorted + ":3: column submit_s"},
		{"queue file unknown key", runSimJobs, []string{"--nodes", nodes, "--jobs", jobs, "--queues", queues}, queues + `:3: unknown field "bogus"`},
		{"trace queue undefined", runSimJobs, []string{"--nodes", nodes, "--jobs", jobs, "--queues", orphan}, jobs + `:2: column queue: queue "q" is not defined`},
		{"load NaN", runSimJobsGen, []string{"--nodes", nodes, "--pods", pods, "--load", "NaN"}, "--load NaN"},
		{"zero jobs", runSimJobsGen, []string{"--nodes", nodes, "--pods", pods, "--jobs", "0"}, "--jobs 0: want 1..1000000"},
		{"negative jobs", runSimJobsGen, []string{"--nodes", nodes, "--pods", pods, "--jobs", "-1"}, "--jobs -1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			err := tc.run(t.Context(), tc.args, &out, &errb)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestSimOpenBFiveColumns runs `gpud sim openb` on a pod list with only the
// five required columns (as the multi-GPU-heavy openb lists are published)
// and sees it say which columns it read.
func TestSimOpenBFiveColumns(t *testing.T) {
	dir := t.TempDir()
	nodes := filepath.Join(dir, "nodes.csv")
	pods := filepath.Join(dir, "pods.csv")
	if err := os.WriteFile(nodes, []byte("sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,8,A100\nn1,64000,262144,8,A100\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pods, []byte("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,100,4,1000\np1,500,100,1,250\np2,8000,1000,2,1000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if err := runSimOpenB(context.Background(), []string{"--nodes", nodes, "--pods", pods, "--seeds", "1"}, &out, &errOut); err != nil {
		t.Fatalf("sim openb: %v\n%s", err, errOut.String())
	}
	if want := "read columns name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"; !strings.Contains(errOut.String(), want) {
		t.Fatalf("stderr %q does not say %q", errOut.String(), want)
	}
	if !strings.Contains(out.String(), "gpud") {
		t.Fatalf("no result rows for the gpud policy:\n%s", out.String())
	}
}

// TestSimOpenBFamilies derives workload families from a pod list: one by
// name, or all, each reported under "<list>+<family>".
func TestSimOpenBFamilies(t *testing.T) {
	dir := t.TempDir()
	nodes := filepath.Join(dir, "nodes.csv")
	pods := filepath.Join(dir, "pods.csv")
	if err := os.WriteFile(nodes, []byte("sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,8,A100\nn1,64000,262144,2,T4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pods, []byte("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,100,1,1000\np1,500,100,1,250\np2,8000,1000,2,1000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, fam := range []string{"gpuspec15", "all"} {
		var out, errOut bytes.Buffer
		if err := runSimOpenB(t.Context(), []string{"--nodes", nodes, "--pods", pods, "--seeds", "1", "--policy", "FGD,gpud", "-q", "--family", fam}, &out, &errOut); err != nil {
			t.Fatalf("--family %s: %v\n%s", fam, err, errOut.String())
		}
		want := []string{"gpuspec15"}
		if fam == "all" {
			want = []string{"gpuspec05", "gpuspec33-single", "multigpu20-8"}
		}
		for _, w := range want {
			if !strings.Contains(out.String(), "pods+"+w+",07-gpud,") {
				t.Fatalf("--family %s: no gpud rows for pods+%s:\n%s", fam, w, out.String())
			}
		}
	}
}
