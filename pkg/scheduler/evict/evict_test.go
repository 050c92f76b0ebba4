package evict

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

func runningPod(labels map[string]string, ready bool) *corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "worker-0", UID: "uid-1", Labels: labels},
		Status: corev1.PodStatus{Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}},
	}
}

func pdb(name string, sel *metav1.LabelSelector, allowed int32) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name, Generation: 2},
		Spec:       policyv1.PodDisruptionBudgetSpec{Selector: sel},
		Status: policyv1.PodDisruptionBudgetStatus{ObservedGeneration: 2, DisruptionsAllowed: allowed,
			DesiredHealthy: 2, CurrentHealthy: 2},
	}
}

func TestAllowed(t *testing.T) {
	app := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "train"}}
	other := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "serve"}}
	labels := map[string]string{"app": "train"}
	with := func(p *policyv1.PodDisruptionBudget, f func(p *policyv1.PodDisruptionBudget)) *policyv1.PodDisruptionBudget {
		f(p)
		return p
	}
	tests := []struct {
		name     string
		pdbs     []*policyv1.PodDisruptionBudget
		pod      *corev1.Pod
		ok       bool
		blocking []string
	}{
		{name: "no budgets", pod: runningPod(labels, true), ok: true},
		{name: "budget allows", pdbs: []*policyv1.PodDisruptionBudget{pdb("b", app, 1)}, pod: runningPod(labels, true), ok: true},
		{name: "budget at zero", pdbs: []*policyv1.PodDisruptionBudget{pdb("b", app, 0)}, pod: runningPod(labels, true), blocking: []string{"b"}},
		{name: "negative allowed", pdbs: []*policyv1.PodDisruptionBudget{pdb("b", app, -1)}, pod: runningPod(labels, true), blocking: []string{"b"}},
		{name: "status not observed", pdbs: []*policyv1.PodDisruptionBudget{with(pdb("b", app, 1), func(p *policyv1.PodDisruptionBudget) {
			p.Status.ObservedGeneration = 1
		})}, pod: runningPod(labels, true), blocking: []string{"b"}},
		{name: "too many disrupted pods", pdbs: []*policyv1.PodDisruptionBudget{with(pdb("b", app, 1), func(p *policyv1.PodDisruptionBudget) {
			p.Status.DisruptedPods = map[string]metav1.Time{}
			for i := range maxDisruptedPods + 1 {
				p.Status.DisruptedPods[fmt.Sprint(i)] = metav1.Time{}
			}
		})}, pod: runningPod(labels, true), blocking: []string{"b"}},
		{name: "selector does not match", pdbs: []*policyv1.PodDisruptionBudget{pdb("b", other, 0)}, pod: runningPod(labels, true), ok: true},
		{name: "other namespace", pdbs: []*policyv1.PodDisruptionBudget{with(pdb("b", app, 0), func(p *policyv1.PodDisruptionBudget) {
			p.Namespace = "team-b"
		})}, pod: runningPod(labels, true), ok: true},
		{name: "nil selector matches nothing", pdbs: []*policyv1.PodDisruptionBudget{pdb("b", nil, 0)}, pod: runningPod(labels, true), ok: true},
		{name: "empty selector matches all", pdbs: []*policyv1.PodDisruptionBudget{pdb("b", &metav1.LabelSelector{}, 0)},
			pod: runningPod(nil, true), blocking: []string{"b"}},
		{name: "invalid selector matches nothing", pdbs: []*policyv1.PodDisruptionBudget{pdb("b", &metav1.LabelSelector{
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Bogus"}}}, 0)},
			pod: runningPod(labels, true), ok: true},
		{name: "two budgets", pdbs: []*policyv1.PodDisruptionBudget{pdb("z", app, 5), nil, pdb("a", &metav1.LabelSelector{}, 5)},
			pod: runningPod(labels, true), blocking: []string{"a", "z"}},
		{name: "pending pod ignores budgets", pdbs: []*policyv1.PodDisruptionBudget{pdb("b", app, 0)},
			pod: func() *corev1.Pod { p := runningPod(labels, true); p.Status.Phase = corev1.PodPending; return p }(), ok: true},
		{name: "succeeded pod ignores budgets", pdbs: []*policyv1.PodDisruptionBudget{pdb("b", app, 0)},
			pod: func() *corev1.Pod { p := runningPod(labels, true); p.Status.Phase = corev1.PodSucceeded; return p }(), ok: true},
		{name: "terminating pod ignores budgets", pdbs: []*policyv1.PodDisruptionBudget{pdb("b", app, 0)},
			pod: func() *corev1.Pod { p := runningPod(labels, true); p.DeletionTimestamp = &metav1.Time{}; return p }(), ok: true},
		{name: "unready pod, healthy budget", pdbs: []*policyv1.PodDisruptionBudget{pdb("b", app, 0)}, pod: runningPod(labels, false), ok: true},
		{name: "unready pod, unhealthy budget", pdbs: []*policyv1.PodDisruptionBudget{with(pdb("b", app, 0), func(p *policyv1.PodDisruptionBudget) {
			p.Status.CurrentHealthy = 1
		})}, pod: runningPod(labels, false), blocking: []string{"b"}},
		{name: "unready pod, AlwaysAllow", pdbs: []*policyv1.PodDisruptionBudget{with(pdb("b", app, 0), func(p *policyv1.PodDisruptionBudget) {
			p.Status.CurrentHealthy = 0
			p.Spec.UnhealthyPodEvictionPolicy = ptr.To(policyv1.AlwaysAllow)
		})}, pod: runningPod(labels, false), ok: true},
		{name: "ready pod, AlwaysAllow does not help", pdbs: []*policyv1.PodDisruptionBudget{with(pdb("b", app, 0), func(p *policyv1.PodDisruptionBudget) {
			p.Spec.UnhealthyPodEvictionPolicy = ptr.To(policyv1.AlwaysAllow)
		})}, pod: runningPod(labels, true), blocking: []string{"b"}},
		{name: "nil pod", pod: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ok, blocking := Allowed(tc.pdbs, tc.pod)
			if ok != tc.ok || !slices.Equal(blocking, tc.blocking) {
				t.Fatalf("Allowed() = %v, %v; want %v, %v", ok, blocking, tc.ok, tc.blocking)
			}
		})
	}
}

// tooManyRequests is the error kube-apiserver's eviction REST returns for
// a budget at zero.
func tooManyRequests(pdbName string) error {
	err := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
	err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{
		Type:    policyv1.DisruptionBudgetCause,
		Message: fmt.Sprintf("The disruption budget %s needs 2 healthy pods and has 2 currently", pdbName),
	})
	return err
}

