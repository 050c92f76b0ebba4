package test

import (
	"context"
	"errors"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/pkg/scheduler/evict"
	"github.com/gpud/gpud/pkg/scheduler/plan"
	"github.com/gpud/gpud/pkg/scheduler/podgroup"
	"github.com/gpud/gpud/pkg/scheduler/podgroup/pgwatch"
	"github.com/gpud/gpud/test/k8senv"
)

// The scheduler-input end-to-end tests run a real kube-apiserver (no
// kube-scheduler, no kube-controller-manager, no kubelet): the shipped
// PodGroup CRD is installed and served, PodGroups written as coscheduling
// users write them reach plan.Group through gpud's informer, and pods are
// evicted through the real Eviction API with PodDisruptionBudgets whose
// status the test sets as the disruption controller would.

const pgTimeout = 60 * time.Second

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// coschedulingManifest is a PodGroup as scheduler-plugins' documentation
// has users write it, plus two that the CRD accepts but gpud refuses.
const coschedulingManifest = `
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: PodGroup
metadata:
  name: nginx
  namespace: default
spec:
  scheduleTimeoutSeconds: 10
  minMember: 3
  minResources:
    cpu: "3"
    nvidia.com/gpu: 8
---
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: PodGroup
metadata:
  name: no-min
  namespace: default
spec:
  scheduleTimeoutSeconds: 10
---
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: PodGroup
metadata:
  name: week-long
  namespace: default
spec:
  minMember: 2
  scheduleTimeoutSeconds: 604800
`

func TestSchedulerInputsEndToEnd(t *testing.T) {
	t.Parallel() // only its own etcd, API server and processes: see TestMain
	if testing.Short() {
		t.Skip("runs kube-apiserver")
	}
	env := k8senv.Start(t, k8senv.WithoutScheduler())
	t.Run("PodGroup", func(t *testing.T) { testPodGroups(t, env) })
	t.Run("Evict", func(t *testing.T) { testEvict(t, env) })
}

// yamlDocs turns a multi-document YAML string into unstructured objects
// (goccy/go-yaml refuses duplicate keys).
func yamlDocs(t *testing.T, data string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for i, doc := range strings.Split(data, "\n---") {
		if strings.TrimSpace(stripYAMLComments(doc)) == "" {
			continue
		}
		js, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatalf("doc %d: %v", i, err)
		}
		var obj map[string]any
		if err := utiljson.Unmarshal(js, &obj); err != nil {
			t.Fatalf("doc %d: %v", i, err)
		}
		out = append(out, &unstructured.Unstructured{Object: obj})
	}
	return out
}

