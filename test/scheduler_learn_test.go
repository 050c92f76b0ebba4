package test

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/pkg/predict"
	"github.com/gpud/gpud/pkg/scheduler/learn"
	"github.com/gpud/gpud/pkg/scheduler/plan"
	"github.com/gpud/gpud/test/k8senv"
)

// TestSchedulerLearnsRuntimes runs `gpud scheduler` (deploy/scheduler's
// RBAC) against a real kube-apiserver without a kubelet: five pods of one
// workload are bound and marked Succeeded after 100 s (their containers'
// terminated states, as the kubelet writes them); the leader writes what it
// learned to the ConfigMap gpud/gpud-scheduler-runtimes. It is SIGKILLed;
// a new replica loads the ConfigMap, and a sixth pod of the workload,
// without gpud.io/runtime-estimate, gets the learned estimate when it is
// bound: its error, when it succeeds after 120 s, is on the new leader's
// /metrics (gpud_scheduler_runtime_prediction_error_ratio).
func TestSchedulerLearnsRuntimes(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs kube-apiserver and two gpud schedulers")
	}
	bin := buildGpud(t)
	env := k8senv.Start(t, k8senv.WithoutScheduler())
	kubeconfig := schedulerIdentity(t, env)
	env.CreateNode(t, "node-1", nil)
	dir := shortDir(t)
	flags := []string{"--learn-runtimes-persist-interval", "1s"}
	first := startSchedulerProc(t, bin, filepath.Join(dir, "a"), kubeconfig, flags...)
	waitForLeader(t, []*schedProc{first}, nil)

	for i := 1; i <= 5; i++ {
		name := fmt.Sprintf("train-%d", i)
		createLearnPod(t, env, name)
		env.WaitForPodBound(t, metav1.NamespaceDefault, name, schedTimeout)
		succeedPod(t, env, name, 100*time.Second)
	}
	key := "ns=default|q=|owner=Pod/train|gpu=none"
	testwait.ForErr(t, schedTimeout, "the learned runtimes in ConfigMap gpud/"+learn.DefaultConfigMap, func() error {
		cm, err := env.Client.CoreV1().ConfigMaps("gpud").Get(t.Context(), learn.DefaultConfigMap, metav1.GetOptions{})
		if err != nil {
			return err
		}
		p, err := predict.Unmarshal([]byte(cm.Data[learn.DataKey]))
		if err != nil {
			return err
		}
		if pr, ok, _ := p.Predict([]string{key}, 0.9); !ok || pr.Weight < 4.9 {
			return fmt.Errorf("key %s: %+v %v, want five pods", key, pr, ok)
		}
		return nil
	})
	if m := scrape(t, first.addr); !strings.Contains(m, "gpud_scheduler_runtime_observations_total 5") {
		t.Errorf("first leader's metrics lack 5 observations:\n%s", grepLines(m, "gpud_scheduler_runtime"))
	}

	// A new leader starts from the ConfigMap.
	first.kill(t)
	second := startSchedulerProc(t, bin, filepath.Join(dir, "b"), kubeconfig, flags...)
	waitForLeader(t, []*schedProc{first, second}, first)
	testwait.ForErr(t, schedTimeout, "the new leader's loaded keys", func() error {
		if m := scrape(t, second.addr); !strings.Contains(m, "gpud_scheduler_runtime_predictor_keys 3") {
			return fmt.Errorf("metrics:\n%s", grepLines(m, "gpud_scheduler_runtime"))
		}
		return nil
	})
	createLearnPod(t, env, "train-6")
	env.WaitForPodBound(t, metav1.NamespaceDefault, "train-6", schedTimeout)
	succeedPod(t, env, "train-6", 120*time.Second)
	var metrics string
	testwait.ForErr(t, schedTimeout, "the prediction error of train-6 on the new leader's /metrics", func() error {
		metrics = scrape(t, second.addr)
		if !strings.Contains(metrics, "gpud_scheduler_runtime_prediction_error_ratio_count 1") {
			return fmt.Errorf("metrics:\n%s", grepLines(metrics, "gpud_scheduler_runtime"))
		}
		return nil
	})
	// Five runs of 100 s: the p90 of their bucket (95–114 s, buckets are
	// 20 % wide), off by at most 0.21 of 120 s.
	sum := regexp.MustCompile(`(?m)^gpud_scheduler_runtime_prediction_error_ratio_sum (\S+)$`).FindStringSubmatch(metrics)
	if sum == nil {
		t.Fatalf("no error sum:\n%s", grepLines(metrics, "gpud_scheduler_runtime"))
	}
	ratio, _ := strconv.ParseFloat(sum[1], 64)
	t.Logf("train-6: learned estimate off by %.3f of its 120 s runtime", ratio)
	if ratio > 0.3 {
		t.Errorf("prediction error %v, want at most 0.21 (an estimate of 95–114 s for 120 s)", ratio)
	}
}

// createLearnPod creates a pod of this scheduler without a runtime
// estimate, requesting a little CPU.
func createLearnPod(t *testing.T, env *k8senv.Env, name string) {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name},
		Spec: corev1.PodSpec{SchedulerName: schedName, Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}}}}
	if _, ok := pod.Annotations[plan.RuntimeEstimateAnnotation]; ok {
		t.Fatal("the pod must have no runtime estimate")
	}
	if _, err := env.Client.CoreV1().Pods(pod.Namespace).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("pod %s: %v", name, err)
	}
}

// succeedPod does what the kubelet would when the pod's container exits 0
// after runtime.
func succeedPod(t *testing.T, env *k8senv.Env, name string, runtime time.Duration) {
	t.Helper()
	p, err := env.Client.CoreV1().Pods(metav1.NamespaceDefault).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	p.Status.Phase = corev1.PodSucceeded
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", Image: p.Spec.Containers[0].Image,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed",
			StartedAt: metav1.NewTime(now.Add(-runtime)), FinishedAt: metav1.NewTime(now)}}}}
	if _, err := env.Client.CoreV1().Pods(p.Namespace).UpdateStatus(t.Context(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("pod %s status: %v", name, err)
	}
}
