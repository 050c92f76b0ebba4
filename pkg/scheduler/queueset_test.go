package scheduler

import (
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpud/gpud/pkg/allocator/jobs"
)

// A Config.QueueSet's tree is the cycle's, its queue is each pod's, and a
// pod it refuses waits with its reason instead of being decided.
func TestSnapshotQueueSet(t *testing.T) {
	ts := newTestScheduler(t, placeAll{})
	tree := []jobs.Queue{{Name: "a"}, {Name: "b"}}
	ts.snap.queueSet = func() ([]jobs.Queue, []jobs.Reservation, func(*corev1.Pod) (string, error)) {
		return tree, nil, func(p *corev1.Pod) (string, error) {
			if p.Name == "escapes" {
				return "", errors.New("namespace default is bound to queue a")
			}
			return "a", nil
		}
	}
	ok, refused := cpuPod("ok", t0, "1"), cpuPod("escapes", t0, "1")
	refused.Labels = map[string]string{"gpud.io/queue": "b"}
	sn := ts.snapshotOf(inputs{pods: []*corev1.Pod{ok, refused}, nodes: []*corev1.Node{rulesNode("n")}, slices: nodeSlices(t, "dgx-h100", "n")})
	if got := pendingNames(sn); !slices.Equal(got, []string{"ok"}) || sn.Pending[0].Queue != "a" {
		t.Fatalf("pending %v, want [ok] in queue a", got)
	}
	if len(sn.Queues) != 2 {
		t.Fatalf("snapshot queues %v, want the QueueSet's", sn.Queues)
	}
	if len(sn.missing) != 1 || sn.missing[0].Pod.Pod.Name != "escapes" || sn.missing[0].Code != CodeQueueRefused ||
		sn.missing[0].Message != "namespace default is bound to queue a" {
		t.Fatalf("refused pods %+v, want escapes with code %s and the QueueSet's reason", sn.missing, CodeQueueRefused)
	}
}

// The guarantees and limits exported are the cycle's tree's: a Queue
// object changed or removed changes or removes its series at the next
// cycle.
func TestQueueSetQuotaMetrics(t *testing.T) {
	ts := newTestScheduler(t, placeAll{})
	tree := []jobs.Queue{
		{Name: "a", Quota: jobs.Quota{Guaranteed: jobs.Resources{GPUMilli: 1000}, Limit: jobs.Resources{GPUMilli: 4000}}},
		{Name: "b", Quota: jobs.Quota{Limit: jobs.Resources{CPUMilli: 8000}}},
	}
	ts.snap.queueSet = func() ([]jobs.Queue, []jobs.Reservation, func(*corev1.Pod) (string, error)) {
		return tree, nil, nil
	}
	in := inputs{nodes: []*corev1.Node{rulesNode("n")}, slices: nodeSlices(t, "dgx-h100", "n")}
	ts.cycleOn(t.Context(), in, t0)
	want := map[string]float64{
		"gpud_scheduler_queue_guaranteed,a,gpu_milli": 1000,
		"gpud_scheduler_queue_limit,a,gpu_milli":      4000,
		"gpud_scheduler_queue_limit,b,cpu_milli":      8000,
	}
	if got := quotaSeries(t, ts.m); !maps.Equal(got, want) {
		t.Fatalf("after the first cycle: %v, want %v", got, want)
	}
	tree = []jobs.Queue{{Name: "a", Quota: jobs.Quota{Guaranteed: jobs.Resources{GPUMilli: 2000}, Limit: jobs.Resources{GPUMilli: 4000}}}}
	ts.cycleOn(t.Context(), in, t0.Add(time.Second))
	want = map[string]float64{
		"gpud_scheduler_queue_guaranteed,a,gpu_milli": 2000,
		"gpud_scheduler_queue_limit,a,gpu_milli":      4000,
	}
	if got := quotaSeries(t, ts.m); !maps.Equal(got, want) {
		t.Fatalf("after queue a changed and b went: %v, want %v", got, want)
	}
}

// quotaSeries are the guaranteed and limit gauges by "name,queue,resource".
func quotaSeries(t *testing.T, m *metrics) map[string]float64 {
	t.Helper()
	fams, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != "gpud_scheduler_queue_guaranteed" && f.GetName() != "gpud_scheduler_queue_limit" {
			continue
		}
		for _, mt := range f.GetMetric() {
			key := f.GetName()
			for _, l := range mt.GetLabel() {
				key += "," + l.GetValue()
			}
			got[key] = mt.GetGauge().GetValue()
		}
	}
	return got
}