func stripYAMLComments(doc string) string {
	var b strings.Builder
	for line := range strings.SplitSeq(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// strict is server-side strict field validation: an unknown or duplicate
// field is an error, as `kubectl apply --validate=strict` makes it.
var strict = metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}

func testPodGroups(t *testing.T, env *k8senv.Env) {
	ctx := t.Context()
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	disco := env.Client.Discovery()

	// Without the CRD the scheduler runs without coscheduling groups.
	if ok, err := pgwatch.Installed(disco); err != nil || ok {
		t.Fatalf("Installed() before the CRD = %v, %v; want false, nil", ok, err)
	}
	// k8senv turns GenericWorkload on: the in-tree PodGroup is served.
	if ok, err := pgwatch.InTreeInstalled(disco); err != nil || !ok {
		t.Fatalf("InTreeInstalled() = %v, %v; want true (k8senv enables GenericWorkload)", ok, err)
	}

	// The shipped CRD, created with strict field validation.
	data, err := os.ReadFile("../deploy/scheduler/podgroup-crd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs := yamlDocs(t, string(data))
	if len(docs) != 1 || docs[0].GetKind() != "CustomResourceDefinition" {
		t.Fatalf("podgroup-crd.yaml: %d documents, want one CustomResourceDefinition", len(docs))
	}
	if _, err := dyn.Resource(crdGVR).Create(ctx, docs[0], strict); err != nil {
		t.Fatalf("create the PodGroup CRD: %v", err)
	}
	testwait.ForErr(t, pgTimeout, "the PodGroup CRD to be established and discovered", func() error {
		crd, err := dyn.Resource(crdGVR).Get(ctx, "podgroups.scheduling.x-k8s.io", metav1.GetOptions{})
		if err != nil {
			return err
		}
		conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
		established := false
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Established" && m["status"] == "True" {
				established = true
			}
		}
		if !established {
			return errors.New("not established")
		}
		ok, err := pgwatch.Installed(disco)
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("not in discovery")
		}
		return nil
	})

	// A field coscheduling does not have is refused by the CRD's schema
	// under strict validation: the manifest above is really checked.
	typo := yamlDocs(t, "apiVersion: scheduling.x-k8s.io/v1alpha1\nkind: PodGroup\nmetadata: {name: typo, namespace: default}\nspec: {minMembers: 2}\n")[0]
	if _, err := dyn.Resource(podgroup.GVR).Namespace("default").Create(ctx, typo, strict); err == nil ||
		!strings.Contains(err.Error(), "minMembers") {
		t.Fatalf("a PodGroup with spec.minMembers: %v, want a strict-validation error naming it", err)
	}

	created := map[string]time.Time{}
	for _, u := range yamlDocs(t, coschedulingManifest) {
		got, err := dyn.Resource(podgroup.GVR).Namespace(u.GetNamespace()).Create(ctx, u, strict)
		if err != nil {
			t.Fatalf("create PodGroup %s: %v", u.GetName(), err)
		}
		created[got.GetName()] = got.GetCreationTimestamp().Time
	}

	// An in-tree group and pods naming groups both ways.
	inTree, err := env.Client.SchedulingV1beta1().PodGroups("default").Create(ctx, &schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: "workers-0"},
		Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
			Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 2}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create a scheduling.k8s.io/v1beta1 PodGroup: %v", err)
	}
	labelled := pgPod("nginx-0", map[string]string{plan.PodGroupLabel: "nginx"}, "")
	labelled.Spec.SchedulerName = "gpud-scheduler"
	member, err := env.Client.CoreV1().Pods("default").Create(ctx, labelled, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	worker := pgPod("worker-0", nil, "")
	worker.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To("workers-0")}
	inTreeMember, err := env.Client.CoreV1().Pods("default").Create(ctx, worker, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create a pod with spec.schedulingGroup: %v", err)
	}
	if k := podgroup.KeyOf(member); k != "default/nginx" {
		t.Fatalf("KeyOf(labelled pod) = %q", k)
	}
	if k := podgroup.KeyOf(inTreeMember); k != "default/workers-0" {
		t.Fatalf("KeyOf(pod with schedulingGroup) = %q (spec.schedulingGroup = %+v)", k, inTreeMember.Spec.SchedulingGroup)
	}

	inf := pgwatch.NewInformer(dyn, 0)
	inTreeInf := pgwatch.NewInTreeInformer(env.Client, 0)
	go inf.Run(ctx.Done())
	go inTreeInf.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced, inTreeInf.HasSynced) {
		t.Fatal("informers did not sync")
	}
	check := func(what string, wantNginx int32) {
		t.Helper()
		testwait.ForErr(t, pgTimeout, what, func() error {
			groups, errs := pgwatch.Groups(inf, inTreeInf)
			want := map[string]plan.Group{
				"default/workers-0": {Namespace: "default", Name: "workers-0", MinMember: 2, Created: inTree.CreationTimestamp.Time},
			}
			if wantNginx > 0 {
				want["default/nginx"] = plan.Group{Namespace: "default", Name: "nginx", MinMember: wantNginx,
					ScheduleTimeout: 10 * time.Second, Created: created["nginx"]}
			}
			// The invalid ones stay, saying why, so that their pods do.
			for k, why := range map[string]string{"default/no-min": "spec.minMember 0 is outside 1..10000",
				"default/week-long": "spec.scheduleTimeoutSeconds 604800 is outside 0..86400"} {
				if g := groups[k]; g == nil || !strings.Contains(g.Invalid, why) {
					return errors.New("group " + k + " not kept as invalid")
				}
			}
			if len(groups) != len(want)+2 {
				return errors.New("groups " + strings.Join(slices.Sorted(maps.Keys(groups)), ","))
			}
			for k, w := range want {
				g := groups[k]
				if g == nil || g.Namespace != w.Namespace || g.Name != w.Name || g.MinMember != w.MinMember ||
					g.ScheduleTimeout != w.ScheduleTimeout || !g.Created.Equal(w.Created) {
					return errors.New("group " + k + " differs")
				}
			}
			if len(errs) != 2 || !strings.Contains(errs[0].Error(), "PodGroup default/no-min: spec.minMember 0 is outside 1..10000") ||
				!strings.Contains(errs[1].Error(), "PodGroup default/week-long: spec.scheduleTimeoutSeconds 604800 is outside 0..86400") {
				return errors.Join(append([]error{errors.New("skip reasons differ")}, errs...)...)
			}
			return nil
		})
	}
	check("Groups() to hold default/nginx (3, 10s), default/workers-0 (2) and no-min and week-long as invalid", 3)

	// A change to minMember reaches the informer; a deleted group leaves.
	pg, err := dyn.Resource(podgroup.GVR).Namespace("default").Get(ctx, "nginx", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(pg.Object, int64(5), "spec", "minMember"); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(podgroup.GVR).Namespace("default").Update(ctx, pg, metav1.UpdateOptions{FieldValidation: metav1.FieldValidationStrict}); err != nil {
		t.Fatal(err)
	}
	check("default/nginx to have minMember 5", 5)
	if err := dyn.Resource(podgroup.GVR).Namespace("default").Delete(ctx, "nginx", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	check("default/nginx to be gone", 0)
}

func pgPod(name string, labels map[string]string, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: labels},
		Spec: corev1.PodSpec{NodeName: node, AutomountServiceAccountToken: ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			Containers:                    []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
	}
}

