package scheduler

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/gpud/gpud/pkg/scheduler/decide"
)

// TestStorageEventsWakeVolumePods: a pod whose PersistentVolumeClaim does
// not exist yet (VolumeBinding refuses it everywhere) backs off, and comes
// back at once when that claim is created, as kube-scheduler's queueing
// hints have it; another namespace's claim of that name and another
// claim do not wake it, and no volume event wakes a pod short of CPU.
func TestStorageEventsWakeVolumePods(t *testing.T) {
	want := cpuPod("want", t0, "1")
	want.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}
	big := cpuPod("big", t0.Add(time.Second), "1000")
	ts := newTestScheduler(t, decide.New(decide.Config{}), want, big)
	in := inputs{pods: []*corev1.Pod{want, big}, nodes: []*corev1.Node{rulesNode("n")},
		slices: nodeSlices(t, "dgx-h100", "n"), classes: []*resourceapi.DeviceClass{gpuClass()}}
	now := t0.Add(time.Hour)
	ts.cycleOn(t.Context(), in, now)
	if len(ts.bindings) != 0 || !ts.backoff.waiting(want.UID, now) || !ts.backoff.waiting(big.UID, now) {
		t.Fatalf("after the first cycle: bindings %v, want and big waiting %v %v; want none bound, both backing off",
			ts.bindings, ts.backoff.waiting(want.UID, now), ts.backoff.waiting(big.UID, now))
	}
	claim := func(ns, name string) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	}
	pvcs := ts.storageHandler(fwk.PersistentVolumeClaim)
	pvcs.AddFunc(claim("elsewhere", "data"))
	pvcs.AddFunc(claim("default", "other"))
	if !ts.backoff.waiting(want.UID, now) {
		t.Error("another namespace's claim, or another claim, woke the pod waiting for its claim")
	}
	pvcs.AddFunc(claim("default", "data"))
	if ts.backoff.waiting(want.UID, now) {
		t.Error("the pod's own claim created, but the pod still backs off")
	}
	if !ts.backoff.waiting(big.UID, now) {
		t.Error("a volume event woke the pod short of CPU")
	}
}
