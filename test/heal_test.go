package test

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/nodetaint"
	"github.com/gpud/gpud/test/k8senv"
)

// healEvictTimeout is how soon after a GPU fails both members of its gang
// must be evicted: the taint reaches the scheduler through a watch and
// wakes a cycle at once.
const healEvictTimeout = 10 * time.Second

// TestSchedulerHealsGangOnFailedGPU runs two simulated DGX H100 agents in
// DRA mode and `gpud scheduler` against a real kube-apiserver. A gang of
// two 4-GPU pods runs; one of its GPUs fails (Xid 79, published as the
// agent does for a fatal Xid: a NoExecute device taint
// gpu.gpud.io/unhealthy, here through a DeviceTaintRule). Both members are
// evicted within seconds, each with a Warning Event naming the node, the
// GPU's UUID and "Xid 79". The test then acts as the gang's controller
// (and as the kubelet and the resourceclaim controller, which the
// environment lacks): the evicted pods go, new ones are created, and they
// bind as one gang on healthy GPUs, never on the failed one.
func TestSchedulerHealsGangOnFailedGPU(t *testing.T) {
	t.Parallel() // only its own etcd, API server and processes: see TestMain
	if testing.Short() {
		t.Skip("runs kube-apiserver, two gpud agents and gpud scheduler")
	}
	bin := buildGpud(t)
	env := k8senv.Start(t, k8senv.WithoutScheduler())
	c := env.Client
	ctx := t.Context()
	createDeviceClasses(t, c)
	kubeconfig := schedulerIdentity(t, env)
	nodes := []*schedNode{{name: "node-a", profile: "dgx-h100"}, {name: "node-b", profile: "dgx-h100"}}
	for _, n := range nodes {
		startSchedAgent(t, env, bin, n)
	}
	for _, n := range nodes {
		waitGPUs(t, env, schedTimeout, 8, n.name)
	}
	sched := startSchedulerProc(t, bin, filepath.Join(shortDir(t), "s"), kubeconfig)
	waitForLeader(t, []*schedProc{sched}, nil)

	gang := []schedPod{{name: "train-0", example: "two-gpus-nvlink", count: 4}, {name: "train-1", example: "two-gpus-nvlink", count: 4}}
	createGang(t, env, "train", gang)
	for _, p := range gang {
		env.WaitForPodBound(t, metav1.NamespaceDefault, p.name, schedTimeout)
	}
	claims := checkSchedAllocations(t, env, gang)

	// GPU failure: one device of train-1 gets gpud's NoExecute taint.
	res := claims["train-1"].Status.Allocation.Devices.Results[1]
	uuid := draAttr(draDevices(t, env, res.Pool)[res.Device], "uuid")
	if uuid == "" {
		t.Fatalf("device %s/%s has no uuid attribute", res.Pool, res.Device)
	}
	rule := &resourceapi.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{Name: "xid-79"},
		Spec: resourceapi.DeviceTaintRuleSpec{
			DeviceSelector: &resourceapi.DeviceTaintSelector{Driver: ptr.To(draDriver), Pool: ptr.To(res.Pool), Device: ptr.To(res.Device)},
			Taint:          resourceapi.DeviceTaint{Key: "gpu.gpud.io/unhealthy", Value: "Xid-79", Effect: resourceapi.DeviceTaintEffectNoExecute}}}
	failed := time.Now()
	if _, err := c.ResourceV1().DeviceTaintRules().Create(ctx, rule, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	uids := map[string]string{}
	testwait.For(t, healEvictTimeout, "both gang members evicted after the GPU failed", func() bool {
		n := 0
		for _, p := range gang {
			pod, err := c.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, p.name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			uids[p.name] = string(pod.UID)
			if pod.DeletionTimestamp != nil {
				n++
			}
		}
		return n == len(gang)
	})
	t.Logf("gang of 2 evicted %s after GPU %s (%s/%s) failed (machine shared with other builds)", time.Since(failed).Round(time.Millisecond), uuid, res.Pool, res.Device)
	testwait.For(t, healEvictTimeout, "a GPUFailed Event on each member naming the node, GPU and Xid", func() bool {
		list, err := c.EventsV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range gang {
			if !slices.ContainsFunc(list.Items, func(e eventsv1.Event) bool {
				return e.Regarding.Name == p.name && e.Reason == "GPUFailed" && e.Type == corev1.EventTypeWarning &&
					e.ReportingController == schedName && strings.Contains(e.Note, "GPU "+uuid+" on node "+res.Pool) && strings.Contains(e.Note, "(Xid 79)")
			}) {
				return false
			}
		}
		return true
	})
	if m := scrape(t, sched.addr); !strings.Contains(m, `gpud_heal_evictions_total{action="evict",reason="device"} 1`) ||
		!strings.Contains(m, `gpud_heal_evictions_total{action="evict",reason="gang"} 1`) {
		t.Errorf("metrics lack one device and one gang eviction:\n%s", grepLines(m, "gpud_heal_"))
	}

	// The kubelet ends the evicted pods, the resourceclaim controller
	// frees their claims, the gang's controller creates new ones.
	for _, p := range gang {
		pod, err := c.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, p.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		releaseClaims(t, env, pod)
		if err := c.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		if err := c.ResourceV1().ResourceClaims(pod.Namespace).Delete(ctx, p.name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	testwait.For(t, schedTimeout, "the evicted pods and their claims gone", func() bool {
		for _, p := range gang {
			if _, err := c.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, p.name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false
			}
			if _, err := c.ResourceV1().ResourceClaims(metav1.NamespaceDefault).Get(ctx, p.name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false
			}
		}
		return true
	})
	recreated := time.Now()
	for _, p := range gang {
		p.group = "train"
		createSchedPod(t, env, p)
	}
	for _, p := range gang {
		env.WaitForPodBound(t, metav1.NamespaceDefault, p.name, schedTimeout)
	}
	t.Logf("new gang bound %s after it was recreated", time.Since(recreated).Round(time.Millisecond))
	claims = checkSchedAllocations(t, env, gang)
	for _, p := range gang {
		pod, err := c.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, p.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if string(pod.UID) == uids[p.name] {
			t.Fatalf("pod %s is the evicted one", p.name)
		}
		for _, r := range claims[p.name].Status.Allocation.Devices.Results {
			if r.Pool == res.Pool && r.Device == res.Device {
				t.Errorf("pod %s placed on the failed GPU %s/%s", p.name, r.Pool, r.Device)
			}
		}
	}
	// The new pods hold healthy GPUs: nothing is evicted any more.
	time.Sleep(2 * time.Second)
	for _, p := range gang {
		pod, err := c.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, p.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pod.DeletionTimestamp != nil {
			t.Errorf("new pod %s evicted although its GPUs are healthy", p.name)
		}
	}
	if m := scrape(t, sched.addr); !strings.Contains(m, `gpud_heal_evictions_total{action="evict",reason="device"} 1`) {
		t.Errorf("evictions after the new gang bound:\n%s", grepLines(m, "gpud_heal_"))
	}
}

// TestNodeTaintUnderDRARBAC: the agent's node taint (pkg/nodetaint) under
// deploy/dra/rbac.yaml's identity and admission policy. A GPU that fails,
// recovers and fails again taints the agent's own Node
// gpu.gpud.io/unhealthy-node=gpu-failed-again:NoSchedule with the reason
// annotated, another taint on the Node is kept, and the taint goes after
// the GPUs stay healthy for the clear period. The agent may not make it
// NoExecute, nor touch another taint.
func TestNodeTaintUnderDRARBAC(t *testing.T) {
	t.Parallel() // only its own etcd, API server and processes: see TestMain
	env := k8senv.Start(t, k8senv.WithoutScheduler())
	env.CreateNode(t, "gpu-a", nil)
	ctx := t.Context()
	maint := corev1.Taint{Key: "example.com/maintenance", Value: "planned", Effect: corev1.TaintEffectPreferNoSchedule}
	node, err := env.Client.CoreV1().Nodes().Get(ctx, "gpu-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Spec.Taints = append(node.Spec.Taints, maint)
	if _, err := env.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(draAgentConfig(t, env, "gpu-a"))
	if err != nil {
		t.Fatal(err)
	}
	store, inv := simStore(t, "dgx-a100")
	now := time.Now()
	s, err := nodetaint.NewSyncer(nodetaint.SyncerConfig{Client: client, NodeName: "gpu-a", Inventory: store, Now: func() time.Time { return now },
		Tracker: nodetaint.Config{MaxGPUs: 3, ClearAfter: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	read := func() *corev1.Node {
		t.Helper()
		n, err := env.Client.CoreV1().Nodes().Get(ctx, "gpu-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	ours := func(n *corev1.Node) *corev1.Taint {
		for i := range n.Spec.Taints {
			if n.Spec.Taints[i].Key == nodetaint.TaintKey {
				return &n.Spec.Taints[i]
			}
		}
		return nil
	}
	bad := inv.GPUs[3].UUID
	step := func(after time.Duration, h gpu.Health) {
		t.Helper()
		now = now.Add(after)
		store.SetHealth(bad, h, "Xid 48")
		if _, err := s.Sync(ctx); err != nil {
			t.Fatalf("sync as the agent: %v", err)
		}
	}
	step(0, gpu.Unhealthy)
	step(5*time.Minute, gpu.Healthy)
	if tn := ours(read()); tn != nil {
		t.Fatalf("node tainted %v after one failure", tn)
	}
	step(10*time.Minute, gpu.Unhealthy)
	nd := read()
	tn := ours(nd)
	if tn == nil || tn.Value != nodetaint.ValueRepeated || tn.Effect != corev1.TaintEffectNoSchedule {
		t.Fatalf("taints %+v after the GPU failed again, want %s=%s:NoSchedule", nd.Spec.Taints, nodetaint.TaintKey, nodetaint.ValueRepeated)
	}
	if !slices.Contains(nd.Spec.Taints, maint) {
		t.Errorf("taints %+v: the maintenance taint is gone", nd.Spec.Taints)
	}
	if r := nd.Annotations[nodetaint.ReasonAnnotation]; !strings.Contains(r, bad+" failed again after recovering (Xid 48)") {
		t.Errorf("reason annotation %q", r)
	}
	t.Logf("node tainted: %s=%s:%s, %s", tn.Key, tn.Value, tn.Effect, nd.Annotations[nodetaint.ReasonAnnotation])

	// The policy lets the agent change this taint only, and only as
	// NoSchedule.
	for _, patch := range []string{
		fmt.Sprintf(`[{"op":"add","path":"/spec/taints/-","value":{"key":%q,"effect":"NoExecute"}}]`, nodetaint.TaintKey),
		`[{"op":"remove","path":"/spec/taints/0"}]`,
	} {
		_, err := client.CoreV1().Nodes().Patch(ctx, "gpu-a", types.JSONPatchType, []byte(patch), metav1.PatchOptions{})
		if err == nil || !strings.Contains(err.Error(), "only its Node's labels and annotations") {
			t.Errorf("patch %s as the agent: err %v, want a denial", patch, err)
		}
	}

	step(time.Second, gpu.Healthy)
	step(30*time.Second, gpu.Healthy)
	if ours(read()) == nil {
		t.Fatal("taint removed before the GPUs stayed healthy for the clear period")
	}
	step(31*time.Second, gpu.Healthy)
	nd = read()
	if tn := ours(nd); tn != nil {
		t.Fatalf("taint %+v after a minute healthy, want it removed", tn)
	}
	if _, ok := nd.Annotations[nodetaint.ReasonAnnotation]; ok || !slices.Contains(nd.Spec.Taints, maint) {
		t.Errorf("after clearing: taints %+v annotations %v, want the maintenance taint alone and no reason", nd.Spec.Taints, nd.Annotations)
	}
}

// TestHelmSchedulerHeal: the chart's scheduler.heal values turn healing
// off or choose the delete action; the defaults add no flag (the
// deploy/scheduler manifests' flags); a bad action is refused.
func TestHelmSchedulerHeal(t *testing.T) {
	for _, tc := range []struct {
		name string
		heal map[string]any
		want []string
		not  []string
	}{
		{name: "default", not: []string{"--heal=false", "--heal-action=delete"}},
		{name: "off", heal: map[string]any{"enabled": false}, want: []string{"--heal=false"}},
		{name: "delete", heal: map[string]any{"action": "delete"}, want: []string{"--heal-action=delete"}, not: []string{"--heal=false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sched := map[string]any{"enabled": true}
			if tc.heal != nil {
				sched["heal"] = tc.heal
			}
			objs := helmMustRender(t, map[string]any{"mode": "dra", "scheduler": sched}, false)
			args := objs["Deployment/gpud-scheduler"].(*appsv1.Deployment).Spec.Template.Spec.Containers[0].Args
			for _, w := range tc.want {
				if !slices.Contains(args, w) {
					t.Errorf("args %v lack %s", args, w)
				}
			}
			for _, n := range tc.not {
				if slices.Contains(args, n) {
					t.Errorf("args %v have %s", args, n)
				}
			}
		})
	}
	if _, err := helmTemplate(t, map[string]any{"mode": "dra", "scheduler": map[string]any{"enabled": true, "heal": map[string]any{"action": "keep"}}}, false); err == nil {
		t.Error("chart accepted scheduler.heal.action keep")
	}
}