// runningReady creates pod bound to its node and sets its status as a
// kubelet would: Running and Ready (a Pending pod is evicted without any
// budget check).
func runningReady(t *testing.T, env *k8senv.Env, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	ctx := t.Context()
	p, err := env.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s: %v", pod.Name, err)
	}
	now := metav1.Now()
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
	}
	p, err = env.Client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("pod %s status: %v", pod.Name, err)
	}
	return p
}

// setBudget writes a PDB's status as the disruption controller (which
// k8senv does not run) would, for the generation the server holds.
func setBudget(t *testing.T, env *k8senv.Env, name string, allowed int32) *policyv1.PodDisruptionBudget {
	t.Helper()
	ctx := t.Context()
	pdbs := env.Client.PolicyV1().PodDisruptionBudgets("default")
	pdb, err := pdbs.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pdb.Status = policyv1.PodDisruptionBudgetStatus{
		ObservedGeneration: pdb.Generation, DisruptionsAllowed: allowed,
		CurrentHealthy: 1 + allowed, DesiredHealthy: 1, ExpectedPods: 1 + allowed,
	}
	pdb, err = pdbs.UpdateStatus(ctx, pdb, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("PDB %s status: %v", name, err)
	}
	return pdb
}

func testEvict(t *testing.T, env *k8senv.Env) {
	ctx := t.Context()
	env.CreateNode(t, "node-a", nil)
	pods := env.Client.CoreV1().Pods("default")
	train := map[string]string{"app": "train"}
	victim := runningReady(t, env, pgPod("victim", train, "node-a"))

	_, err := env.Client.PolicyV1().PodDisruptionBudgets("default").Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "train-pdb"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: train}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// Budget at zero: Allowed says so and the API server refuses.
	pdb := setBudget(t, env, "train-pdb", 0)
	if ok, blocking := evict.Allowed([]*policyv1.PodDisruptionBudget{pdb}, victim); ok || !slices.Equal(blocking, []string{"train-pdb"}) {
		t.Fatalf("Allowed(budget 0) = %v, %v", ok, blocking)
	}
	for _, dry := range []bool{true, false} {
		err := evict.Evict(ctx, env.Client, victim, evict.Options{DryRun: dry})
		var be *evict.BudgetError
		if !errors.As(err, &be) || !errors.Is(err, evict.ErrBudget) || !apierrors.IsTooManyRequests(err) ||
			!slices.Equal(be.PDBs, []string{"train-pdb"}) || be.Pod != "default/victim" {
			t.Fatalf("Evict(budget 0, dryRun %v) = %v (%#v), want a BudgetError naming train-pdb", dry, err, be)
		}
		t.Logf("refused as expected: %v", err)
	}
	if p, err := pods.Get(ctx, "victim", metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
		t.Fatalf("victim after a refused eviction: %v, deletionTimestamp %v", err, p.DeletionTimestamp)
	}

	// A budget whose status is older than its spec: the API server asks to
	// retry after 10s; Evict does not sleep on it.
	pdbs := env.Client.PolicyV1().PodDisruptionBudgets("default")
	pdb.Spec.MinAvailable = ptr.To(intstr.FromInt32(0))
	if pdb, err = pdbs.Update(ctx, pdb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if pdb.Status.ObservedGeneration >= pdb.Generation {
		t.Fatalf("PDB generation %d, observed %d: want a stale status", pdb.Generation, pdb.Status.ObservedGeneration)
	}
	if ok, blocking := evict.Allowed([]*policyv1.PodDisruptionBudget{pdb}, victim); ok || !slices.Equal(blocking, []string{"train-pdb"}) {
		t.Fatalf("Allowed(stale status) = %v, %v", ok, blocking)
	}
	begin := time.Now()
	err = evict.Evict(ctx, env.Client, victim, evict.Options{})
	if !errors.Is(err, evict.ErrBudget) || time.Since(begin) > 5*time.Second {
		t.Fatalf("Evict(stale budget status) = %v after %s, want ErrBudget at once", err, time.Since(begin))
	}
	t.Logf("stale budget refused in %s: %v", time.Since(begin).Round(time.Millisecond), err)

	// Budget at one: a dry run leaves the pod, the eviction starts its
	// graceful termination with its own 30s.
	pdb = setBudget(t, env, "train-pdb", 1)
	if ok, blocking := evict.Allowed([]*policyv1.PodDisruptionBudget{pdb}, victim); !ok || blocking != nil {
		t.Fatalf("Allowed(budget 1) = %v, %v", ok, blocking)
	}
	if err := evict.Evict(ctx, env.Client, victim, evict.Options{DryRun: true}); err != nil {
		t.Fatalf("Evict(dry run, budget 1): %v", err)
	}
	if p, _ := pods.Get(ctx, "victim", metav1.GetOptions{}); p == nil || p.DeletionTimestamp != nil {
		t.Fatal("a dry-run eviction deleted the pod")
	}
	if err := evict.Evict(ctx, env.Client, victim, evict.Options{}); err != nil {
		t.Fatalf("Evict(budget 1): %v", err)
	}
	p, err := pods.Get(ctx, "victim", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("victim after eviction: %v (with no kubelet it stays terminating)", err)
	}
	if p.DeletionTimestamp == nil || p.DeletionGracePeriodSeconds == nil || *p.DeletionGracePeriodSeconds != 30 {
		t.Fatalf("victim after eviction: deletionTimestamp %v, grace %v; want set, 30s", p.DeletionTimestamp, p.DeletionGracePeriodSeconds)
	}
	if !slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
		return c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue
	}) {
		t.Fatalf("victim has no DisruptionTarget condition: %+v", p.Status.Conditions)
	}
	got, err := pdbs.Get(ctx, "train-pdb", metav1.GetOptions{})
	if _, disrupted := got.Status.DisruptedPods["victim"]; err != nil || got.Status.DisruptionsAllowed != 0 || !disrupted {
		t.Fatalf("train-pdb after the eviction: %v, %+v; want 0 allowed and victim disrupted", err, got.Status)
	}
	// Evicting a terminating pod again is fine (budgets no longer apply).
	if err := evict.Evict(ctx, env.Client, p, evict.Options{}); err != nil {
		t.Fatalf("Evict(terminating): %v", err)
	}

	// A grace override.
	short := runningReady(t, env, pgPod("short", map[string]string{"app": "serve"}, "node-a"))
	if err := evict.Evict(ctx, env.Client, short, evict.Options{GracePeriodSeconds: ptr.To[int64](5)}); err != nil {
		t.Fatalf("Evict(grace 5): %v", err)
	}
	if p, err := pods.Get(ctx, "short", metav1.GetOptions{}); err != nil || p.DeletionGracePeriodSeconds == nil || *p.DeletionGracePeriodSeconds != 5 {
		t.Fatalf("short after eviction: %v, grace %v; want 5s", err, p.DeletionGracePeriodSeconds)
	}

	// Gone already: success.
	gone := pgPod("never-created", nil, "node-a")
	if err := evict.Evict(ctx, env.Client, gone, evict.Options{}); err != nil {
		t.Fatalf("Evict(missing pod) = %v, want nil", err)
	}

	// A pod recreated under the same name is not evicted by the old UID.
	again := runningReady(t, env, pgPod("again", nil, "node-a"))
	stale := again.DeepCopy()
	stale.UID = "00000000-0000-0000-0000-000000000000"
	err = evict.Evict(ctx, env.Client, stale, evict.Options{})
	if err == nil || errors.Is(err, evict.ErrBudget) || !apierrors.IsConflict(err) || !strings.Contains(err.Error(), "evict default/again: ") {
		t.Fatalf("Evict(stale UID) = %v, want a wrapped Conflict naming the pod", err)
	}

	// Two budgets over one pod: the Eviction API does not support it.
	both := map[string]string{"app": "both"}
	two := runningReady(t, env, pgPod("two", both, "node-a"))
	var twoPDBs []*policyv1.PodDisruptionBudget
	for _, name := range []string{"both-a", "both-b"} {
		if _, err := env.Client.PolicyV1().PodDisruptionBudgets("default").Create(ctx, &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1)),
				Selector: &metav1.LabelSelector{MatchLabels: both}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		twoPDBs = append(twoPDBs, setBudget(t, env, name, 1))
	}
	if ok, blocking := evict.Allowed(twoPDBs, two); ok || !slices.Equal(blocking, []string{"both-a", "both-b"}) {
		t.Fatalf("Allowed(two budgets) = %v, %v", ok, blocking)
	}
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err = evict.Evict(tctx, env.Client, two, evict.Options{})
	var be *evict.BudgetError
	if !errors.As(err, &be) || !be.Multiple || !errors.Is(err, evict.ErrBudget) {
		t.Fatalf("Evict(two budgets) = %v, want ErrBudget", err)
	}
	t.Logf("two budgets refused as expected: %v", err)
}
