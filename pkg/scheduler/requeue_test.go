package scheduler

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpud/gpud/pkg/scheduler/decide"
)

func withHostPort(p *corev1.Pod, port int32) *corev1.Pod {
	p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: port, Protocol: corev1.ProtocolTCP}}
	return p
}

// TestRequeueHints: a pod that only NodePorts refused (its host port is
// taken on the one node) backs off, and comes back at once when the pod
// holding the port is deleted, as kube-scheduler's queueing hints have it;
// an unrelated pod's deletion, a node's label change and a heartbeat do
// not wake it. A pod that failed for another reason (CPU) is woken by
// any pod's deletion, as before.
func TestRequeueHints(t *testing.T) {
	holder := withHostPort(cpuPod("holder", t0, "1"), 9999)
	holder.Spec.NodeName = "n"
	other := cpuPod("other", t0, "1")
	other.Spec.NodeName = "n"
	want := withHostPort(cpuPod("want", t0.Add(time.Second), "1"), 9999)
	big := cpuPod("big", t0.Add(2*time.Second), "1000")
	ts := newTestScheduler(t, decide.New(decide.Config{}), holder, other, want, big)
	node := rulesNode("n")
	in := inputs{pods: []*corev1.Pod{holder, other, want, big}, nodes: []*corev1.Node{node},
		slices: nodeSlices(t, "dgx-h100", "n"), classes: []*resourceapi.DeviceClass{gpuClass()}}
	now := t0.Add(time.Hour)
	ts.cycleOn(t.Context(), in, now)
	if len(ts.bindings) != 0 || !ts.backoff.waiting(want.UID, now) || !ts.backoff.waiting(big.UID, now) {
		t.Fatalf("after the first cycle: bindings %v, want waiting %v, big waiting %v; want none bound, both backing off",
			ts.bindings, ts.backoff.waiting(want.UID, now), ts.backoff.waiting(big.UID, now))
	}

	ts.podDeleted(other)
	if !ts.backoff.waiting(want.UID, now) {
		t.Error("a pod without host ports deleted woke the pod NodePorts refused")
	}
	if ts.backoff.waiting(big.UID, now) {
		t.Error("a pod deleted did not wake the pod short of CPU")
	}
	relabelled := node.DeepCopy()
	relabelled.Labels = map[string]string{}
	relabelled.Labels["example.com/rack"] = "r1"
	ts.nodeEvents().UpdateFunc(node, relabelled)
	beat := relabelled.DeepCopy()
	beat.Status.Conditions = append(beat.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue})
	ts.nodeEvents().UpdateFunc(relabelled, beat)
	if !ts.backoff.waiting(want.UID, now) {
		t.Error("a node label change or heartbeat woke the pod NodePorts refused")
	}

	ts.podDeleted(holder)
	if ts.backoff.waiting(want.UID, now) {
		t.Fatal("the pod holding the port deleted, but the pod NodePorts refused still backs off")
	}
	// It binds in the next cycle, at once (no backoff time passed).
	in.pods = slices.DeleteFunc(slices.Clone(in.pods), func(p *corev1.Pod) bool { return p == holder || p == other })
	ts.cycleOn(t.Context(), in, now)
	if !slices.Contains(ts.bindings, "default/want=n") {
		t.Fatalf("bindings %v, want default/want=n right after the port holder was deleted", ts.bindings)
	}
}