func TestEvict(t *testing.T) {
	podsGR := schema.GroupResource{Resource: "pods"}
	forbiddenBudget := apierrors.NewForbidden(schema.GroupResource{Group: "policy", Resource: "poddisruptionbudget"}, "b",
		errors.New("pdb disruptions allowed is negative"))
	forbiddenBudget.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: policyv1.DisruptionBudgetCause,
		Message: "The disruption budget b does not allow evicting pods currently: pdb disruptions allowed is negative"}}
	twoBudgets := &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: 500,
		Message: "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."}}
	tests := []struct {
		name       string
		apiErr     error
		opts       Options
		wantNil    bool
		wantBudget []string // non-nil: a *BudgetError naming these
		wantErr    string
	}{
		{name: "accepted", wantNil: true},
		{name: "grace override", opts: Options{GracePeriodSeconds: ptr.To[int64](5)}, wantNil: true},
		{name: "dry run", opts: Options{DryRun: true}, wantNil: true},
		{name: "already gone", apiErr: apierrors.NewNotFound(podsGR, "worker-0"), wantNil: true},
		{name: "budget at zero", apiErr: tooManyRequests("train-pdb"), wantBudget: []string{"train-pdb"}},
		{name: "budget negative", apiErr: forbiddenBudget, wantBudget: []string{"b"}},
		{name: "two budgets", apiErr: twoBudgets, wantBudget: []string{}},
		{name: "throttled, not a budget", apiErr: apierrors.NewTooManyRequests("the server has received too many requests", 1),
			wantErr: "evict team-a/worker-0: the server has received too many requests"},
		{name: "recreated pod", apiErr: apierrors.NewConflict(podsGR, "worker-0", errors.New("Precondition failed: UID in precondition: uid-1, UID in object meta: uid-2")),
			wantErr: "evict team-a/worker-0: Operation cannot be fulfilled"},
		{name: "forbidden by RBAC", apiErr: apierrors.NewForbidden(podsGR, "worker-0", errors.New("no RBAC")), wantErr: "evict team-a/worker-0: pods \"worker-0\" is forbidden"},
		{name: "grace out of range", opts: Options{GracePeriodSeconds: ptr.To[int64](-1)}, wantErr: "evict: grace period -1s is outside 0..86400 (pod team-a/worker-0)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset()
			var got *policyv1.Eviction
			client.PrependReactor("create", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
				if a.GetSubresource() != "eviction" {
					return false, nil, nil
				}
				got = a.(clienttesting.CreateAction).GetObject().(*policyv1.Eviction)
				return true, nil, tc.apiErr
			})
			pod := runningPod(nil, true)
			err := Evict(t.Context(), client, pod, tc.opts)
			switch {
			case tc.wantNil:
				if err != nil {
					t.Fatalf("Evict() = %v", err)
				}
				if got == nil || got.Name != "worker-0" || got.Namespace != "team-a" ||
					got.DeleteOptions.Preconditions == nil || *got.DeleteOptions.Preconditions.UID != "uid-1" {
					t.Fatalf("eviction sent = %+v", got)
				}
				if !ptrEq(got.DeleteOptions.GracePeriodSeconds, tc.opts.GracePeriodSeconds) {
					t.Fatalf("grace period sent = %v, want %v", got.DeleteOptions.GracePeriodSeconds, tc.opts.GracePeriodSeconds)
				}
				if tc.opts.DryRun != slices.Equal(got.DeleteOptions.DryRun, []string{metav1.DryRunAll}) {
					t.Fatalf("dryRun sent = %v", got.DeleteOptions.DryRun)
				}
			case tc.wantBudget != nil:
				var be *BudgetError
				if !errors.As(err, &be) || !errors.Is(err, ErrBudget) {
					t.Fatalf("Evict() = %v, want a *BudgetError", err)
				}
				if be.Pod != "team-a/worker-0" || !slices.Equal(be.PDBs, tc.wantBudget) && len(be.PDBs)+len(tc.wantBudget) > 0 {
					t.Fatalf("BudgetError = %+v, want PDBs %v", be, tc.wantBudget)
				}
				if be.Multiple != (tc.name == "two budgets") {
					t.Fatalf("BudgetError.Multiple = %v", be.Multiple)
				}
				if !errors.Is(err, tc.apiErr) || !strings.Contains(err.Error(), "evict team-a/worker-0: ") {
					t.Fatalf("Evict() = %v: does not wrap the API error or name the pod", err)
				}
			default:
				if err == nil || errors.Is(err, ErrBudget) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Evict() = %v, want a non-budget error containing %q", err, tc.wantErr)
				}
				if tc.apiErr != nil && !errors.Is(err, tc.apiErr) {
					t.Fatalf("Evict() = %v does not wrap %v", err, tc.apiErr)
				}
			}
		})
	}
	if err := Evict(t.Context(), fake.NewClientset(), nil, Options{}); err == nil {
		t.Fatal("Evict(nil pod) did not fail")
	}
	if err := Evict(t.Context(), nil, runningPod(nil, true), Options{}); err == nil {
		t.Fatal("Evict(nil client) did not fail")
	}
}

func ptrEq(a, b *int64) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
