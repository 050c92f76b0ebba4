package simulate

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpud/gpud/pkg/allocator"
	"github.com/gpud/gpud/pkg/trace"
)

// FuzzSimulatePods: a pod list that reads replays, and runs the static
// protocol, under every policy without a panic; the only error the static
// protocol may return is a workload without GPU pods.
func FuzzSimulatePods(f *testing.F) {
	const h = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
	for _, s := range []string{
		"p0,1000,100,1,500,,LS,Running,0,10,0\np1,2000,100,2,1000,V100M16|V100M32,BE,Failed,1,,1\n",
		"p0,1000,100,0,0,,LS,Running,0,10,0\n",
		"p0,1000,100,8,1000,T4,LS,Running,5,3,0\np1,0,0,1,1,,LS,Running,0,0,0\n",
		"p0,1000,100,64,1000,,LS,Running,0,10,0\n",
	} {
		f.Add(h + s)
	}
	nodes, err := trace.ReadNodes(strings.NewReader("sn,cpu_milli,memory_mib,gpu,model\nn0,32000,65536,4,T4\nn1,64000,131072,8,V100M32\nn2,8000,1024,0,nan\n"), "nodes.csv")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s string) {
		pods, err := trace.ReadPods(strings.NewReader(s), "pods.csv")
		if err != nil || len(pods) > 200 {
			return
		}
		for _, p := range allocator.PolicyNames {
			if _, err := Replay(nodes, pods, p, 1); err != nil {
				t.Fatalf("Replay %s: %v", p, err)
			}
		}
		if n, err := checkTunable(Requests(pods), 12000, 1.3); err == nil && n > 20000 {
			return // bounded, but too slow to fuzz
		}
		_, _, err = RunOpenB(t.Context(), Config{Workload: "w", Nodes: nodes, Pods: pods, Policies: []string{"FGD", "gpud"}, Seeds: []uint64{1}, Parallel: 1})
		if err != nil && !errors.Is(err, ErrNoGPUPods) {
			t.Fatalf("RunOpenB: %v", err)
		}
	})
}
