package learn

import (
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpud/gpud/pkg/predict"
	"github.com/gpud/gpud/pkg/scheduler/plan"
)

// Keys describes a pod for the predictor, most specific first: namespace,
// queue (label plan.QueueLabel), owner kind and name prefix, GPU request,
// then CPU, memory and images; the same without CPU, memory and images;
// namespace and queue alone. Each key is at most predict.MaxKeyBytes.
func Keys(pod *corev1.Pod) []string {
	queue := "ns=" + pod.Namespace + "|q=" + pod.Labels[plan.QueueLabel]
	kind, name := owner(pod)
	shape := queue + "|owner=" + kind + "/" + namePrefix(name) + "|gpu=" + gpuRequest(pod)
	cpu, mem, images := requests(pod)
	exact := shape + "|cpu=" + cpu + "|mem=" + mem + "|img=" + images
	return []string{trim(exact), trim(shape), trim(queue)}
}

func trim(k string) string {
	if len(k) > predict.MaxKeyBytes {
		return k[:predict.MaxKeyBytes]
	}
	return k
}

// owner is the pod's controller (kind, name), else ("Pod", its
// generateName or name).
func owner(pod *corev1.Pod) (string, string) {
	for _, r := range pod.OwnerReferences {
		if r.Controller != nil && *r.Controller {
			return r.Kind, r.Name
		}
	}
	if pod.GenerateName != "" {
		return "Pod", pod.GenerateName
	}
	return "Pod", pod.Name
}

// namePrefix drops the trailing dash-separated parts of name that hold a
// digit (a date, an index, a hash: "train-20261201-3" and "web-5d8f7c9b4"
// become "train" and "web"), keeping the first part, so that the runs of
// one workload share a key.
func namePrefix(name string) string {
	parts := strings.Split(strings.TrimRight(name, "-"), "-")
	n := len(parts)
	for n > 1 && strings.ContainsAny(parts[n-1], "0123456789") {
		n--
	}
	return strings.Join(parts[:n], "-")
}

// gpuRequest is the pod's GPU request: its containers' extended resources
// that name a GPU (nvidia.com/gpu, nvidia.com/mig-1g.10gb, gpud.io/gpu.shared,
// ...) with their quantities, and its ResourceClaimTemplates by name; "none"
// for neither.
func gpuRequest(pod *corev1.Pod) string {
	sum := map[corev1.ResourceName]int64{}
	for _, c := range pod.Spec.Containers {
		for r, q := range c.Resources.Limits {
			if s := string(r); strings.Contains(s, "gpu") || strings.HasPrefix(s, "nvidia.com/") {
				sum[r] += q.Value()
			}
		}
	}
	var parts []string
	for r, n := range sum {
		parts = append(parts, string(r)+":"+strconv.FormatInt(n, 10))
	}
	for _, rc := range pod.Spec.ResourceClaims {
		switch {
		case rc.ResourceClaimTemplateName != nil:
			parts = append(parts, "template:"+*rc.ResourceClaimTemplateName)
		case rc.ResourceClaimName != nil:
			parts = append(parts, "claim:"+namePrefix(*rc.ResourceClaimName))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// requests are the pod's CPU (millicores) and memory (MiB) requests summed
// over its containers, and its containers' images.
func requests(pod *corev1.Pod) (cpu, mem, images string) {
	var milli, bytes int64
	imgs := make([]string, 0, len(pod.Spec.Containers))
	for _, c := range pod.Spec.Containers {
		milli += c.Resources.Requests.Cpu().MilliValue()
		bytes += c.Resources.Requests.Memory().Value()
		imgs = append(imgs, c.Image)
	}
	return strconv.FormatInt(milli, 10), strconv.FormatInt(bytes>>20, 10), strings.Join(imgs, ",")
}

// Runtime is how long a finished pod ran: from its first container's start
// to its last container's finish (their terminated states), else from the
// pod's start time to the time its Ready (or ContainersReady) condition
// turned false; false when the status tells neither.
func Runtime(pod *corev1.Pod) (time.Duration, bool) {
	var start, end time.Time
	for _, cs := range pod.Status.ContainerStatuses {
		t := cs.State.Terminated
		if t == nil || t.StartedAt.IsZero() || t.FinishedAt.IsZero() {
			continue
		}
		if start.IsZero() || t.StartedAt.Time.Before(start) {
			start = t.StartedAt.Time
		}
		if t.FinishedAt.Time.After(end) {
			end = t.FinishedAt.Time
		}
	}
	if start.IsZero() && pod.Status.StartTime != nil {
		start = pod.Status.StartTime.Time
	}
	if end.IsZero() {
		for _, want := range []corev1.PodConditionType{corev1.PodReady, corev1.ContainersReady} {
			for _, c := range pod.Status.Conditions {
				if c.Type == want && c.Status == corev1.ConditionFalse && end.IsZero() {
					end = c.LastTransitionTime.Time
				}
			}
		}
	}
	if start.IsZero() || end.IsZero() || !end.After(start) {
		return 0, false
	}
	return end.Sub(start), true
}
