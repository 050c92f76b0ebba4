package decide

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpud/gpud/pkg/allocator/jobs"
	"github.com/gpud/gpud/pkg/scheduler/plan"
)

// A pod that cannot fit even the empty cluster says "never fits" and why
// (9 GPUs on 8-GPU nodes, a fraction larger than any GPU, more CPU than
// any node); a pod short of room only now does not.
func TestNeverFitsOnlyWhenNoNodeEverCould(t *testing.T) {
	e := newEnv(t)
	e.node("a", "dgx-h100", nil)
	cpu := func(q string) podOpt {
		return func(x *plan.Pod) {
			x.Pod.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse(q)
		}
	}
	e.pod("nine", []resourceapi.DeviceRequest{gpus(9)})
	e.pod("huge-fraction", []resourceapi.DeviceRequest{fraction("200Gi")})
	e.pod("cpu-hog", []resourceapi.DeviceRequest{gpus(1)}, cpu("300"))
	e.pod("filler", nil, cpu("200"))
	p := e.decide(Config{})
	for pod, want := range map[string]string{
		"nine":          `asks 9 GPUs; the most any node has that the request may use is 8`,
		"huge-fraction": `asks 204800MiB of one GPU; the largest GPU the request may use has`,
		"cpu-hog":       `asks 300000m CPU; the largest node has 224000m allocatable`,
	} {
		w, ok := pendingOf(p, pod)
		if !ok || w.Code != jobs.CodeNeverFits || !strings.Contains(w.Message, want) {
			t.Errorf("%s: pending %v %+v, want never-fits saying %q", pod, ok, w, want)
		}
	}
	e.apply(p)
	e.pod("short-now", []resourceapi.DeviceRequest{gpus(1)}, cpu("100"))
	p = e.decide(Config{})
	if w, ok := pendingOf(p, "short-now"); !ok || w.Code != jobs.CodeCapacity || strings.Contains(w.Message, "never") {
		t.Errorf("short-now: pending %v %+v, want capacity (room may come back), not never fits", ok, w)
	}
}
