package test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/pkg/scheduler"
	"github.com/gpud/gpud/pkg/scheduler/decide"
	"github.com/gpud/gpud/pkg/scheduler/plan"
	"github.com/gpud/gpud/pkg/scheduler/queues"
	"github.com/gpud/gpud/test/k8senv"
)

// The Queue end-to-end test runs a real kube-apiserver (no kube-scheduler)
// with the shipped Queue CRD, admission policy and scheduler RBAC, and
// pkg/scheduler in-process as the gpud-scheduler service account with
// Queue objects wired as cmd/gpud wires them: two tenant queues with CPU
// limits, a tenant's pod that names the other tenant's queue (refused
// with a reason), a limit raised live, the status the leader writes, an
// invalid Queue refused with a condition, and a tenant who may edit its
// namespace but not rebind it to another queue.

const queueTimeout = 60 * time.Second

const queueManifest = `
apiVersion: scheduling.gpud.io/v1alpha1
kind: Queue
metadata: {name: org}
spec: {weight: 2}
---
apiVersion: scheduling.gpud.io/v1alpha1
kind: Queue
metadata: {name: team-a}
spec:
  parent: org
  limit: {cpuMilli: 1000}
  namespaces: [team-a]
---
apiVersion: scheduling.gpud.io/v1alpha1
kind: Queue
metadata: {name: team-b}
spec:
  parent: org
  weight: "1.5"
  guaranteed: {cpuMilli: 500}
  limit: {cpuMilli: 4000}
  namespaces: [team-b]
---
apiVersion: scheduling.gpud.io/v1alpha1
kind: Queue
metadata: {name: orphan}
spec:
  parent: nowhere
  namespaces: [orphans]
`

