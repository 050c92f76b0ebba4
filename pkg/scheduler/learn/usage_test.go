package learn

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

const gib = 1 << 30

func newUsage(t testing.TB, c *fake.Clientset) *Usage {
	t.Helper()
	u, err := NewUsage(Config{Client: c, Namespace: testNS, SchedulerName: "gpud-scheduler", PersistInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// startUsage runs u until the returned stop is called; stop waits for Run.
func startUsage(t *testing.T, u *Usage) (stop func()) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- u.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}

var u0 = time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)

// run samples pod with each of the byte counts (one stream sample a
// second), then ends it: phase Succeeded, Failed, or "" for deleted
// while running.
func run(u *Usage, pod *corev1.Pod, end corev1.PodPhase, samples ...uint64) {
	running := pod.DeepCopy()
	running.Spec.NodeName = "node-1"
	running.Status.Phase = corev1.PodRunning
	for i, b := range samples {
		u.Record(running, b, u0.Add(time.Duration(i)*time.Second))
	}
	h := u.Handler()
	if end == "" {
		h.OnDelete(running)
		return
	}
	done := running.DeepCopy()
	done.Status.Phase = end
	h.OnUpdate(running, done)
}

// TestUsageLearnsPeaks: pods of one workload teach their peak GPU memory
// when they succeed or are deleted while running; after five, a new pod
// of the workload gets about the p95 of those peaks (not before), and
// neither another workload of the queue nor another namespace does.
// Failed pods, pods sampled fewer than three times (a sample seen again
// in a later cycle counts once), other schedulers' pods and a learner not
// running teach nothing.
func TestUsageLearnsPeaks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		u := newUsage(t, newClient())
		probe := jobPod("ml", "train-9-x", "train-9", 1)
		run(u, jobPod("ml", "train-0-a", "train-0", 1), corev1.PodSucceeded, 1*gib, 40*gib, 2*gib)
		stop := startUsage(t, u)
		defer stop()
		synctest.Wait()
		if b, ok := u.PeakBytes(probe); ok {
			t.Fatalf("peak %d from a pod that ran before Run", b)
		}
		// Peaks 16, 17, 18, 19 GiB, and 20 GiB deleted while running.
		for i := range 4 {
			run(u, jobPod("ml", fmt.Sprintf("train-%d-b", i), fmt.Sprintf("train-%d", i), 1), corev1.PodSucceeded,
				4*gib, uint64(16+i)*gib, 8*gib)
		}
		failed := jobPod("ml", "train-f-a", "train-f", 1)
		run(u, failed, corev1.PodFailed, 60*gib, 60*gib, 60*gib)
		short := jobPod("ml", "train-s-a", "train-s", 1)
		run(u, short, corev1.PodSucceeded, 60*gib, 60*gib)
		other := jobPod("ml", "train-o-a", "train-o", 1)
		other.Spec.SchedulerName = "default-scheduler"
		run(u, other, corev1.PodSucceeded, 60*gib, 60*gib, 60*gib)
		// One stream sample seen in three cycles is one sample.
		same := jobPod("ml", "train-c-a", "train-c", 1)
		for range 3 {
			u.Record(same, 60*gib, u0)
		}
		u.Handler().OnDelete(same)
		if b, ok := u.PeakBytes(probe); ok {
			t.Fatalf("peak %d GiB after four pods, want none before five", b/gib)
		}
		run(u, jobPod("ml", "train-5-b", "train-5", 1), "", 2*gib, 20*gib, 3*gib)
		b, ok := u.PeakBytes(probe)
		if !ok || b < 18*gib || b > 24*gib {
			t.Fatalf("peak %.1f GiB (%v) after peaks of 16..20 GiB, want about p95 = 20 GiB", float64(b)/gib, ok)
		}
		if got := testutil.ToFloat64(u.m.observations); got != 5 {
			t.Errorf("observations %v, want 5", got)
		}
		if b, ok := u.PeakBytes(jobPod("ml", "eval-1-a", "eval-1", 1)); ok {
			t.Errorf("another workload of the queue: %d GiB, want none (the queue's key is not used)", b/gib)
		}
		if b, ok := u.PeakBytes(jobPod("other", "train-1-a", "train-1", 1)); ok {
			t.Errorf("another namespace: %d GiB, want none", b/gib)
		}
	})
}

