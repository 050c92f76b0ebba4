package jobsim

import (
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/gpud/gpud/pkg/allocator"
	"github.com/gpud/gpud/pkg/allocator/jobs"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

// mixedNodes are 8 nodes of three models in two racks.
func mixedNodes(t testing.TB) []allocator.Node {
	t.Helper()
	csv := "sn,cpu_milli,memory_mib,gpu,model\n" +
		"v0,96000,786432,8,V100M32\nv1,96000,786432,8,V100M32\nv2,96000,786432,8,V100M32\n" +
		"t0,64000,262144,4,T4\nt1,64000,262144,4,T4\nt2,64000,262144,4,T4\n" +
		"a0,96000,524288,8,A10\na1,96000,524288,8,A10\n"
	nodes, err := ReadNodes(strings.NewReader(csv), "nodes.csv", NodeOptions{NodesPerRack: 4, RacksPerZone: 8})
	if err != nil {
		t.Fatal(err)
	}
	return nodes
}

// mixedTrace is a seeded trace of every job kind the policy orders
// differently: four queues, priorities, fractions, model constraints,
// gangs, checkpointable and preemptible jobs, user estimates (10 % none);
// it offers about the capacity of mixedNodes.
func mixedTrace(seed uint64, n int) []TraceJob {
	rng := rand.New(rand.NewPCG(seed, 7))
	queues := []string{"prod", "dev", "batch", "research"}
	out := make([]TraceJob, n)
	var t float64
	for i := range out {
		j := &out[i]
		j.ID, j.Pods = fmt.Sprintf("m%04d", i), 1
		j.Queue = queues[rng.IntN(len(queues))]
		j.Priority = rng.IntN(3)
		j.Pod = jobs.Pod{CPUMilli: 4000, MemoryMiB: 16384}
		switch k := rng.IntN(10); {
		case k < 3:
			j.Pod.NumGPU, j.Pod.GPUMilli = 1, int64(100+rng.IntN(8)*100)
		case k < 6:
			j.Pod.NumGPU = 1
			if rng.IntN(2) == 0 {
				j.Pod.Models = []string{"T4"}
			}
		case k < 8:
			j.Pod.NumGPU = 4
		case k < 9:
			j.Pods, j.Pod.NumGPU, j.Topology = 2, 8, jobs.LevelRack
		default:
			j.Pod.NumGPU = 0
		}
		j.RuntimeSeconds = int64(300 + rng.ExpFloat64()*3600)
		if rng.IntN(10) > 0 {
			j.EstimateSeconds = int64(float64(j.RuntimeSeconds) * (1 + 2*rng.Float64()))
		}
		j.Checkpointable = rng.IntN(2) == 0
		j.Preemptible = j.Queue == "batch"
		t += rng.ExpFloat64() * 180
		j.Submit = int64(t)
	}
	return out
}

// TestDefaultReplayUnchanged: the default policies print, byte for byte,
// what they printed before objectives existed (testdata/default-replay.golden
// was written by the code before them).
func TestDefaultReplayUnchanged(t *testing.T) {
	nodes := mixedNodes(t)
	tr := mixedTrace(11, 600)
	qs := DefaultQueues(tr, 52*1000)
	var rs []*Report
	for _, p := range []string{"gpud", "fifo", "no-backfill"} {
		r, err := Replay(t.Context(), nodes, tr, ReplayOptions{Policy: p, Options: Policies[p], Queues: qs, CheckpointSeconds: 1800})
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	var b bytes.Buffer
	if err := WriteReports(&b, rs); err != nil {
		t.Fatal(err)
	}
	const golden = "testdata/default-replay.golden"
	if *update {
		if err := os.WriteFile(golden, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.Bytes(), want) {
		t.Fatalf("default replay output changed:\n%s\nwant:\n%s", b.String(), want)
	}
}
