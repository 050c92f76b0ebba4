package evict

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// maxDisruptedPods is the API server's limit on a budget's
// status.disruptedPods (pkg/registry/core/pod/storage MaxDisruptedPodSize);
// above it every eviction under the budget is refused.
const maxDisruptedPods = 2000

// Allowed reports whether the Eviction API would let pod go now as far as
// PodDisruptionBudgets are concerned, judged the way kube-apiserver
// judges it (pkg/registry/core/pod/storage/eviction.go) on the budgets'
// status as given:
//
//   - a pod that is Pending, Succeeded, Failed or already terminating is
//     evicted without looking at budgets;
//   - the budgets that count are those in the pod's namespace whose
//     selector matches the pod's labels (a nil selector matches nothing,
//     an empty one everything, an invalid one nothing);
//   - none: allowed; more than one: refused (the API does not support it);
//   - one: an unready pod goes if the budget's unhealthyPodEvictionPolicy
//     is AlwaysAllow or the budget is healthy (currentHealthy >=
//     desiredHealthy > 0); otherwise the budget must have
//     status.observedGeneration >= metadata.generation and
//     status.disruptionsAllowed >= 1.
//
// blocking names (sorted) the budgets that refuse; nil when ok. Each
// eviction uses one disruption: a caller evicting several pods under one
// budget must count them itself. A nil pod is not allowed.
func Allowed(pdbs []*policyv1.PodDisruptionBudget, pod *corev1.Pod) (ok bool, blocking []string) {
	if pod == nil {
		return false, nil
	}
	switch pod.Status.Phase {
	case corev1.PodPending, corev1.PodSucceeded, corev1.PodFailed:
		return true, nil
	}
	if pod.DeletionTimestamp != nil {
		return true, nil
	}
	var match []*policyv1.PodDisruptionBudget
	for _, pdb := range pdbs {
		if pdb != nil && pdb.Namespace == pod.Namespace && selects(pdb, pod) {
			match = append(match, pdb)
		}
	}
	switch len(match) {
	case 0:
		return true, nil
	case 1:
	default:
		names := make([]string, len(match))
		for i, p := range match {
			names[i] = p.Name
		}
		slices.Sort(names)
		return false, slices.Compact(names)
	}
	pdb := match[0]
	st := pdb.Status
	if !ready(pod) {
		if p := pdb.Spec.UnhealthyPodEvictionPolicy; p != nil && *p == policyv1.AlwaysAllow {
			return true, nil
		}
		if st.CurrentHealthy >= st.DesiredHealthy && st.DesiredHealthy > 0 {
			return true, nil
		}
	}
	if st.ObservedGeneration < pdb.Generation || st.DisruptionsAllowed < 1 || len(st.DisruptedPods) > maxDisruptedPods {
		return false, []string{pdb.Name}
	}
	return true, nil
}

func selects(pdb *policyv1.PodDisruptionBudget, pod *corev1.Pod) bool {
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil {
		return false // the API server skips a budget with an invalid selector too
	}
	return sel.Matches(labels.Set(pod.Labels))
}

func ready(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
