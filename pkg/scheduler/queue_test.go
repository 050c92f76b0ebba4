package scheduler

import (
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"

	"github.com/gpud/gpud/pkg/scheduler/decide"
	"github.com/gpud/gpud/pkg/scheduler/plan"
)

// cpuPod is a pending CPU-only pod of this scheduler asking cpu.
func cpuPod(name string, created time.Time, cpu string) *corev1.Pod {
	p := claimPod("default", name, created)
	p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
	return p
}

// rulesNode is a node as a kubelet reports it (pods included, which
// kube-scheduler's NodeResourcesFit counts).
func rulesNode(name string) *corev1.Node {
	n := kubeNode(name)
	n.Status.Allocatable[corev1.ResourcePods] = resource.MustParse("110")
	return n
}

func pendingNames(sn *snapshot) []string {
	var out []string
	for _, p := range sn.Pending {
		out = append(out, p.Pod.Name)
	}
	return out
}

func TestSnapshotLeavesGatedPodsOut(t *testing.T) {
	ts := newTestScheduler(t, placeAll{})
	gated := cpuPod("gated", t0, "1")
	gated.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "kueue.x-k8s.io/admission"}}
	sn := ts.snapshotOf(inputs{pods: []*corev1.Pod{gated, cpuPod("free", t0, "1")}, nodes: []*corev1.Node{rulesNode("a")},
		slices: nodeSlices(t, "dgx-h100", "a")})
	if got := pendingNames(sn); !slices.Equal(got, []string{"free"}) {
		t.Fatalf("pending %v, want [free] (a gated pod is never scheduled)", got)
	}
	if sn.gated != 1 {
		t.Fatalf("gated = %d, want 1", sn.gated)
	}
}

func TestSnapshotBackoff(t *testing.T) {
	ts := newTestScheduler(t, placeAll{})
	a, b := cpuPod("a", t0, "1"), cpuPod("b", t0.Add(time.Second), "1")
	in := inputs{pods: []*corev1.Pod{a, b}, nodes: []*corev1.Node{rulesNode("n")}, slices: nodeSlices(t, "dgx-h100", "n")}
	ts.backoff.failed(a.UID, t0)
	sn := ts.snapshotOf(in)
	if got := pendingNames(sn); !slices.Equal(got, []string{"b"}) || sn.backingOff != 1 {
		t.Fatalf("right after a failed: pending %v (%d backing off), want [b] and 1", got, sn.backingOff)
	}
	if sn.Pending[0].Retry {
		t.Fatal("b was never tried, but Retry is set")
	}
	// 1 s later a is back, as a retry.
	sn = ts.snap.build(in, t0.Add(initialBackoff))
	if got := pendingNames(sn); !slices.Equal(got, []string{"a", "b"}) || !sn.Pending[0].Retry {
		t.Fatalf("after the backoff: pending %v (a retry: %v), want [a b] with a a retry", got, sn.Pending[0].Retry)
	}
	// A second failure doubles the wait; a flush ends it.
	ts.backoff.failed(a.UID, t0)
	if sn = ts.snap.build(in, t0.Add(initialBackoff)); slices.Contains(pendingNames(sn), "a") {
		t.Fatal("a back after 1 s though it failed twice (2 s backoff)")
	}
	ts.backoff.flush()
	if sn = ts.snap.build(in, t0); !slices.Contains(pendingNames(sn), "a") {
		t.Fatal("a still backing off after a flush")
	}
}

// TestSnapshotBackoffKeepsGangsWhole: a gang stays in while one member is
// ready to try, so it is never seen partial.
func TestSnapshotBackoffKeepsGangsWhole(t *testing.T) {
	ts := newTestScheduler(t, placeAll{})
	m0, m1 := cpuPod("m0", t0, "1"), cpuPod("m1", t0, "1")
	for _, p := range []*corev1.Pod{m0, m1} {
		p.Labels = map[string]string{plan.PodGroupLabel: "g"}
	}
	ts.backoff.failed(m0.UID, t0)
	sn := ts.snapshotOf(inputs{pods: []*corev1.Pod{m0, m1}, nodes: []*corev1.Node{rulesNode("n")}, slices: nodeSlices(t, "dgx-h100", "n")})
	if got := pendingNames(sn); len(got) != 2 {
		t.Fatalf("pending %v, want both members", got)
	}
}

// TestNoStarvation: with 2,000 pending pods that cannot fit, a new pod that
// fits binds in the next cycle, through the runtime's queue and the real
// decider (whose cap considers 1,000 retried pods a cycle).
func TestNoStarvation(t *testing.T) {
	var pods []*corev1.Pod
	var objs []runtime.Object
	for i := range 2000 {
		p := cpuPod(fmt.Sprintf("big-%04d", i), t0.Add(time.Duration(i)*time.Millisecond), "1000")
		pods = append(pods, p)
		objs = append(objs, p)
	}
	fits := cpuPod("fits", t0.Add(time.Hour), "1")
	objs = append(objs, fits)
	ts := newTestScheduler(t, decide.New(decide.Config{}), objs...)
	ts.events = events.NewFakeRecorder(10 * len(objs)) // an event per pending pod per cycle
	ts.recorder = ts.events
	node := rulesNode("n")
	sl := nodeSlices(t, "dgx-h100", "n")
	in := inputs{pods: pods, nodes: []*corev1.Node{node}, slices: sl, classes: []*resourceapi.DeviceClass{gpuClass()}}
	start := time.Now()
	// Cycles before the new pod: the 2,000 are tried and left pending.
	now := t0.Add(2 * time.Hour)
	for range 2 {
		ts.cycleOn(t.Context(), in, now)
		now = now.Add(maxBackoff) // every one of them due again
	}
	if len(ts.bindings) != 0 {
		t.Fatalf("bindings %v of pods that cannot fit", ts.bindings)
	}
	in.pods = append(slices.Clone(pods), fits)
	ts.cycleOn(t.Context(), in, now)
	if !slices.Contains(ts.bindings, "default/fits=n") {
		t.Fatalf("new pod not bound in the cycle after it arrived, behind 2,000 retries (bindings %v)", ts.bindings)
	}
	t.Logf("3 cycles over 2,001 pending pods in %s", time.Since(start).Round(time.Millisecond))
}
