package scheduler

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpud/gpud/pkg/scheduler/plan"
	"github.com/gpud/gpud/pkg/scheduler/view"
)

func TestSetPendingOldest(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	pod := func(queue string, age time.Duration) plan.Pending {
		return plan.Pending{Pod: &plan.Pod{Queue: queue, Created: now.Add(-age)}, Code: "no_fit"}
	}
	m := newMetrics()
	m.setPendingOldest(now, []plan.Pending{
		pod("team-a", 10*time.Minute), pod("team-a", 45*time.Minute), pod("team-a", time.Minute),
		pod("team-b", 90*time.Second),
		pod("", 2*time.Hour),
		{Pod: nil, Code: "deferred"},                      // no pod: nothing to date
		{Pod: &plan.Pod{Queue: "team-c"}, Code: "no_fit"}, // no creation time
		pod("team-d", -time.Minute),                       // created after now (clock skew): age 0
	})
	want := map[string]float64{"team-a": 45 * 60, "team-b": 90, "": 2 * 3600, "team-d": 0}
	if got := oldestByQueue(t, m); !equalMaps(got, want) {
		t.Fatalf("gpud_scheduler_pending_oldest_seconds = %v, want %v", got, want)
	}

	// The next cycle leaves only team-b pending: the other queues' series go.
	m.setPendingOldest(now.Add(time.Minute), []plan.Pending{pod("team-b", 90*time.Second)})
	want = map[string]float64{"team-b": 90 + 60}
	if got := oldestByQueue(t, m); !equalMaps(got, want) {
		t.Fatalf("after a cycle with team-b pending only: %v, want %v", got, want)
	}
	// A pod backing off is still pending: the series stays.
	m.setPendingOldest(now, nil, &plan.Pod{Queue: "team-b", Created: now.Add(-time.Hour)})
	if got := oldestByQueue(t, m); !equalMaps(got, map[string]float64{"team-b": 3600}) {
		t.Fatalf("with a pod backing off: %v, want team-b 3600", got)
	}
	m.setPendingOldest(now, nil)
	if got := oldestByQueue(t, m); len(got) != 0 {
		t.Fatalf("with nothing pending: %v, want no series", got)
	}
}

// oldestByQueue gathers gpud_scheduler_pending_oldest_seconds by queue.
func oldestByQueue(t *testing.T, m *metrics) map[string]float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 16)
	m.oldest.Collect(ch)
	close(ch)
	out := map[string]float64{}
	for metric := range ch {
		var d dto.Metric
		if err := metric.Write(&d); err != nil {
			t.Fatal(err)
		}
		out[d.GetLabel()[0].GetValue()] = d.GetGauge().GetValue()
	}
	return out
}

func equalMaps(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestGPUMemoryAtMostOnceASecond: the GPU memory gauges follow the view
// within a second, not every cycle (they walk every allocated claim).
func TestGPUMemoryAtMostOnceASecond(t *testing.T) {
	objs := l40sNode(t)
	in := viewInputs(t, objs, nil, nil)
	v, _ := view.Build(view.Inputs{Slices: in.slices, Nodes: in.nodes, Classes: in.classes})
	held := wholeClaim("ns", "c", "gpu.gpud.io")
	held.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "gpu", Driver: "gpu.gpud.io", Pool: "n1", Device: "gpu-0"}}}}
	m := newMetrics()
	allocated := func() float64 {
		return testutil.ToFloat64(m.gpuMemory.WithLabelValues("NVIDIA L40S", "allocated"))
	}
	m.observeView(v, nil, nil)
	if got := allocated(); got != 0 {
		t.Fatalf("allocated %v with no claim", got)
	}
	m.observeView(v, []*resourceapi.ResourceClaim{held}, nil)
	if got := allocated(); got != 0 {
		t.Fatalf("allocated %v: worked out again within a second", got)
	}
	m.gpuMemoryAt = m.gpuMemoryAt.Add(-gpuMemoryEvery)
	m.observeView(v, []*resourceapi.ResourceClaim{held}, nil)
	if got := allocated(); got == 0 {
		t.Fatal("allocated 0 a second later: the gauges do not follow the view")
	}
}
