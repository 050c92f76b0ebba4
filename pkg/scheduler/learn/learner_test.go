package learn

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gpud/gpud/internal/testkit/promtooltest"
	"github.com/gpud/gpud/pkg/predict"
)

const testNS = "gpud"

// newClient is a fake client whose ConfigMaps have resourceVersions as
// the API server's do (the fake tracker keeps none): each write bumps it,
// and an update with another one is a conflict.
func newClient(objs ...runtime.Object) *fake.Clientset {
	c := fake.NewClientset(objs...)
	var version int
	gvr := corev1.SchemeGroupVersion.WithResource("configmaps")
	c.PrependReactor("*", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		w, ok := a.(interface{ GetObject() runtime.Object })
		if !ok {
			return false, nil, nil
		}
		cm := w.GetObject().(*corev1.ConfigMap).DeepCopy()
		switch a.GetVerb() {
		case "create":
			if _, err := c.Tracker().Get(gvr, cm.Namespace, cm.Name); err == nil {
				return true, nil, apierrors.NewAlreadyExists(gvr.GroupResource(), cm.Name)
			}
			version++
			cm.ResourceVersion = fmt.Sprint(version)
			return true, cm, c.Tracker().Create(gvr, cm, cm.Namespace)
		case "update":
			cur, err := c.Tracker().Get(gvr, cm.Namespace, cm.Name)
			if err != nil {
				return true, nil, err
			}
			if rv := cm.ResourceVersion; rv != "" && rv != cur.(*corev1.ConfigMap).ResourceVersion {
				return true, nil, apierrors.NewConflict(gvr.GroupResource(), cm.Name, errors.New("stale resourceVersion"))
			}
			version++
			cm.ResourceVersion = fmt.Sprint(version)
			return true, cm, c.Tracker().Update(gvr, cm, cm.Namespace)
		}
		return false, nil, nil
	})
	return c
}

func newLearner(t *testing.T, c *fake.Clientset) *Learner {
	t.Helper()
	l, err := New(Config{Client: c, Namespace: testNS, SchedulerName: "gpud-scheduler", PersistInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// start runs l until the returned stop is called; stop waits for Run.
func start(t *testing.T, l *Learner) (stop func()) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}

// finish tells l that pod was bound, then succeeded after runtime.
func finish(l *Learner, pod *corev1.Pod, runtime time.Duration) {
	pending := pod.DeepCopy()
	bound := pod.DeepCopy()
	bound.Spec.NodeName = "node-1"
	bound.Status.Phase = corev1.PodRunning
	h := l.Handler()
	h.OnUpdate(pending, bound)
	done := bound.DeepCopy()
	done.Status.Phase = corev1.PodSucceeded
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	done.Status.ContainerStatuses = []corev1.ContainerStatus{{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		StartedAt: metav1.NewTime(t0), FinishedAt: metav1.NewTime(t0.Add(runtime))}}}}
	h.OnUpdate(bound, done)
}

func configMap(t *testing.T, c *fake.Clientset) *corev1.ConfigMap {
	t.Helper()
	cm, err := c.CoreV1().ConfigMaps(testNS).Get(context.Background(), DefaultConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("ConfigMap: %v", err)
	}
	return cm
}

