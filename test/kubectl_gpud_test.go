package test

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpud/gpud/internal/testkit/schedtest"
	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/pkg/kubectlgpud"
	"github.com/gpud/gpud/pkg/scheduler/plan"
	"github.com/gpud/gpud/test/k8senv"
)

// TestKubectlGpud runs the kubectl plugin's commands against a real
// kube-apiserver where `gpud scheduler` placed one pod (2 GPUs of a
// simulated DGX H100's 8) and refused another (8 GPUs): the plugin shows
// the placed pod's GPUs, the node's free GPUs, and for the refused pod
// the scheduler's own condition and event and the largest free shape. A
// user with only namespace rights (pods, events, claims in team-a) gets
// the pods and the reason, with notes on what RBAC hid, and a clear
// Forbidden for the cluster-wide nodes view.
func TestKubectlGpud(t *testing.T) {
	t.Parallel() // only its own etcd, API server and processes: see TestMain
	if testing.Short() {
		t.Skip("runs kube-apiserver and gpud scheduler")
	}
	bin := buildGpud(t)
	env := k8senv.Start(t, k8senv.WithoutScheduler())
	c := env.Client
	ctx := t.Context()
	createDeviceClasses(t, c)
	env.CreateNode(t, "gpu-a", nil)
	_, sl := schedtest.Publish(t, "gpu-a", schedtest.SimState(t, "dgx-h100", "gpu-a"))
	for _, s := range sl {
		if _, err := c.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("slice %s: %v", s.Name, err)
		}
	}
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sched := startSchedulerProc(t, bin, filepath.Join(shortDir(t), "sched"), schedulerIdentity(t, env))
	waitForLeader(t, []*schedProc{sched}, nil)

	for _, p := range []struct {
		name  string
		count int64
	}{{"fits-0", 2}, {"big-0", 8}} {
		claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: p.name + "-gpu"},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{
				schedtest.Exact("gpu", "gpu.gpud.io", p.count)}}}}
		if _, err := c.ResourceV1().ResourceClaims("team-a").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		name := claim.Name
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: p.name, Labels: map[string]string{plan.QueueLabel: "research"}},
			Spec: corev1.PodSpec{SchedulerName: schedName, Containers: []corev1.Container{{Name: "main", Image: "busybox",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}},
				ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &name}}},
		}
		if _, err := c.CoreV1().Pods("team-a").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	env.WaitForPodBound(t, "team-a", "fits-0", schedTimeout)
	reason := env.WaitForPodUnschedulable(t, "team-a", "big-0", schedTimeout)
	testwait.For(t, 30*time.Second, "gpud scheduler's FailedScheduling event for big-0", func() bool {
		l, err := c.CoreV1().Events("team-a").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range l.Items {
			if e.InvolvedObject.Name == "big-0" && e.Reason == "FailedScheduling" && e.ReportingController == schedName {
				return true
			}
		}
		return false
	})

	run := func(t *testing.T, cs kubernetes.Interface, opt kubectlgpud.Options) (string, error) {
		t.Helper()
		var out bytes.Buffer
		err := kubectlgpud.Run(ctx, cs, opt, &out)
		t.Logf("kubectl gpud %s %v -n %q:\n%s", opt.Command, opt.Args, opt.Namespace, out.String())
		return out.String(), err
	}
	must := func(t *testing.T, out string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("output does not say %q", w)
			}
		}
	}

	t.Run("admin", func(t *testing.T) {
		out, err := run(t, c, kubectlgpud.Options{Command: "nodes"})
		if err != nil {
			t.Fatal(err)
		}
		must(t, out, "gpu-a  dra  ", "  8     6  ")
		out, err = run(t, c, kubectlgpud.Options{Command: "pods", AllNamespaces: true})
		if err != nil {
			t.Fatal(err)
		}
		must(t, out, "fits-0  gpu-a", "gpus ", "big-0   -      Pending  wants 8 gpus", "research")
		out, err = run(t, c, kubectlgpud.Options{Command: "why", Args: []string{"big-0"}, Namespace: "team-a"})
		if err != nil {
			t.Fatal(err)
		}
		must(t, out, "Scheduler:  gpud-scheduler", "Scheduled:  False (Unschedulable): "+reason,
			"needs 8 GPUs on one node; the most free on any node is 6 (gpu-a)",
			"FailedScheduling  gpud-scheduler", "Queue:      research: 1 running, 1 pending; holds 2 GPUs")
		_, err = run(t, c, kubectlgpud.Options{Command: "why", Args: []string{"nope"}, Namespace: "team-a"})
		if !errors.Is(err, kubectlgpud.ErrNotFound) {
			t.Errorf("why nope = %v, want not found", err)
		}
	})

	t.Run("namespace user", func(t *testing.T) {
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "gpu-viewer"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods", "events"}, Verbs: []string{"get", "list"}},
			{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Verbs: []string{"get", "list"}},
		}}
		if _, err := c.RbacV1().Roles("team-a").Create(ctx, role, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "alice"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "gpu-viewer"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}}}
		if _, err := c.RbacV1().RoleBindings("team-a").Create(ctx, rb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		alice, err := kubernetes.NewForConfig(env.UserConfig(t, "alice"))
		if err != nil {
			t.Fatal(err)
		}
		var out string
		testwait.For(t, 30*time.Second, "alice's RBAC to take effect", func() bool {
			out, err = run(t, alice, kubectlgpud.Options{Command: "pods", Namespace: "team-a"})
			return err == nil
		})
		must(t, out, "fits-0  gpu-a", "big-0", "note: cannot list resourceslices.resource.k8s.io (Forbidden)")
		out, err = run(t, alice, kubectlgpud.Options{Command: "why", Args: []string{"big-0"}, Namespace: "team-a"})
		if err != nil {
			t.Fatal(err)
		}
		must(t, out, "Scheduled:  False (Unschedulable): "+reason, "FailedScheduling  gpud-scheduler",
			"note: cannot list pods in all namespaces (Forbidden)")
		_, err = run(t, alice, kubectlgpud.Options{Command: "nodes"})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "nodes") {
			t.Errorf("nodes as alice = %v, want Forbidden naming nodes", err)
		}
	})
}
