package decide

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpud/gpud/pkg/scheduler/plan"
)

func cpus(q string) podOpt {
	return func(x *plan.Pod) {
		x.Pod.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse(q)
	}
}

// TestCPUOnlyPodsAvoidFreeGPUs: a pod without GPUs goes where it strands
// no GPU (the node whose GPUs are all taken), not to the first node by
// name, whose free GPUs its CPUs would starve (make sched-bench saw 164 of
// 210 free GPUs on nodes with under 8 CPUs left before this).
func TestCPUOnlyPodsAvoidFreeGPUs(t *testing.T) {
	e := newEnv(t)
	e.node("a", "dgx-h100", nil)
	e.node("b", "dgx-h100", nil)
	e.pod("full", reqs(gpus(8)), onNode("b"))
	e.apply(e.decide(Config{}))
	e.pod("cpu-hog", nil, cpus("200"))
	p := e.decide(Config{})
	if got := bindsOf(p)["cpu-hog"]; got != "b" {
		t.Fatalf("cpu-only pod on %q, want b (a's 8 free GPUs would be left 23 CPUs)", got)
	}
	// And a GPU pod that follows still finds a's GPUs fed.
	e.apply(p)
	e.pod("gpu", reqs(gpus(8)), cpus("100"))
	if got := bindsOf(e.decide(Config{}))["gpu"]; got != "a" {
		t.Fatalf("8-GPU pod with 100 CPUs on %q, want a", got)
	}
}
