package learn

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/gpud/gpud/pkg/predict"
	"github.com/gpud/gpud/pkg/scheduler/plan"
)

func TestNamePrefix(t *testing.T) {
	for name, want := range map[string]string{
		"train-20261201-3":  "train",
		"web-5d8f7c9b4":     "web",
		"llama-7b-ft-12":    "llama-7b-ft",
		"bert-":             "bert",
		"job":               "job",
		"42":                "42",
		"eval-run-x9-y8-z7": "eval-run",
	} {
		if got := namePrefix(name); got != want {
			t.Errorf("namePrefix(%q) = %q, want %q", name, got, want)
		}
	}
}

// jobPod is a pod of Job job (a controller reference), with gpus
// nvidia.com/gpu.
func jobPod(ns, name, job string, gpus int64) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "/" + name),
			Labels:          map[string]string{plan.QueueLabel: "batch"},
			OwnerReferences: []metav1.OwnerReference{{Kind: "Job", Name: job, Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{SchedulerName: "gpud-scheduler", Containers: []corev1.Container{{Name: "c", Image: "trainer:1",
			Resources: corev1.ResourceRequirements{
				Limits:   corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(gpus, resource.DecimalSI)},
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")}}}}},
	}
}

// TestKeys: the runs of one workload (Jobs named with a date and index)
// share every key; another GPU count shares the queue's only; another
// namespace none.
func TestKeys(t *testing.T) {
	a := Keys(jobPod("ml", "train-20261201-1-abcde", "train-20261201-1", 2))
	b := Keys(jobPod("ml", "train-20261202-7-xyz12", "train-20261202-7", 2))
	if strings.Join(a, "\n") != strings.Join(b, "\n") {
		t.Fatalf("two runs of one workload: keys\n%q\n%q", a, b)
	}
	want := []string{
		"ns=ml|q=batch|owner=Job/train|gpu=nvidia.com/gpu:2|cpu=2000|mem=4096|img=trainer:1",
		"ns=ml|q=batch|owner=Job/train|gpu=nvidia.com/gpu:2",
		"ns=ml|q=batch",
	}
	if strings.Join(a, "\n") != strings.Join(want, "\n") {
		t.Fatalf("keys %q, want %q", a, want)
	}
	c := Keys(jobPod("ml", "train-1-a", "train-1", 4))
	if c[0] == a[0] || c[1] == a[1] || c[2] != a[2] {
		t.Fatalf("4 GPUs vs 2: keys %q vs %q, want only the queue's shared", c, a)
	}
	d := Keys(jobPod("other", "train-1-a", "train-1", 2))
	for i := range d {
		if d[i] == a[i] {
			t.Fatalf("another namespace shares key %q", d[i])
		}
	}
	// A bare pod with a claim template, and one whose names exceed a key.
	bare := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", GenerateName: "sweep-"}, Spec: corev1.PodSpec{
		ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("two-gpus")}}}}
	if k := Keys(bare); k[1] != "ns=ml|q=|owner=Pod/sweep|gpu=template:two-gpus" {
		t.Fatalf("bare pod keys %q", k)
	}
	long := jobPod("ml", "p", strings.Repeat("x", 600), 1)
	for _, k := range Keys(long) {
		if len(k) == 0 || len(k) > predict.MaxKeyBytes {
			t.Fatalf("key of %d bytes", len(k))
		}
	}
}

func TestRuntime(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	term := func(start, end time.Duration) corev1.ContainerStatus {
		return corev1.ContainerStatus{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			StartedAt: metav1.NewTime(t0.Add(start)), FinishedAt: metav1.NewTime(t0.Add(end))}}}
	}
	pod := &corev1.Pod{}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{term(10*time.Second, 5*time.Minute), term(0, 3*time.Minute)}
	if d, ok := Runtime(pod); !ok || d != 5*time.Minute {
		t.Fatalf("containers 0..3m and 10s..5m: %v %v, want 5m", d, ok)
	}
	// No terminated states: start time to the Ready condition turning false.
	pod = &corev1.Pod{}
	pod.Status.StartTime = ptr.To(metav1.NewTime(t0))
	pod.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.NewTime(t0.Add(time.Hour))},
		{Type: corev1.ContainersReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.NewTime(t0.Add(2 * time.Hour))},
	}
	if d, ok := Runtime(pod); !ok || d != time.Hour {
		t.Fatalf("start time and Ready false an hour later: %v %v, want 1h", d, ok)
	}
	pod.Status.Conditions[0].Status = corev1.ConditionTrue
	if d, ok := Runtime(pod); !ok || d != 2*time.Hour {
		t.Fatalf("ContainersReady false two hours later: %v %v, want 2h", d, ok)
	}
	pod.Status.Conditions = nil
	if d, ok := Runtime(pod); ok {
		t.Fatalf("no finish time: %v, want unknown", d)
	}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{term(time.Minute, 0)}
	pod.Status.StartTime = nil
	if d, ok := Runtime(pod); ok {
		t.Fatalf("finish before start: %v, want unknown", d)
	}
}
