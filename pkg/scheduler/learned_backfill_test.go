package scheduler

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpud/gpud/pkg/scheduler/decide"
	"github.com/gpud/gpud/pkg/scheduler/learn"
	"github.com/gpud/gpud/pkg/scheduler/plan"
	"github.com/gpud/gpud/pkg/scheduler/view"
)

// TestBackfillWithLearnedRuntimes: backfill decides on the runtimes the
// learner (pkg/scheduler/learn, as gpud scheduler runs it) gives pods
// without gpud.io/runtime-estimate. A 4-GPU node runs a 2-GPU pod of
// namespace train; a 4-GPU pod of train waits for it, and a 1-GPU pod of
// namespace dev behind it fits now. With nothing learned the blocked pod's
// start is unknown, so dev's pod may not take room it needs; once train's
// runtimes are learned the blocked pod has a reserved start (the running
// pod's learned end), which dev's pod, still without an estimate, would
// delay; once dev's are learned too, it ends before that start and is
// backfilled. The test fails if the learned estimates do not reach the
// cycle.
func TestBackfillWithLearnedRuntimes(t *testing.T) {
	client := fake.NewClientset()
	l, err := learn.New(learn.Config{Client: client, Namespace: "gpud", SchedulerName: DefaultSchedulerName, PersistInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Client: client, Decider: decide.New(decide.Config{}), Now: func() time.Time { return t0 }, Runtimes: l})
	if err != nil {
		t.Fatal(err)
	}
	in := inputs{classes: []*resourceapi.DeviceClass{gpuClass()}, nodes: []*corev1.Node{kubeNode("n1")}, slices: nodeSlices(t, "pcie-l40s", "n1")}
	running := claimPod("train", "train-run", t0.Add(-time.Hour), "train-run-0", "train-run-1")
	running.Spec.NodeName = "n1"
	started := metav1.NewTime(t0.Add(-5 * time.Minute))
	running.Status.StartTime, running.Status.Phase = &started, corev1.PodRunning
	for i := range 2 {
		c := wholeClaim("train", fmt.Sprintf("train-run-%d", i), "gpu.gpud.io")
		c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
			{Request: "gpu", Driver: view.DriverName, Pool: "n1", Device: fmt.Sprintf("gpu-%d", i)}}}}
		c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: running.Name, UID: running.UID}}
		in.claims = append(in.claims, c)
	}
	head := claimPod("train", "train-big", t0.Add(-time.Minute), "train-big")
	big := wholeClaim("train", "train-big", "gpu.gpud.io")
	big.Spec.Devices.Requests[0].Exactly.Count = 4
	small := claimPod("dev", "dev-small", t0, "dev-small")
	in.claims = append(in.claims, big, wholeClaim("dev", "dev-small", "gpu.gpud.io"))
	in.pods = []*corev1.Pod{running, head, small}

	decideNow := func() plan.Plan {
		t.Helper()
		sn := s.snap.build(in, t0)
		return s.cfg.Decider.Decide(sn.Snapshot)
	}
	smallPending := func(p plan.Plan) string {
		t.Helper()
		for _, b := range p.Binds {
			if b.Pod.Pod.Name == "dev-small" {
				return ""
			}
		}
		for _, x := range p.Pending {
			if x.Pod.Pod.Name == "dev-small" {
				return x.Message
			}
		}
		t.Fatal("dev-small neither bound nor pending")
		return ""
	}
	// teach tells the learner n pods of ns (shaped as its pods here) ran d.
	teach := func(ns, name string, n int, d time.Duration) {
		for i := range n {
			p := claimPod(ns, fmt.Sprintf("%s-%d", name, i), t0.Add(-2*time.Hour), fmt.Sprintf("%s-%d", name, i))
			p.UID = types.UID(fmt.Sprintf("learned-%s-%d", name, i))
			bound := p.DeepCopy()
			bound.Spec.NodeName, bound.Status.Phase = "n1", corev1.PodRunning
			done := bound.DeepCopy()
			done.Status.Phase = corev1.PodSucceeded
			done.Status.ContainerStatuses = []corev1.ContainerStatus{{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				StartedAt: metav1.NewTime(t0.Add(-2 * time.Hour)), FinishedAt: metav1.NewTime(t0.Add(-2*time.Hour + d))}}}}
			l.Handler().OnUpdate(p, bound)
			l.Handler().OnUpdate(bound, done)
		}
	}

	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- l.Run(ctx) }()
		synctest.Wait() // the learner has read its (missing) ConfigMap and runs
		defer func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("learner: %v", err)
			}
		}()

		if msg := smallPending(decideNow()); !strings.Contains(msg, "its start is unknown") {
			t.Fatalf("nothing learned: dev-small's message %q, want the blocked pod's start unknown", msg)
		}
		teach("train", "train-old", 6, 20*time.Minute)
		if est := l.Estimate(running); est < 15*time.Minute || est > 25*time.Minute {
			t.Fatalf("learned estimate of train-run %v, want about 20m", est)
		}
		msg := smallPending(decideNow())
		if !strings.Contains(msg, "past its reserved start at") || !strings.Contains(msg, "(no runtime estimate)") {
			t.Fatalf("train learned: dev-small's message %q, want it to delay the blocked pod's reserved start", msg)
		}
		teach("dev", "dev-old", 6, time.Minute)
		if msg := smallPending(decideNow()); msg != "" {
			t.Fatalf("dev learned too: dev-small waits (%q), want it backfilled (it ends before the blocked pod's start)", msg)
		}
	})
}
