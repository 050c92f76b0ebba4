package jobsim

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpud/gpud/internal/openbdata"
	"github.com/gpud/gpud/pkg/allocator"
	"github.com/gpud/gpud/pkg/allocator/jobs"
	"github.com/gpud/gpud/pkg/trace"
)

func oneNode() []allocator.Node {
	nodes, err := ReadNodes(strings.NewReader("sn,cpu_milli,memory_mib,gpu,model\nn0,96000,786432,8,A100\n"), "nodes.csv", NodeOptions{})
	if err != nil {
		panic(err)
	}
	return nodes
}

func job(id string, submit int64, prio int, runtime int64, ckpt bool) TraceJob {
	return TraceJob{Job: jobs.Job{ID: id, Submit: submit, Queue: "q", Priority: prio, Pods: 1,
		Pod: jobs.Pod{CPUMilli: 1000, MemoryMiB: 1024, NumGPU: 8}, EstimateSeconds: runtime, Checkpointable: ckpt}, RuntimeSeconds: runtime}
}

func TestReplayMetrics(t *testing.T) {
	q := []jobs.Queue{{Name: "q"}}
	tests := []struct {
		name        string
		policy      string
		trace       []TraceJob
		avgJCT      float64
		avgWait     float64
		preemptions int
		lostGPUSec  float64
		util        float64
	}{
		{name: "fifo queues the second job", policy: "fifo",
			trace:  []TraceJob{job("a", 0, 0, 100, false), job("b", 10, 0, 50, false)},
			avgJCT: (100 + 140) / 2.0, avgWait: 45, util: 1},
		{name: "priority preempts and the victim restarts from scratch", policy: "gpud",
			trace:  []TraceJob{job("c", 0, 0, 100, false), job("d", 40, 5, 10, false)},
			avgJCT: (150 + 10) / 2.0, avgWait: 0, preemptions: 1, lostGPUSec: 40 * 8, util: 1},
		{name: "checkpointable victim loses only since its checkpoint", policy: "gpud",
			trace:  []TraceJob{job("c", 0, 0, 100, true), job("d", 40, 5, 10, false)},
			avgJCT: (120 + 10) / 2.0, avgWait: 0, preemptions: 1, lostGPUSec: 10 * 8, util: 1},
		{name: "fifo does not preempt", policy: "fifo",
			trace:  []TraceJob{job("c", 0, 0, 100, false), job("d", 40, 5, 10, false)},
			avgJCT: (100 + 70) / 2.0, avgWait: 30, util: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Replay(t.Context(), oneNode(), tc.trace, ReplayOptions{Policy: tc.policy, Options: Policies[tc.policy], Queues: q, CheckpointSeconds: 30, Buckets: 3})
			if err != nil {
				t.Fatal(err)
			}
			if r.Completed != len(tc.trace) || r.AvgJCT != tc.avgJCT || r.AvgWait != tc.avgWait || r.Preemptions != tc.preemptions {
				t.Fatalf("completed %d avgJCT %v avgWait %v preemptions %d; want %d %v %v %d", r.Completed, r.AvgJCT, r.AvgWait, r.Preemptions,
					len(tc.trace), tc.avgJCT, tc.avgWait, tc.preemptions)
			}
			if math.Abs(r.LostGPUHours*3600-tc.lostGPUSec) > 1e-6 || math.Abs(r.Utilization-tc.util) > 1e-9 {
				t.Fatalf("lost %v GPU-s, util %v; want %v, %v", r.LostGPUHours*3600, r.Utilization, tc.lostGPUSec, tc.util)
			}
			for b, u := range r.Timeline {
				if math.Abs(u-tc.util) > 1e-9 {
					t.Fatalf("timeline[%d] = %v, want %v", b, u, tc.util)
				}
			}
		})
	}
}

func TestTraceRoundTripAndErrors(t *testing.T) {
	in := []TraceJob{job("a", 0, 1, 100, true), {Job: jobs.Job{ID: "b", Submit: 5, Queue: "dev", Pods: 4,
		Pod:      jobs.Pod{CPUMilli: 1, MemoryMiB: 2, NumGPU: 1, GPUMilli: 300, GPUMemoryMiB: 4096, Models: []string{"V100M16", "V100M32"}},
		Topology: jobs.LevelRack, Required: true, Preemptible: true}, RuntimeSeconds: 7}}
	var buf bytes.Buffer
	if err := WriteJobs(&buf, in); err != nil {
		t.Fatal(err)
	}
	out, err := ReadJobs(&buf, "x.csv")
	if err != nil {
		t.Fatal(err)
	}
	in[0].Line, in[1].Line = 2, 3 // the lines they were read from
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", out, in)
	}
	header := strings.Join(JobColumns, ",") + "\n"
	tests := []struct {
		name, row, want string
	}{
		{"fraction of several GPUs", "a,0,q,0,1,1,1,2,500,0,,,none,false,10,0,false,false", "x.csv:2: column gpu_milli"},
		{"bad topology", "a,0,q,0,1,1,1,1,0,0,,,row,false,10,0,false,false", "x.csv:2: column topology"},
		{"bad mig", "a,0,q,0,1,1,1,0,0,0,9g.1gb,,none,false,10,0,false,false", "x.csv:2: column mig"},
		{"zero runtime", "a,0,q,0,1,1,1,1,0,0,,,none,false,0,0,false,false", "x.csv:2: column runtime_s"},
		{"not a bool", "a,0,q,0,1,1,1,1,0,0,,,none,maybe,10,0,false,false", "x.csv:2: column required"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadJobs(strings.NewReader(header+tc.row+"\n"), "x.csv")
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

var openbDir = openbdata.Dir()

func TestGenerateFromOpenB(t *testing.T) {
	pods, err := trace.ReadPodsFile(filepath.Join(openbDir, "openb_pod_list_default.csv"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			t.Skip("openb trace not available")
		}
		t.Fatal(err)
	}
	o := GenOptions{Seed: 3, Jobs: 3000, CapacityGPUs: 6212, Load: 0.8}
	a, err := Generate(pods, o)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Generate(pods, o)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same seed gave different traces")
	}
	o.Seed = 4
	if c, _ := Generate(pods, o); reflect.DeepEqual(a, c) {
		t.Fatal("different seeds gave the same trace")
	}
	var gangs int
	var gpuSec float64
	queues := map[string]int{}
	for i, j := range a {
		if i > 0 && j.Submit < a[i-1].Submit {
			t.Fatal("trace not sorted by submit")
		}
		if j.Pods > 1 {
			gangs++
		}
		queues[j.Queue]++
		gpuSec += gpus(&a[i]) * float64(j.RuntimeSeconds)
		if j.RuntimeSeconds <= 0 || j.RuntimeSeconds > 2*86400 {
			t.Fatalf("runtime %d outside (0, 2 days]", j.RuntimeSeconds)
		}
	}
	if gangs < 100 || gangs > 200 { // 5% of 3000
		t.Errorf("%d gangs, want about 150", gangs)
	}
	if len(queues) != 4 {
		t.Errorf("queues %v, want prod, research, dev, batch", queues)
	}
	offered := gpuSec / float64(a[len(a)-1].Submit) / 6212
	if offered < 0.6 || offered > 1.0 {
		t.Errorf("offered load %.2f, want about 0.8", offered)
	}
}
