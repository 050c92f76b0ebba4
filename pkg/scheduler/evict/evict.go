// Package evict removes running pods for gpud scheduler's preemption
// through the policy/v1 Eviction API, so that PodDisruptionBudgets and
// graceful termination hold exactly as for `kubectl drain`: the API
// server refuses an eviction a budget forbids ([ErrBudget]), and the
// kubelet gives the pod its grace period.
//
// [Allowed] mirrors the API server's budget check on what the informers
// hold, so the policy can prefer victims whose eviction will succeed.
// The package makes no decisions and keeps no state; it writes only
// Evictions.
package evict

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// MaxGracePeriodSeconds bounds Options.GracePeriodSeconds (one day).
const MaxGracePeriodSeconds = 86400

// Options tune one eviction. The zero value evicts with the pod's own
// spec.terminationGracePeriodSeconds.
type Options struct {
	// GracePeriodSeconds, if not nil, overrides the pod's
	// terminationGracePeriodSeconds (0..MaxGracePeriodSeconds; 0 asks
	// for immediate termination).
	GracePeriodSeconds *int64
	// DryRun asks the API server to check the eviction (budgets
	// included) without deleting the pod.
	DryRun bool
}

// Validate reports an out-of-range grace period.
func (o Options) Validate() error {
	if g := o.GracePeriodSeconds; g != nil && (*g < 0 || *g > MaxGracePeriodSeconds) {
		return fmt.Errorf("evict: grace period %ds is outside 0..%d", *g, MaxGracePeriodSeconds)
	}
	return nil
}

// Evict asks the API server to evict pod (policy/v1 Eviction). It
// returns nil once the eviction is accepted (the pod then terminates
// with its grace period; it is not waited for) or when the pod is gone
// already. The eviction is for this pod's UID only: a pod recreated
// under the same name is not touched (the API server answers Conflict,
// returned wrapped). A budget refusal is a *BudgetError; any other
// failure is returned wrapped with the pod's name.
//
// Evict makes one request: client-go's own retries on 429 and 5xx with
// Retry-After are off (a budget whose status the disruption controller
// has not yet observed answers 429 "retry after 10s", and a scheduling
// cycle must not sleep on it), so such a refusal comes back at once as a
// *BudgetError for the caller's next cycle. Fakes without a REST client
// (client-go's fake clientset) go through EvictV1.
func Evict(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod, opts Options) error {
	if pod == nil || pod.Name == "" || pod.Namespace == "" {
		return errors.New("evict: a pod with a name and namespace is required")
	}
	if client == nil {
		return errors.New("evict: nil client")
	}
	key := pod.Namespace + "/" + pod.Name
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("%w (pod %s)", err, key)
	}
	del := &metav1.DeleteOptions{GracePeriodSeconds: opts.GracePeriodSeconds}
	if pod.UID != "" {
		uid := pod.UID
		del.Preconditions = &metav1.Preconditions{UID: &uid}
	}
	if opts.DryRun {
		del.DryRun = []string{metav1.DryRunAll}
	}
	ev := &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name},
		DeleteOptions: del,
	}
	err := post(ctx, client, ev)
	switch {
	case err == nil:
		return nil
	case apierrors.IsNotFound(err):
		return nil // already gone: what the eviction was for
	}
	if be := budgetError(key, err); be != nil {
		return be
	}
	return fmt.Errorf("evict %s: %w", key, err)
}

// post sends the eviction as Pods(ns).EvictV1 does, without retries.
func post(ctx context.Context, client kubernetes.Interface, ev *policyv1.Eviction) error {
	rc, ok := client.CoreV1().RESTClient().(*rest.RESTClient)
	if !ok || rc == nil {
		return client.CoreV1().Pods(ev.Namespace).EvictV1(ctx, ev)
	}
	return rc.Post().Namespace(ev.Namespace).Resource("pods").Name(ev.Name).SubResource("eviction").
		Body(ev).MaxRetries(0).Do(ctx).Error()
}

// budgetError recognises the Eviction API's budget refusals; nil for
// other errors (a 429 from API priority and fairness has no
// DisruptionBudget cause).
func budgetError(key string, err error) *BudgetError {
	var se apierrors.APIStatus
	if !errors.As(err, &se) {
		return nil
	}
	st := se.Status()
	be := &BudgetError{Pod: key, Message: st.Message, Err: err}
	found := false
	if st.Details != nil {
		for _, c := range st.Details.Causes {
			if c.Type != policyv1.DisruptionBudgetCause {
				continue
			}
			found = true
			be.Message = c.Message
			if name := pdbName(c.Message); name != "" {
				be.PDBs = append(be.PDBs, name)
			}
		}
	}
	if !found {
		if st.Code != 500 || !strings.Contains(st.Message, "more than one PodDisruptionBudget") {
			return nil
		}
		be.Multiple = true
	}
	return be
}

// pdbName takes NAME out of the API server's "The disruption budget NAME
// ..." cause messages; "" when the message has another form.
func pdbName(msg string) string {
	const prefix = "The disruption budget "
	rest, ok := strings.CutPrefix(msg, prefix)
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, " ")
	return name
}