// TestUsagePredictionError: a pod sampled while its workload has a
// learned peak is measured against it when it ends: the error ratio is
// observed, and a peak above the prediction counts as under-predicted.
func TestUsagePredictionError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		u := newUsage(t, newClient())
		stop := startUsage(t, u)
		defer stop()
		synctest.Wait()
		for i := range 5 {
			run(u, jobPod("ml", fmt.Sprintf("infer-%d-a", i), fmt.Sprintf("infer-%d", i), 1), corev1.PodSucceeded, 10*gib, 10*gib, 10*gib)
		}
		if got := testutil.CollectAndCount(u.m.errRatio); got != 1 || testutil.ToFloat64(u.m.under) != 0 {
			t.Fatalf("before any prediction: %d error series, %v under", got, testutil.ToFloat64(u.m.under))
		}
		run(u, jobPod("ml", "infer-6-a", "infer-6", 1), corev1.PodSucceeded, 10*gib, 20*gib, 10*gib)
		if got := testutil.ToFloat64(u.m.under); got != 1 {
			t.Errorf("a pod peaking at 20 GiB against a learned 10 GiB: under-predicted %v, want 1", got)
		}
		var m dto.Metric
		if err := u.m.errRatio.Write(&m); err != nil {
			t.Fatal(err)
		}
		// |~10.6 - 20| / 20: about 0.47 (the learned p95 of 10 GiB peaks
		// lies within its 20 %-wide bucket).
		if h := m.GetHistogram(); h.GetSampleCount() != 1 || h.GetSampleSum() < 0.4 || h.GetSampleSum() > 0.55 {
			t.Errorf("error ratio: %d observations summing to %v, want one of about 0.47", h.GetSampleCount(), h.GetSampleSum())
		}
	})
}

// TestUsagePersistsApartFromRuntimes: what the usage learner learned is
// written to its own ConfigMap (not the runtimes'), and a new leader's
// learner starts from it.
func TestUsagePersistsApartFromRuntimes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newClient()
		u := newUsage(t, c)
		stop := startUsage(t, u)
		synctest.Wait()
		for i := range 5 {
			run(u, jobPod("ml", fmt.Sprintf("train-%d-a", i), fmt.Sprintf("train-%d", i), 1), corev1.PodSucceeded, 30*gib, 30*gib, 30*gib)
		}
		probe := jobPod("ml", "train-9-x", "train-9", 1)
		want, ok := u.PeakBytes(probe)
		if !ok {
			t.Fatal("nothing learned")
		}
		stop() // the final write
		cm, err := c.CoreV1().ConfigMaps(testNS).Get(context.Background(), DefaultUsageConfigMap, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("usage ConfigMap: %v", err)
		}
		if _, ok := cm.Data[UsageDataKey]; !ok || cm.Labels["app.kubernetes.io/managed-by"] != "gpud-scheduler" {
			t.Errorf("usage ConfigMap keys %v labels %v", cm.Data, cm.Labels)
		}
		if _, err := c.CoreV1().ConfigMaps(testNS).Get(context.Background(), DefaultConfigMap, metav1.GetOptions{}); err == nil {
			t.Error("the usage learner wrote the runtimes' ConfigMap")
		}
		next := newUsage(t, c)
		stop = startUsage(t, next)
		defer stop()
		synctest.Wait()
		if got, ok := next.PeakBytes(probe); !ok || got != want {
			t.Errorf("new leader's peak %d (%v), want %d", got, ok, want)
		}
	})
}

// TestUsageConfigDefaults: a usage learner keeps its own ConfigMap and a
// p95 unless told otherwise, and refuses what the runtimes refuse.
func TestUsageConfigDefaults(t *testing.T) {
	u := newUsage(t, newClient())
	if u.cfg.Name != DefaultUsageConfigMap || u.cfg.Quantile != DefaultUsageQuantile || u.dataKey != UsageDataKey {
		t.Errorf("config %+v key %s", u.cfg, u.dataKey)
	}
	if _, err := NewUsage(Config{Client: newClient(), Namespace: testNS, SchedulerName: "s", Quantile: 1}); err == nil {
		t.Error("quantile 1 accepted")
	}
	if _, err := NewUsage(Config{Namespace: testNS, SchedulerName: "s"}); err == nil {
		t.Error("no client accepted")
	}
}

// FuzzUsageDecode: whatever the usage ConfigMap holds, loading it never
// panics, and what loads is written back readable.
func FuzzUsageDecode(f *testing.F) {
	f.Add(`{"version":1,"maxKeys":10,"halfLife":100,"minWeight":5,"keys":[{"key":"ns=a|q=|owner=Job/x|gpu=none","buckets":[[50,1.5],[52,2]]}]}`)
	f.Add(`{"version":1,"maxKeys":1,"halfLife":1,"minWeight":1,"keys":[]}`)
	f.Add(`{"version":2}`)
	u, err := NewUsage(Config{Client: newClient(), Namespace: testNS, SchedulerName: "s", MaxKeys: 4})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data string) {
		p, err := u.decode(&corev1.ConfigMap{Data: map[string]string{UsageDataKey: data}})
		if err != nil {
			return
		}
		if p.Len() > 4 || p.Options().MaxKeys != 4 {
			t.Fatalf("loaded %d keys under %+v, want this learner's options", p.Len(), p.Options())
		}
		out, err := p.Marshal()
		if err != nil {
			t.Fatalf("loaded data not written back: %v", err)
		}
		if _, err := u.decode(&corev1.ConfigMap{Data: map[string]string{UsageDataKey: string(out)}}); err != nil {
			t.Fatalf("written data not read back: %v\n%s", err, out)
		}
	})
}
