package test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpud/gpud/internal/testkit/schedtest"
	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/test/k8senv"
)

// TestSchedulerBindsApartFromVolumeWait: on a real kube-apiserver, a pod
// whose WaitForFirstConsumer claim is never provisioned (no provisioner
// runs) holds a bind worker for up to rules.VolumeBindTimeout, but not
// the decisions: a GPU pod created while that bind waits is bound before
// the waiting pod's bind gives up (before its PodScheduled condition says
// "not bound within"). With binds inside the cycle, the GPU pod waited
// for the next cycle, after that timeout.
func TestSchedulerBindsApartFromVolumeWait(t *testing.T) {
	t.Parallel() // only its own etcd, API server and processes: see TestMain
	if testing.Short() {
		t.Skip("runs kube-apiserver and gpud scheduler")
	}
	bin := buildGpud(t)
	env := k8senv.Start(t, k8senv.WithoutScheduler())
	c := env.Client
	ctx := t.Context()
	kubeconfig := schedulerIdentity(t, env)
	rulesRBAC(t, env)
	createDeviceClasses(t, c)
	const node, ns = "pipe-a", "pipeline"
	env.CreateNode(t, node, map[string]string{"pool": "pipe"})
	_, sl := schedtest.Publish(t, node, schedtest.SimState(t, "dgx-h100", node))
	for _, s := range sl {
		if _, err := c.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("slice %s: %v", s.Name, err)
		}
	}
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	if _, err := c.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "never"},
		Provisioner: "example.com/absent", VolumeBindingMode: &wffc}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "scratch", Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: ptr.To("never"),
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	if _, err := c.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sched := startSchedulerProc(t, bin, filepath.Join(shortDir(t), "sched"), kubeconfig)
	waitForLeader(t, []*schedProc{sched}, nil)

	pod := func(name string, mod func(*corev1.Pod)) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{SchedulerName: schedName, NodeSelector: map[string]string{"pool": "pipe"},
				Containers: []corev1.Container{{Name: "c", Image: "busybox",
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}}}}
		mod(p)
		if _, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("pod %s: %v", name, err)
		}
	}
	pod("stuck", vol("scratch"))
	// The bind of "stuck" is under way once its claim names the node (the
	// first write of VolumeBinding's PreBind, which then waits).
	testwait.For(t, schedTimeout, "claim scratch annotated with the node chosen", func() bool {
		got, err := c.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "scratch", metav1.GetOptions{})
		return err == nil && got.Annotations[selectedNode] == node
	})
	if msg := podMessage(t, env, ns, "stuck"); strings.Contains(msg, "not bound within") {
		t.Fatalf("stuck's volume wait ended before the GPU pod was created: %q", msg)
	}

	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "gpu", Namespace: ns},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu",
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.gpud.io", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}}}}}}
	if _, err := c.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	created := time.Now()
	pod("gpu", func(p *corev1.Pod) {
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("gpu")}}
		p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
	})
	// Read the GPU pod, then the waiting one: if the first is bound and the
	// second has not given up yet, the bind did not wait for the volume.
	var stuckMsg string
	testwait.For(t, schedTimeout, "pod gpu bound", func() bool {
		p, err := c.CoreV1().Pods(ns).Get(ctx, "gpu", metav1.GetOptions{})
		if err != nil || p.Spec.NodeName == "" {
			return false
		}
		stuckMsg = podMessage(t, env, ns, "stuck")
		return true
	})
	t.Logf("pod gpu bound %s after its creation (loaded machine); stuck's reason then: %q", time.Since(created).Round(time.Millisecond), stuckMsg)
	if strings.Contains(stuckMsg, "not bound within") {
		t.Errorf("pod gpu bound only after stuck's volume wait gave up (%q): the bind of one pod held up the next decision", stuckMsg)
	}
	if got, err := c.ResourceV1().ResourceClaims(ns).Get(ctx, "gpu", metav1.GetOptions{}); err != nil || got.Status.Allocation == nil {
		t.Errorf("claim gpu of the bound pod: %+v, %v; want allocated", got, err)
	}
	// The waiting pod is never bound, and says why once its wait ends.
	testwait.For(t, schedTimeout, "stuck's reason names the volume wait", func() bool {
		return strings.Contains(podMessage(t, env, ns, "stuck"), "not bound within")
	})
	if p, err := c.CoreV1().Pods(ns).Get(ctx, "stuck", metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
		t.Errorf("pod stuck bound to %q without its volume (err %v)", p.Spec.NodeName, err)
	}
}
