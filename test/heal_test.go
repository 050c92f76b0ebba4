package test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpud/gpud/internal/testwait"
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
	if testing.Short() {
		t.Skip("runs kube-apiserver, two gpud agents and gpud scheduler")
	}
	bin := buildGpud(t)
	env := k8senv.Start(t, k8senv.WithoutScheduler())
	c := env.Client
	ctx := t.Context()
	for _, obj := range draManifests(t, "../deploy/dra/deviceclasses.yaml") {
		if dc, ok := obj.(*resourceapi.DeviceClass); ok {
			if _, err := c.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	kubeconfig := schedulerIdentity(t, env)
	nodes := []*schedNode{{name: "node-a", profile: "dgx-h100"}, {name: "node-b", profile: "dgx-h100"}}
	for _, n := range nodes {
		startSchedAgent(t, env, bin, n)
	}
	for _, n := range nodes {
		testwait.For(t, schedTimeout, n.name+": gpud's ResourceSlices with 8 GPUs", func() bool {
			gpus := 0
			for _, d := range draDevices(t, env, n.name) {
				if draAttr(d, "type") == "gpu" {
					gpus++
				}
			}
			return gpus == 8
		})
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