func TestQueuesEndToEnd(t *testing.T) {
	t.Parallel() // only its own etcd, API server and processes: see TestMain
	if testing.Short() {
		t.Skip("runs kube-apiserver")
	}
	env := k8senv.Start(t, k8senv.WithoutScheduler())
	ctx := t.Context()
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	installQueueCRD(t, env, dyn)
	applyRBAC(t, env, "../deploy/scheduler/rbac.yaml")
	applyQueueAdmission(t, env)

	// The CRD's schema refuses what it can check cheaply, naming it.
	for _, bad := range []struct{ doc, field string }{
		{"apiVersion: scheduling.gpud.io/v1alpha1\nkind: Queue\nmetadata: {name: neg}\nspec: {limit: {gpuMilli: -1}}\n", "spec.limit.gpuMilli"},
		{"apiVersion: scheduling.gpud.io/v1alpha1\nkind: Queue\nmetadata: {name: self}\nspec: {parent: self}\n", "spec.parent"},
		{"apiVersion: scheduling.gpud.io/v1alpha1\nkind: Queue\nmetadata: {name: over}\nspec: {guaranteed: {cpuMilli: 2}, limit: {cpuMilli: 1}}\n", "spec.guaranteed"},
		{"apiVersion: scheduling.gpud.io/v1alpha1\nkind: Queue\nmetadata: {name: typo}\nspec: {limits: {cpuMilli: 1}}\n", "limits"},
		{"apiVersion: scheduling.gpud.io/v1alpha1\nkind: Queue\nmetadata: {name: w1}\nspec: {weight: 2.5}\n", "spec.weight"},
		{"apiVersion: scheduling.gpud.io/v1alpha1\nkind: Queue\nmetadata: {name: w2}\nspec: {weight: \"2.5x\"}\n", "spec.weight"},
		{"apiVersion: scheduling.gpud.io/v1alpha1\nkind: Queue\nmetadata: {name: w3}\nspec: {weight: \"1000000.5\"}\n", "spec.weight"},
		{"apiVersion: scheduling.gpud.io/v1alpha1\nkind: Queue\nmetadata: {name: w4}\nspec: {weight: -1}\n", "spec.weight"},
	} {
		if _, err := dyn.Resource(queues.GVR).Create(ctx, yamlDocs(t, bad.doc)[0], strict); err == nil || !strings.Contains(err.Error(), bad.field) {
			t.Errorf("creating %q: %v, want an error naming %s", bad.doc, err, bad.field)
		}
	}
	for _, ns := range []string{"team-a", "team-b", "orphans"} {
		if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range yamlDocs(t, queueManifest) {
		if _, err := dyn.Resource(queues.GVR).Create(ctx, q, strict); err != nil {
			t.Fatalf("create Queue %s: %v", q.GetName(), err)
		}
	}

	// The scheduler with the shipped RBAC, wired as cmd/gpud wires it.
	schedCfg := env.ServiceAccountConfig(t, "gpud", "gpud-scheduler")
	schedClient, err := kubernetes.NewForConfig(schedCfg)
	if err != nil {
		t.Fatal(err)
	}
	schedDyn, err := dynamic.NewForConfig(schedCfg)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := queues.Installed(schedClient.Discovery()); err != nil || !ok {
		t.Fatalf("queues.Installed() = %v, %v; want true", ok, err)
	}
	src, err := queues.NewSource(queues.Config{Dynamic: schedDyn, Client: schedClient, StatusInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s, err := scheduler.New(scheduler.Config{Client: schedClient, Decider: decide.New(decide.Config{}), Resync: 500 * time.Millisecond,
		QueueSet: src.Set, QueueStatus: src.Observe, GroupsSynced: src.Synced})
	if err != nil {
		t.Fatal(err)
	}
	src.OnChange(s.Wake)
	testwait.Run(t, "queues", src.Run)
	testwait.Run(t, "scheduler", s.Run)
	env.CreateNode(t, "cpu-node", nil)

	// A tenant of team-a naming team-b's queue is refused, with a reason.
	createQueuePod(t, env, "team-a", "escape", "100m", "team-b")
	msg := waitPodScheduledFalse(t, env, "team-a", "escape")
	if !strings.Contains(msg, "namespace team-a is bound to queue team-a") || !strings.Contains(msg, "gpud.io/queue=team-b") {
		t.Fatalf("escape's PodScheduled message %q, want it to say team-a is bound to queue team-a and name the label", msg)
	}
	// team-a's limit (1000m) lets one 600m pod run, not two.
	createQueuePod(t, env, "team-a", "a-1", "600m", "")
	env.WaitForPodBound(t, "team-a", "a-1", queueTimeout)
	createQueuePod(t, env, "team-a", "a-2", "600m", "")
	if msg := waitPodScheduledFalse(t, env, "team-a", "a-2"); !strings.Contains(msg, "team-a") {
		t.Fatalf("a-2's PodScheduled message %q, want the queue's limit", msg)
	}
	// team-b's pod runs in team-b (its namespace's queue).
	createQueuePod(t, env, "team-b", "b-1", "700m", "")
	env.WaitForPodBound(t, "team-b", "b-1", queueTimeout)
	// Weights as written: org's integer and team-b's decimal string.
	weights := map[string]float64{}
	qs, _, _ := src.Set()
	for _, q := range qs {
		weights[q.Name] = q.Weight
	}
	if weights["org"] != 2 || weights["team-b"] != 1.5 {
		t.Fatalf("weights %v, want org 2 and team-b 1.5", weights)
	}

	// The status the leader writes: usage against guarantee and limit,
	// pending pods, conditions.
	waitQueueStatus(t, dyn, "team-a", func(st queues.Status) error {
		if st.Usage.CPUMilli != 600 || st.PendingPods != 1 {
			return fmt.Errorf("usage %d milli-CPU, %d pending; want 600 and 1", st.Usage.CPUMilli, st.PendingPods)
		}
		return wantCondition(st, queues.ConditionAccepted, metav1.ConditionTrue, "")
	})
	waitQueueStatus(t, dyn, "team-b", func(st queues.Status) error {
		if st.Usage.CPUMilli != 700 {
			return fmt.Errorf("usage %d milli-CPU, want 700", st.Usage.CPUMilli)
		}
		return wantCondition(st, queues.ConditionOverGuarantee, metav1.ConditionTrue, "cpuMilli 700 used, 500 guaranteed")
	})
	waitQueueStatus(t, dyn, "org", func(st queues.Status) error {
		if st.Usage.CPUMilli != 1300 || st.PendingPods != 1 {
			return fmt.Errorf("usage %d milli-CPU, %d pending; want 1300 (both teams) and 1", st.Usage.CPUMilli, st.PendingPods)
		}
		return nil
	})
	// The invalid Queue is refused, naming the field, and its namespace's
	// pods wait with the reason; the other queues are unaffected (above).
	waitQueueStatus(t, dyn, "orphan", func(st queues.Status) error {
		return wantCondition(st, queues.ConditionAccepted, metav1.ConditionFalse, `spec.parent: queue "nowhere" is not defined`)
	})
	createQueuePod(t, env, "orphans", "o-1", "100m", "")
	if msg := waitPodScheduledFalse(t, env, "orphans", "o-1"); !strings.Contains(msg, "queue orphan, which is refused: spec.parent") {
		t.Fatalf("o-1's PodScheduled message %q, want the refusal of queue orphan", msg)
	}

	// A limit raised live: a-2 runs without a restart.
	patch := []byte(`{"spec":{"limit":{"cpuMilli":2000}}}`)
	if _, err := dyn.Resource(queues.GVR).Patch(ctx, "team-a", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	env.WaitForPodBound(t, "team-a", "a-2", queueTimeout)
	waitQueueStatus(t, dyn, "team-a", func(st queues.Status) error {
		if st.Usage.CPUMilli != 1200 || st.PendingPods != 0 {
			return fmt.Errorf("usage %d milli-CPU, %d pending; want 1200 and 0", st.Usage.CPUMilli, st.PendingPods)
		}
		return nil
	})
	if p, err := env.Client.CoreV1().Pods("team-a").Get(ctx, "escape", metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
		t.Fatalf("escape: %v, bound to %q; want it still refused", err, p.Spec.NodeName)
	}

	// A tenant who may edit its Namespace cannot bind it to another queue;
	// an admin (cluster-admin: "bind" on every queue) can.
	tenantRole := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "tenant-namespace-editor"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "update", "patch"}}}}
	if _, err := env.Client.RbacV1().ClusterRoles().Create(ctx, tenantRole, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tenant-namespace-editor"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: tenantRole.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "tenant-a"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tenant, err := kubernetes.NewForConfig(env.UserConfig(t, "tenant-a"))
	if err != nil {
		t.Fatal(err)
	}
	label := []byte(`{"metadata":{"labels":{"gpud.io/queue":"team-b"}}}`)
	testwait.ForErr(t, queueTimeout, "the admission policy to refuse the tenant's label", func() error {
		_, err := tenant.CoreV1().Namespaces().Patch(ctx, "team-a", types.MergePatchType, label, metav1.PatchOptions{})
		if err == nil {
			// The policy was not active yet: undo, try again.
			_, _ = env.Client.CoreV1().Namespaces().Patch(ctx, "team-a", types.MergePatchType, []byte(`{"metadata":{"labels":{"gpud.io/queue":null}}}`), metav1.PatchOptions{})
			return errors.New("the tenant labelled its namespace")
		}
		if !strings.Contains(err.Error(), "needs the verb bind on queues.scheduling.gpud.io") {
			return fmt.Errorf("refused with %v, want the policy's message", err)
		}
		return nil
	})
	if _, err := tenant.CoreV1().Namespaces().Patch(ctx, "team-a", types.MergePatchType, []byte(`{"metadata":{"labels":{"owner":"a"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("the tenant's other label: %v, want it allowed", err)
	}
	if _, err := env.Client.CoreV1().Namespaces().Patch(ctx, "orphans", types.MergePatchType, []byte(`{"metadata":{"labels":{"gpud.io/queue":"team-b"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("an admin labelling a namespace: %v", err)
	}
}

// installQueueCRD creates the shipped Queue CRD and waits for discovery.
func installQueueCRD(t *testing.T, env *k8senv.Env, dyn dynamic.Interface) {
	t.Helper()
	data, err := os.ReadFile("../deploy/scheduler/queue-crd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs := yamlDocs(t, string(data))
	if len(docs) != 1 || docs[0].GetKind() != "CustomResourceDefinition" {
		t.Fatalf("queue-crd.yaml: %d documents, want one CustomResourceDefinition", len(docs))
	}
	if _, err := dyn.Resource(crdGVR).Create(t.Context(), docs[0], strict); err != nil {
		t.Fatalf("create the Queue CRD: %v", err)
	}
	testwait.ForErr(t, queueTimeout, "the Queue CRD in discovery", func() error {
		ok, err := queues.Installed(env.Client.Discovery())
		if err == nil && !ok {
			err = errors.New("not served yet")
		}
		return err
	})
}

// applyQueueAdmission creates queue-admission.yaml's objects.
func applyQueueAdmission(t *testing.T, env *k8senv.Env) {
	t.Helper()
	c, ctx := env.Client, t.Context()
	for _, obj := range draManifests(t, "../deploy/scheduler/queue-admission.yaml") {
		var err error
		switch o := obj.(type) {
		case *rbacv1.ClusterRole:
			_, err = c.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = c.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
		case *admissionv1.ValidatingAdmissionPolicy:
			_, err = c.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, o, metav1.CreateOptions{})
		case *admissionv1.ValidatingAdmissionPolicyBinding:
			_, err = c.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, o, metav1.CreateOptions{})
		default:
			t.Fatalf("queue-admission.yaml: unexpected %T", obj)
		}
		if err != nil {
			t.Fatalf("queue-admission.yaml %T: %v", obj, err)
		}
	}
}

func createQueuePod(t *testing.T, env *k8senv.Env, ns, name, cpu, queue string) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{SchedulerName: scheduler.DefaultSchedulerName, Containers: []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}}},
	}
	if queue != "" {
		pod.Labels = map[string]string{plan.QueueLabel: queue}
	}
	if _, err := env.Client.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitPodScheduledFalse waits for the scheduler's PodScheduled=False
// condition on a pod that must stay unbound, and returns its message.
func waitPodScheduledFalse(t *testing.T, env *k8senv.Env, ns, name string) string {
	t.Helper()
	var msg string
	testwait.ForErr(t, queueTimeout, ns+"/"+name+" PodScheduled=False", func() error {
		p, err := env.Client.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Spec.NodeName != "" {
			t.Fatalf("%s/%s bound to %s, want it waiting", ns, name, p.Spec.NodeName)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
				msg = c.Message
				return nil
			}
		}
		return errors.New("no PodScheduled=False yet")
	})
	return msg
}

func waitQueueStatus(t *testing.T, dyn dynamic.Interface, name string, check func(queues.Status) error) {
	t.Helper()
	testwait.ForErr(t, queueTimeout, "Queue "+name+"'s status", func() error {
		u, err := dyn.Resource(queues.GVR).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		q, err := queues.FromUnstructured(&unstructured.Unstructured{Object: u.Object})
		if err != nil {
			return err
		}
		return check(q.Status)
	})
}

func wantCondition(st queues.Status, typ string, status metav1.ConditionStatus, msgPart string) error {
	c := meta.FindStatusCondition(st.Conditions, typ)
	if c == nil || c.Status != status || !strings.Contains(c.Message, msgPart) {
		return fmt.Errorf("condition %s %+v, want %s with a message containing %q", typ, c, status, msgPart)
	}
	return nil
}