// TestLearnPersistLoad: succeeded pods of one workload teach the leader
// their runtime; after five, a new pod of it is estimated at about that
// (not before); failed pods, other schedulers' pods and a stopped learner
// teach nothing. What was learned is written to the ConfigMap once per
// interval and when Run ends, and a new learner (a new leader) starts
// from it.
func TestLearnPersistLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newClient()
		l := newLearner(t, c)
		probe := jobPod("ml", "train-9-x", "train-9", 2)
		// Not running: nothing learned, nothing estimated.
		for i := range 6 {
			finish(l, jobPod("ml", fmt.Sprintf("train-%d-a", i), fmt.Sprintf("train-%d", i), 2), 100*time.Second)
		}
		stop := start(t, l)
		synctest.Wait()
		if d := l.Estimate(probe); d != 0 {
			t.Fatalf("estimate %v from pods that finished before Run", d)
		}
		for i := range 4 {
			finish(l, jobPod("ml", fmt.Sprintf("train-%d-b", i), fmt.Sprintf("train-%d", i), 2), 100*time.Second)
		}
		failed := jobPod("ml", "train-f-a", "train-f", 2)
		other := jobPod("ml", "train-o-a", "train-o", 2)
		other.Spec.SchedulerName = "default-scheduler"
		finish(l, other, 100*time.Second)
		bound := failed.DeepCopy()
		bound.Spec.NodeName = "node-1"
		gone := bound.DeepCopy()
		gone.Status.Phase = corev1.PodFailed
		l.Handler().OnUpdate(failed, bound)
		l.Handler().OnUpdate(bound, gone)
		if d := l.Estimate(probe); d != 0 {
			t.Fatalf("estimate %v after four succeeded pods, want none before five", d)
		}
		finish(l, jobPod("ml", "train-5-b", "train-5", 2), 100*time.Second)
		d := l.Estimate(probe)
		if d < 90*time.Second || d > 120*time.Second {
			t.Fatalf("estimate %v after five pods of 100 s, want about 100 s", d)
		}
		if got := l.Estimate(jobPod("ml", "eval-1-a", "eval-1", 1)); got != d {
			t.Fatalf("another workload of the queue: %v, want the queue's %v", got, d)
		}
		if got := l.Estimate(jobPod("other", "train-1-a", "train-1", 2)); got != 0 {
			t.Fatalf("another namespace: %v, want none", got)
		}
		if testutil.ToFloat64(l.m.observations) != 5 {
			t.Fatalf("observations %v, want 5", testutil.ToFloat64(l.m.observations))
		}

		// Written after the interval, not before.
		if _, err := c.CoreV1().ConfigMaps(testNS).Get(context.Background(), DefaultConfigMap, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("ConfigMap before the interval: %v", err)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if !strings.Contains(configMap(t, c).Data[DataKey], `"key":"ns=ml|q=batch|owner=Job/train|gpu=nvidia.com/gpu:2"`) {
			t.Fatalf("ConfigMap lacks the workload's key: %s", configMap(t, c).Data[DataKey])
		}
		// A sixth pod, written when Run ends.
		finish(l, jobPod("ml", "train-6-b", "train-6", 2), 100*time.Second)
		stop()
		if d := l.Estimate(probe); d != 0 {
			t.Fatalf("estimate %v after Run ended", d)
		}
		p, err := predict.Unmarshal([]byte(configMap(t, c).Data[DataKey]))
		if err != nil {
			t.Fatal(err)
		}
		if pr, ok, _ := p.Predict(Keys(probe), 0.5); !ok || pr.Weight < 5.8 {
			t.Fatalf("stored prediction %+v %v, want six pods' weight", pr, ok)
		}

		// A new leader starts from the ConfigMap.
		l2 := newLearner(t, c)
		stop2 := start(t, l2)
		synctest.Wait()
		if got := l2.Estimate(probe); got != d {
			t.Fatalf("new leader's estimate %v, want %v", got, d)
		}
		if testutil.ToFloat64(l2.m.keys) != 3 {
			t.Fatalf("keys gauge %v, want 3", testutil.ToFloat64(l2.m.keys))
		}
		// The prediction a pod had when bound is scored when it succeeds.
		finish(l2, jobPod("ml", "train-7-b", "train-7", 2), 200*time.Second)
		if n := testutil.CollectAndCount(l2.m.errRatio); n != 1 {
			t.Fatalf("error histogram has %d series", n)
		}
		if !strings.Contains(metricsText(t, l2), "gpud_scheduler_runtime_prediction_error_ratio_count 1") {
			t.Fatalf("metrics:\n%s", metricsText(t, l2))
		}
		stop2()
	})
}

func metricsText(t *testing.T, l *Learner) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(l.Collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	return buf.String()
}

// TestMetricsPromtool: the learner's metrics pass promtool's lint.
func TestMetricsPromtool(t *testing.T) {
	l := newLearner(t, newClient())
	l.m.errRatio.Observe(0.2)
	promtooltest.CheckMetrics(t, []byte(metricsText(t, l)), func(string) bool { return false })
}

