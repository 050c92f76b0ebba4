package scheduler

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/gpud/gpud/pkg/scheduler/plan"
)

// fakeRuntimes estimates every pod at est and records its Run.
type fakeRuntimes struct {
	est     time.Duration
	started chan struct{}
	running atomic.Bool
	ran     atomic.Int32
}

func (f *fakeRuntimes) Run(ctx context.Context) error {
	f.ran.Add(1)
	f.running.Store(true)
	close(f.started)
	<-ctx.Done()
	f.running.Store(false)
	return nil
}

func (f *fakeRuntimes) Handler() cache.ResourceEventHandler { return cache.ResourceEventHandlerFuncs{} }

func (f *fakeRuntimes) Estimate(*corev1.Pod) time.Duration { return f.est }

var _ Runtimes = (*fakeRuntimes)(nil)

// TestLearnedRuntimeEstimates: pods without gpud.io/runtime-estimate,
// pending or bound, get Config.Runtimes' estimate (what backfill and
// reservations read); the annotation wins.
func TestLearnedRuntimeEstimates(t *testing.T) {
	rt := &fakeRuntimes{est: 42 * time.Minute, started: make(chan struct{})}
	s, err := New(Config{Client: fake.NewClientset(), Decider: placeAll{}, Now: func() time.Time { return t0 }, Runtimes: rt})
	if err != nil {
		t.Fatal(err)
	}
	pending := claimPod("ns", "pending", t0)
	bound := claimPod("ns", "bound", t0)
	bound.Spec.NodeName = "node-1"
	annotated := claimPod("ns", "annotated", t0)
	annotated.Annotations = map[string]string{plan.RuntimeEstimateAnnotation: "90m"}
	sn := s.snap.build(inputs{pods: []*corev1.Pod{pending, bound, annotated}}, t0)
	got := map[string]time.Duration{}
	for _, p := range append(sn.Pending, sn.Bound...) {
		got[p.Pod.Name] = p.RuntimeEstimate
	}
	want := map[string]time.Duration{"pending": 42 * time.Minute, "bound": 42 * time.Minute, "annotated": 90 * time.Minute}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: estimate %v, want %v", name, got[name], w)
		}
	}

	// It runs for the term as leader and has stopped when the term ends.
	ctx, cancel := context.WithCancel(t.Context())
	stop := s.learnRuntimes(ctx)
	<-rt.started
	cancel()
	stop()
	if rt.running.Load() || rt.ran.Load() != 1 {
		t.Fatalf("after the term: running %v, runs %d", rt.running.Load(), rt.ran.Load())
	}
}
