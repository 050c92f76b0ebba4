package test

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/gpud/gpud/internal/testkit/schedtest"
	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/pkg/allocator/objective"
	"github.com/gpud/gpud/pkg/scheduler"
	"github.com/gpud/gpud/pkg/scheduler/decide"
	"github.com/gpud/gpud/pkg/scheduler/queues"
	"github.com/gpud/gpud/test/k8senv"
)

// The objectives end-to-end test runs a real kube-apiserver with the
// shipped Queue CRD and pkg/scheduler in-process with Queue objects as
// cmd/gpud wires them, the scheduler's --objectives at its default
// (util=1,fair=1). Two pairs of 8-GPU, 224-CPU nodes, each pair a busy
// node (a pod holds one GPU and 200 CPUs) and an idle one: a 1-GPU,
// 12-CPU pod of the default queue goes where today's policy puts it, the
// idle node (on the busy one it would leave the free GPUs less CPU than
// they need: stranded GPUs to gpud's policy); the same pod of a queue
// with spec.objectives energy=1 goes to the busy node, and its pair's
// idle node stays empty.

const objectivesManifest = `
apiVersion: scheduling.gpud.io/v1alpha1
kind: Queue
metadata: {name: green}
spec:
  objectives: {energy: 1, util: "0.5"}
  namespaces: [green]
---
apiVersion: scheduling.gpud.io/v1alpha1
kind: Queue
metadata: {name: plain}
spec:
  namespaces: [plain]
`

func TestObjectivesEndToEnd(t *testing.T) {
	t.Parallel() // only its own etcd, API server and processes: see TestMain
	if testing.Short() {
		t.Skip("runs kube-apiserver")
	}
	env := k8senv.Start(t, k8senv.WithoutScheduler())
	ctx := t.Context()
	c := env.Client
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	installQueueCRD(t, env, dyn)
	// The CRD's schema refuses a malformed weight, naming it.
	bad := "apiVersion: scheduling.gpud.io/v1alpha1\nkind: Queue\nmetadata: {name: bad}\nspec: {objectives: {energy: \"1.2345\"}}\n"
	if _, err := dyn.Resource(queues.GVR).Create(ctx, yamlDocs(t, bad)[0], strict); err == nil || !strings.Contains(err.Error(), "spec.objectives.energy") {
		t.Errorf("creating a Queue with energy 1.2345: %v, want an error naming spec.objectives.energy", err)
	}
	for _, obj := range draManifests(t, "../deploy/dra/deviceclasses.yaml") {
		if dc, ok := obj.(*resourceapi.DeviceClass); ok {
			if _, err := c.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil {
				t.Fatalf("DeviceClass %s: %v", dc.Name, err)
			}
		}
	}
	for _, ns := range []string{"green", "plain"} {
		if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range yamlDocs(t, objectivesManifest) {
		if _, err := dyn.Resource(queues.GVR).Create(ctx, q, strict); err != nil {
			t.Fatalf("create Queue %s: %v", q.GetName(), err)
		}
	}
	for _, pair := range []string{"today", "energy"} {
		for _, kind := range []string{"busy", "idle"} {
			name := pair + "-" + kind
			env.CreateNode(t, name, map[string]string{"pair": pair}, func(n *corev1.Node) {
				n.Status.Capacity[corev1.ResourceCPU] = resource.MustParse("224")
				n.Status.Allocatable[corev1.ResourceCPU] = resource.MustParse("224")
			})
			_, sl := schedtest.Publish(t, name, schedtest.SimState(t, "dgx-h100", name))
			for _, s := range sl {
				if _, err := c.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err != nil {
					t.Fatalf("slice %s: %v", s.Name, err)
				}
			}
		}
	}

	def, err := objective.ParseSetting("util=1,fair=1") // gpud scheduler --objectives' default
	if err != nil {
		t.Fatal(err)
	}
	src, err := queues.NewSource(queues.Config{Dynamic: dyn, Client: c})
	if err != nil {
		t.Fatal(err)
	}
	s, err := scheduler.New(scheduler.Config{Client: c, Decider: decide.New(decide.Config{Objective: def, Models: objective.DefaultModels()}),
		Resync: 500 * time.Millisecond, QueueSet: src.Set, QueueStatus: src.Observe, GroupsSynced: src.Synced})
	if err != nil {
		t.Fatal(err)
	}
	src.OnChange(s.Wake)
	testwait.Run(t, "queues", src.Run)
	testwait.Run(t, "scheduler", s.Run)

	// Each pair's busy node: one GPU and 200 of 224 CPUs taken.
	for _, pair := range []string{"today", "energy"} {
		createObjectivePod(t, env, "plain", pair+"-filler", "200", map[string]string{corev1.LabelHostname: pair + "-busy"})
		if got := env.WaitForPodBound(t, "plain", pair+"-filler", queueTimeout); got != pair+"-busy" {
			t.Fatalf("%s-filler bound to %s, want %s-busy", pair, got, pair)
		}
	}
	// The default queue's pod: today's policy.
	createObjectivePod(t, env, "plain", "default-pod", "12", map[string]string{"pair": "today"})
	if got := env.WaitForPodBound(t, "plain", "default-pod", queueTimeout); got != "today-idle" {
		t.Errorf("the default queue's pod bound to %s, want today-idle (today's policy)", got)
	}
	// The energy queue's pod: onto the busy node, the idle one stays empty.
	createObjectivePod(t, env, "green", "green-pod", "12", map[string]string{"pair": "energy"})
	if got := env.WaitForPodBound(t, "green", "green-pod", queueTimeout); got != "energy-busy" {
		t.Errorf("the energy queue's pod bound to %s, want energy-busy (energy=1: the idle node stays asleep)", got)
	}
	pods, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=energy-idle"})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 0 {
		t.Errorf("%d pods on energy-idle, want none", len(pods.Items))
	}
}

// createObjectivePod creates a pod of gpud scheduler in ns with a claim of
// one whole GPU, cpu CPUs and a node selector.
func createObjectivePod(t *testing.T, env *k8senv.Env, ns, name, cpu string, selector map[string]string) {
	t.Helper()
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name + "-gpu", Namespace: ns},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{
			schedtest.Exact("gpu", "gpu.gpud.io", 1)}}}}
	if _, err := env.Client.ResourceV1().ResourceClaims(ns).Create(t.Context(), claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{SchedulerName: scheduler.DefaultSchedulerName, NodeSelector: selector,
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(claim.Name)}},
			Containers: []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)},
					Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}}},
	}
	if _, err := env.Client.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
