package jobsim

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/gpud/gpud/pkg/allocator/jobs"
	"github.com/gpud/gpud/pkg/trace"
)

var jobHeader = strings.Join(JobColumns, ",") + "\n"

// TestReadJobsValues shows that value errors which used to surface
// mid-replay, and unsorted traces, are read errors at FILE:LINE: column.
func TestReadJobsValues(t *testing.T) {
	ok := "a,0,q,0,1,1,1,1,0,0,,,none,false,10,0,false,false\n"
	tests := []struct{ name, rows, want string }{
		{"unsorted", ok + "b,5,q,0,1,1,1,1,0,0,,,none,false,10,0,false,false\nc,4,q,0,1,1,1,1,0,0,,,none,false,10,0,false,false\n",
			"x.csv:4: column submit_s: 4 before line 3's 5: sort the trace by submit_s"},
		{"negative cpu", "a,0,q,0,1,-1,1,1,0,0,,,none,false,10,0,false,false\n", "x.csv:2: column cpu_milli: -1 outside"},
		{"negative gpu memory", "a,0,q,0,1,1,1,1,0,-4,,,none,false,10,0,false,false\n", "x.csv:2: column gpu_mem_mib: -4 outside"},
		{"memory fraction of several GPUs", "a,0,q,0,1,1,1,2,0,4096,,,none,false,10,0,false,false\n", "x.csv:2: column gpu_mem_mib"},
		{"huge gpu count", "a,0,q,0,1,1,1,1000000000,0,0,,,none,false,10,0,false,false\n", "x.csv:2: column num_gpu: 1000000000 outside"},
		{"huge submit", "a,9223372036854775807,q,0,1,1,1,1,0,0,,,none,false,10,0,false,false\n", "x.csv:2: column submit_s"},
		{"huge runtime", "a,0,q,0,1,1,1,1,0,0,,,none,false,9223372036854775807,0,false,false\n", "x.csv:2: column runtime_s"},
		{"too many pods", "a,0,q,0,5000,1,1,1,0,0,,,none,false,10,0,false,false\n", "x.csv:2: column pods: 5000 outside 0..4096"},
		{"share without a GPU", "a,0,q,0,1,1,1,0,0,4096,,,none,false,10,0,false,false\n", "x.csv:2: column num_gpu: 0, but gpu_milli or gpu_mem_mib asks for a GPU"},
		{"duplicate id", ok + ok, `x.csv:3: column id: "a" already on line 2`},
		{"header only", "", "x.csv:1: no rows after the header"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadJobs(strings.NewReader(jobHeader+tc.rows), "x.csv")
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestReadNodesBounds(t *testing.T) {
	const h = "sn,cpu_milli,memory_mib,gpu,model,mig_gpus\n"
	tests := []struct{ name, rows, want string }{
		{"huge gpu count", "n0,64000,262144,1000000000,P100,0\n", "nodes.csv:2: column gpu: 1000000000 outside 0..64"},
		{"negative cpu", "n0,-1,262144,8,P100,0\n", "nodes.csv:2: column cpu_milli: -1 outside"},
		{"mig gpus over gpus", "n0,1,1,2,A100,3\n", "nodes.csv:2: column mig_gpus: 3 outside 0..2"},
		{"header only", "", "nodes.csv:1: no rows after the header"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadNodes(strings.NewReader(h+tc.rows), "nodes.csv", NodeOptions{})
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestGenerateRejects(t *testing.T) {
	pods := []trace.Pod{{Name: "p", CPUMilli: 1, MemoryMiB: 1, NumGPU: 1, GPUMilli: 1000, DeletionTime: 10}}
	tests := []struct {
		name string
		o    GenOptions
		want string
	}{
		{"NaN load", GenOptions{Load: math.NaN(), CapacityGPUs: 8}, "load NaN"},
		{"infinite load", GenOptions{Load: math.Inf(1), CapacityGPUs: 8}, "load +Inf"},
		{"negative load", GenOptions{Load: -1, CapacityGPUs: 8}, "load -1"},
		{"negative jobs", GenOptions{Jobs: -1, CapacityGPUs: 8}, "jobs -1 outside"},
		{"too many jobs", GenOptions{Jobs: MaxGenJobs + 1, CapacityGPUs: 8}, "outside 1..1000000"},
		{"NaN gangs", GenOptions{GangFraction: math.NaN(), CapacityGPUs: 8}, "gang fraction NaN"},
		{"tiny load spreads past the bound", GenOptions{Jobs: 100, Load: 1e-12, CapacityGPUs: 8}, "more than 1000000000 seconds"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			js, err := Generate(pods, tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Generate() = %d jobs, %v; want %q", len(js), err, tc.want)
			}
		})
	}
	js, err := Generate(pods, GenOptions{Jobs: 3, CapacityGPUs: 8})
	if err != nil || len(js) != 3 {
		t.Fatalf("Generate() = %d jobs, %v; want 3", len(js), err)
	}
	for _, j := range js {
		if j.Submit < 0 {
			t.Fatalf("submit %d", j.Submit)
		}
	}
}

func TestCheckQueues(t *testing.T) {
	js, err := ReadJobs(strings.NewReader(jobHeader+"a,0,prod,0,1,1,1,1,0,0,,,none,false,10,0,false,false\nb,1,org,0,1,1,1,1,0,0,,,none,false,10,0,false,false\nc,2,zz,0,1,1,1,1,0,0,,,none,false,10,0,false,false\n"), "x.csv")
	if err != nil {
		t.Fatal(err)
	}
	qs := []jobs.Queue{{Name: "org"}, {Name: "prod", Parent: "org"}}
	if err := CheckQueues("x.csv", js[:1], qs); err != nil {
		t.Fatalf("leaf queue: %v", err)
	}
	if err := CheckQueues("x.csv", js[:2], qs); err == nil || !strings.Contains(err.Error(), `x.csv:3: column queue: queue "org" is a parent queue`) {
		t.Fatalf("parent queue: %v", err)
	}
	if err := CheckQueues("x.csv", js[2:], qs); err == nil || !strings.Contains(err.Error(), `x.csv:4: column queue: queue "zz" is not defined`) {
		t.Fatalf("undefined queue: %v", err)
	}
}

// FuzzReadJobs reads job traces and replays what reads: a read error names
// the file and line, and a trace that reads replays without error.
func FuzzReadJobs(f *testing.F) {
	for _, s := range []string{
		"a,0,q,1,1,1000,1024,8,0,0,,,none,false,100,100,true,false\nb,5,q,0,4,1,2,1,300,4096,,V100M16|V100M32,rack,true,7,0,false,true\n",
		"a,0,q,0,1,1,1,2,500,0,,,none,false,10,0,false,false\n",
		"a,0,q,0,1,1,1,0,0,0,1g.10gb,,none,false,10,0,false,false\n",
		"a,5,q,0,1,1,1,1,0,0,,,none,false,10,0,false,false\nb,4,q,0,1,1,1,1,0,0,,,none,false,10,0,false,false\n",
		"a,0,q,0,1,1,1,1000000000,0,0,,,none,false,10,0,false,false\n",
		"a,0,q,0,1,1,1,2,0,4096,,,none,false,10,0,false,false\n",
		"a,0,q,0,1,1,1,1,0,20480,,,none,false,10,0,false,false\nb,0,q,0,1,1,1,1,0,20480,,,none,false,10,0,false,false\n",
		"",
	} {
		f.Add(jobHeader + s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		js, err := ReadJobs(strings.NewReader(s), "x.csv")
		if err != nil {
			if !errors.Is(err, ErrMalformed) || !strings.HasPrefix(err.Error(), "x.csv:") {
				t.Fatalf("error %q does not name x.csv", err)
			}
			return
		}
		if len(js) > 50 {
			return // keep each replay short
		}
		nodes, err := ReadNodes(strings.NewReader("sn,cpu_milli,memory_mib,gpu,model,mig_gpus\nn0,96000,786432,8,A100,2\n"), "nodes.csv", NodeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range PolicyNames {
			o := ReplayOptions{Policy: p, Options: Policies[p], Queues: DefaultQueues(js, 8000)}
			if _, err := Replay(t.Context(), nodes, js, o); err != nil {
				t.Fatalf("%s: a trace that reads must replay: %v", p, err)
			}
		}
	})
}

// FuzzParseQueueFile: every error is a *QueueFileError naming the file.
func FuzzParseQueueFile(f *testing.F) {
	for _, s := range []string{
		"queues:\n  - name: org\n    limit: {gpuMilli: 4000000}\n  - name: prod\n    parent: org\n    weight: 2\nreservations:\n  - {name: n, queue: prod, nodes: [a], startS: 1, endS: 2}\n",
		"queues:\n  - name: a\n    bogus: 1\n",
		"queues:\n  - name: a\n    parent: b\n",
		"queues:\n  - name: a\n    parent: b\n  - name: b\n    parent: a\n",
		"a: &x [1]\nqueues: *x\n",
		"queues:\n  - name: a\n    guaranteed: {gpuMilli: 2.5}\n",
		"queues: []\n",
		"queues: " + strings.Repeat("[", 40),
		"queues:\n" + strings.Repeat("- ", 40),
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		qs, _, err := ParseQueueFile([]byte(s), "q.yaml")
		if err != nil {
			if !errors.Is(err, ErrBadQueueFile) || !strings.HasPrefix(err.Error(), "q.yaml:") {
				t.Fatalf("error %q does not name q.yaml and a line", err)
			}
			return
		}
		if len(qs) == 0 {
			t.Fatal("no queues and no error")
		}
	})
}

// FuzzReadNodes: the job simulator's node file (openb columns plus
// topology) never panics or builds GPUs from a bad row; errors name the file.
func FuzzReadNodes(f *testing.F) {
	const h = "sn,cpu_milli,memory_mib,gpu,model,gpu_mem_mib,mig_gpus,nvlink_domain,rack,zone\n"
	for _, s := range []string{
		h + "n0,96000,786432,8,A100,81920,2,d0,r0,z0\nn1,1,1,0,nan,,,,,\n",
		h + "n0,64000,262144,1000000000,P100,,,,,\n",
		h + "n0,1,1,2,A100,,3,,,\n",
		h,
		"sn,cpu_milli,memory_mib,gpu,model\n,1,1,1,T4\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		nodes, err := ReadNodes(strings.NewReader(s), "nodes.csv", NodeOptions{})
		if err != nil {
			if !errors.Is(err, ErrMalformed) || !strings.HasPrefix(err.Error(), "nodes.csv:") {
				t.Fatalf("error %q does not name nodes.csv", err)
			}
			return
		}
		for _, n := range nodes {
			if len(n.GPUs) > trace.MaxGPUsPerNode || n.CPUMilli < 0 || n.MemoryMiB < 0 {
				t.Fatalf("node out of bounds: %s with %d GPUs", n.Name, len(n.GPUs))
			}
		}
	})
}
