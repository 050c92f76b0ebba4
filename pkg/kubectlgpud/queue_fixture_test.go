package kubectlgpud

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpud/gpud/pkg/scheduler/queues"
)

// testQueues are the fixture cluster's Queue objects, as the leading
// scheduler left them:
//
//   - org (root) over research (team-a, borrowing beyond its guarantee)
//     and serving (team-b, its status one generation behind the spec);
//   - orphan, refused (its parent does not exist);
//   - fresh, written after the scheduler's last status round (no status).
func testQueues(t testing.TB) []*queues.Queue {
	t.Helper()
	cond := func(typ string, st metav1.ConditionStatus, reason, msg string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: st, Reason: reason, Message: msg, LastTransitionTime: metav1.NewTime(fixedTime)}
	}
	accepted := cond(queues.ConditionAccepted, metav1.ConditionTrue, queues.ReasonAccepted, "in the queue tree")
	within := cond(queues.ConditionOverGuarantee, metav1.ConditionFalse, queues.ReasonWithinGuarantee, "within the guarantee")
	q := func(name string, gen int64, spec queues.Spec, st queues.Status) *queues.Queue {
		return &queues.Queue{TypeMeta: metav1.TypeMeta{APIVersion: queues.GroupVersion.String(), Kind: queues.Kind},
			ObjectMeta: metav1.ObjectMeta{Name: name, Generation: gen}, Spec: spec, Status: st}
	}
	return []*queues.Queue{
		q("org", 1, queues.Spec{Guaranteed: queues.Resources{GPUMilli: 8000}, Limit: queues.Resources{GPUMilli: 16000, CPUMilli: 256000}},
			queues.Status{ObservedGeneration: 1, Usage: queues.Resources{GPUMilli: 5000, MIGSlices: 2}, PendingPods: 4,
				Conditions: []metav1.Condition{accepted, within}}),
		q("research", 3, queues.Spec{Parent: "org", Weight: queues.DecimalWeight("2.5"), Namespaces: []string{"team-a"},
			Guaranteed: queues.Resources{GPUMilli: 2000}, Limit: queues.Resources{GPUMilli: 8000},
			ModelLimit: map[string]int64{"NVIDIA H100 80GB HBM3": 8000}},
			queues.Status{ObservedGeneration: 3, Usage: queues.Resources{GPUMilli: 4000, MIGSlices: 1}, PendingPods: 3,
				Conditions: []metav1.Condition{accepted, cond(queues.ConditionOverGuarantee, metav1.ConditionTrue, queues.ReasonBorrowing,
					"borrowing beyond the guarantee (preemptible by queues under theirs): gpuMilli 4000 used, 2000 guaranteed")}}),
		q("serving", 2, queues.Spec{Parent: "org", Namespaces: []string{"team-b"}, Guaranteed: queues.Resources{GPUMilli: 2000, GPUMemoryMiB: 81920},
			Objectives:      &queues.Objectives{Wait: queues.IntWeight(1), Energy: queues.DecimalWeight("0.5")},
			ModelGuaranteed: map[string]int64{"NVIDIA A100-SXM4-40GB": 1000}},
			queues.Status{ObservedGeneration: 1, Usage: queues.Resources{GPUMilli: 1000, GPUMemoryMiB: 51200, MIGSlices: 1}, PendingPods: 1,
				Conditions: []metav1.Condition{accepted, within}}),
		q("orphan", 1, queues.Spec{Parent: "nope", Limit: queues.Resources{GPUMilli: 1000}},
			queues.Status{ObservedGeneration: 1, Conditions: []metav1.Condition{cond(queues.ConditionAccepted, metav1.ConditionFalse, queues.ReasonInvalid,
				`spec.parent: queue "nope" is not defined (no Queue object or --queues entry of that name)`)}}),
		q("fresh", 1, queues.Spec{Weight: queues.IntWeight(1)}, queues.Status{}),
	}
}

// fakeQueueClients is the fixture cluster with its Queue objects;
// escape-0, a team-b pod whose label names research (refused: team-b is
// bound to serving); namespace team-c, bound to research by its label
// only, with notebook-0 (no label of its own) pending; and namespace
// team-d, whose label names batch, a queue no Queue object defines.
func fakeQueueClients(t testing.TB) Clients {
	t.Helper()
	cs := fake.NewClientset(testCluster(t)...)
	escape := pod("team-b", "escape-0", "", "research", "")
	escape.Spec.Containers[0].Resources.Requests = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
	ns := func(name string, labels map[string]string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	}
	notebook := pod("team-c", "notebook-0", "", "", "")
	notebook.Spec.Containers[0].Resources.Requests = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
	for _, o := range []runtime.Object{escape, notebook,
		ns("team-a", nil), ns("team-b", map[string]string{"team": "b"}),
		ns("team-c", map[string]string{queues.NamespaceLabel: "research"}), ns("team-d", map[string]string{queues.NamespaceLabel: "batch"})} {
		if err := cs.Tracker().Add(o); err != nil {
			t.Fatal(err)
		}
	}
	var objs []runtime.Object
	for _, q := range testQueues(t) {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(q)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, &unstructured.Unstructured{Object: u})
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{queues.GVR: "QueueList"}, objs...)
	return Clients{Kube: cs, Dynamic: dyn}
}