// TestCorruptConfigMap: unreadable data is logged and counted, the
// learner starts empty and learns, and its first write replaces it.
func TestCorruptConfigMap(t *testing.T) {
	for name, data := range map[string]map[string]string{
		"garbage":   {DataKey: "{not json"},
		"oversized": {DataKey: strings.Repeat(" ", predict.MaxEncodedBytes+1)},
		"no key":    {"other": "x"},
		"bad field": {DataKey: `{"version":1,"maxKeys":10,"halfLife":100,"minWeight":5,"keys":[{"key":"k","buckets":[[9999,1]]}]}`},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newClient(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: DefaultConfigMap}, Data: data})
				l := newLearner(t, c)
				stop := start(t, l)
				synctest.Wait()
				if got := testutil.ToFloat64(l.m.failures.WithLabelValues("load")); got != 1 {
					t.Fatalf("load failures %v, want 1", got)
				}
				for i := range 5 {
					finish(l, jobPod("ml", fmt.Sprintf("train-%d-a", i), fmt.Sprintf("train-%d", i), 2), time.Hour)
				}
				if d := l.Estimate(jobPod("ml", "train-9-a", "train-9", 2)); d == 0 {
					t.Fatal("no estimate after starting empty and learning five pods")
				}
				time.Sleep(time.Minute)
				synctest.Wait()
				if _, err := predict.Unmarshal([]byte(configMap(t, c).Data[DataKey])); err != nil {
					t.Fatalf("the corrupt data was not replaced: %v", err)
				}
				stop()
			})
		})
	}
}

// TestLoadRetries: a read that fails (API server down) is retried, and
// the learner neither learns nor estimates until it succeeds, so that it
// never overwrites what an earlier leader stored with less.
func TestLoadRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newClient()
		fails := 3
		c.PrependReactor("get", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
			if fails > 0 {
				fails--
				return true, nil, apierrors.NewServiceUnavailable("down")
			}
			return false, nil, nil
		})
		l := newLearner(t, c)
		stop := start(t, l)
		synctest.Wait()
		l.mu.Lock()
		active := l.active
		l.mu.Unlock()
		if active {
			t.Fatal("active before the ConfigMap was read")
		}
		time.Sleep(10 * time.Second) // 1 s, 2 s, 4 s backoff
		synctest.Wait()
		l.mu.Lock()
		active = l.active
		l.mu.Unlock()
		if !active || fails != 0 {
			t.Fatalf("after the retries: active %v, failures left %d", active, fails)
		}
		if got := testutil.ToFloat64(l.m.failures.WithLabelValues("load")); got != 3 {
			t.Fatalf("load failures %v, want 3", got)
		}
		stop()
	})
}

// TestStaleFinalWrite: the last write of a leader that a new leader has
// already written over is refused and dropped (stale resourceVersion);
// a leader's periodic write takes over an older writer's.
func TestStaleFinalWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newClient()
		old := newLearner(t, c)
		stopOld := start(t, old)
		synctest.Wait()
		finish(old, jobPod("ml", "a-1-x", "a-1", 1), time.Minute)
		time.Sleep(time.Minute)
		synctest.Wait()
		// A new leader loads and writes while the old one still runs (its
		// ticker half an interval after the old one's).
		time.Sleep(30 * time.Second)
		l := newLearner(t, c)
		stop := start(t, l)
		synctest.Wait()
		finish(l, jobPod("ml", "new-1-x", "new-1", 1), time.Minute)
		time.Sleep(30 * time.Second) // the old one's tick: nothing new to write
		synctest.Wait()
		finish(old, jobPod("ml", "old-1-x", "old-1", 1), time.Minute)
		time.Sleep(30 * time.Second) // the new one writes
		synctest.Wait()
		stopOld() // its final write is stale
		data := configMap(t, c).Data[DataKey]
		if !strings.Contains(data, "owner=Job/new") || strings.Contains(data, "owner=Job/old") {
			t.Fatalf("the old leader's last write replaced the new leader's: %s", data)
		}
		if got := testutil.ToFloat64(old.m.failures.WithLabelValues("save")); got < 1 {
			t.Fatalf("old leader's save failures %v, want its refused writes counted", got)
		}
		// The new leader's next write goes over whatever came between.
		cm := configMap(t, c)
		cm.Data[DataKey] = "{}"
		if _, err := c.CoreV1().ConfigMaps(testNS).Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		finish(l, jobPod("ml", "new-2-x", "new-2", 1), time.Minute)
		time.Sleep(time.Minute)
		synctest.Wait()
		if _, err := predict.Unmarshal([]byte(configMap(t, c).Data[DataKey])); err != nil {
			t.Fatalf("the leader did not take over: %v", err)
		}
		stop()
	})
}

func TestValidate(t *testing.T) {
	c := newClient()
	err := Config{Client: c, SchedulerName: "s", Namespace: "Bad_NS", PersistInterval: time.Millisecond, Quantile: 1, MinSamples: -1}.Validate()
	for _, want := range []string{"namespace", "persist interval", "quantile", "min weight"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v, want a problem with %s", err, want)
		}
	}
	if !errors.Is(err, ErrConfig) {
		t.Errorf("%v does not match ErrConfig", err)
	}
}
