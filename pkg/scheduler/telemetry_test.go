package scheduler

import (
	"context"
	"maps"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/pkg/gputel"
	"github.com/gpud/gpud/pkg/scheduler/plan"
	"github.com/gpud/gpud/pkg/scheduler/view"
)

// fakeTelemetry is a TelemetrySource with fixed nodes.
type fakeTelemetry struct {
	mu    sync.Mutex
	nodes map[string]*gputel.Node
	stale int
}

func (f *fakeTelemetry) Telemetry(_ time.Time, staleIntervals int) map[string]*gputel.Node {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stale = staleIntervals
	out := map[string]*gputel.Node{}
	for k, v := range f.nodes {
		cp := *v
		cp.Devices = make(map[string]gputel.Device, len(v.Devices))
		for u, d := range v.Devices {
			d.ClaimMemoryBytes, d.PodMemoryBytes = maps.Clone(d.ClaimMemoryBytes), maps.Clone(d.PodMemoryBytes)
			cp.Devices[u] = d
		}
		out[k] = &cp
	}
	return out
}

// allocatedTo is a claim allocated on node's pool and reserved for pod.
func allocatedTo(name, node string, pods ...types.UID) *resourceapi.ResourceClaim {
	c := wholeClaim("ns", name, "gpu.gpud.io")
	c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "gpu", Driver: view.DriverName, Pool: node, Device: "gpu-0"}}}}
	for _, p := range pods {
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: string(p), UID: p})
	}
	return c
}

func TestTelemetryAttributesPodMemoryToItsClaim(t *testing.T) {
	const gpu0 = "GPU-0"
	src := &fakeTelemetry{nodes: map[string]*gputel.Node{"n1": {Received: t0, Interval: time.Second, Devices: map[string]gputel.Device{
		gpu0: {Unhealthy: true, HealthReason: "Xid 79", MemoryUsedBytes: 30 << 30, MemoryTotalBytes: 48 << 30, SMUtilPercent: 90,
			ClaimMemoryBytes: map[string]uint64{"claim-reported": 1 << 30},
			PodMemoryBytes:   map[string]uint64{"pod-a": 10 << 30, "pod-b": 5 << 30, "pod-two-claims": 7 << 30, "pod-reported": 9 << 30, "pod-unknown": 3 << 30}}}}}}
	s, err := New(Config{Client: newTestScheduler(t, placeAll{}).client, Decider: placeAll{}, Telemetry: src, TelemetryStaleIntervals: 5})
	if err != nil {
		t.Fatal(err)
	}
	claims := []*resourceapi.ResourceClaim{
		allocatedTo("a", "n1", "pod-a"),
		allocatedTo("b", "n1", "pod-b"),
		allocatedTo("two-1", "n1", "pod-two-claims"), allocatedTo("two-2", "n1", "pod-two-claims"),
		allocatedTo("reported", "n1", "pod-reported"),
		allocatedTo("elsewhere", "n2", "pod-unknown"),
	}
	claims[5].UID = "claim-elsewhere"
	claims[4].UID = "claim-reported"
	got := s.telemetry(t0, claims)
	if src.stale != 5 {
		t.Errorf("stale intervals %d passed to the source, want 5", src.stale)
	}
	d := got["n1"].Devices[gpu0]
	want := gputel.Device{Unhealthy: true, HealthReason: "Xid 79", MemoryUsedBytes: 30 << 30, MemoryTotalBytes: 48 << 30, SMUtilPercent: 90,
		ClaimMemoryBytes: map[string]uint64{"claim-reported": 1 << 30, "claim-a": 10 << 30, "claim-b": 5 << 30}}
	if d.Unhealthy != want.Unhealthy || d.HealthReason != want.HealthReason || d.MemoryUsedBytes != want.MemoryUsedBytes ||
		d.MemoryTotalBytes != want.MemoryTotalBytes || d.SMUtilPercent != want.SMUtilPercent || len(d.ClaimMemoryBytes) != len(want.ClaimMemoryBytes) {
		t.Fatalf("device telemetry %+v, want %+v", d, want)
	}
	for k, v := range want.ClaimMemoryBytes {
		if d.ClaimMemoryBytes[k] != v {
			t.Errorf("claim %s memory %d, want %d (two claims or a claim on another node stay unattributed; the agent's own report wins)", k, d.ClaimMemoryBytes[k], v)
		}
	}
	if got["n1"].Received != t0 || got["n1"].Interval != time.Second {
		t.Errorf("node received %v interval %v", got["n1"].Received, got["n1"].Interval)
	}
}

// recordingDecider leaves every pod pending and records each snapshot's
// telemetry.
type recordingDecider struct {
	seen chan map[string]*gputel.Node
}

func (d recordingDecider) Decide(s *plan.Snapshot) plan.Plan {
	select {
	case d.seen <- s.Telemetry:
	default:
	}
	var p plan.Plan
	for _, pod := range s.Pending {
		p.Pending = append(p.Pending, plan.Pending{Pod: pod, Code: "capacity", Message: "test"})
	}
	return p
}

func TestWakeRunsACycleWithTelemetry(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the scheduler loop")
	}
	objs := append(l40sNode(t), wholeClaim("ns", "c", "gpu.gpud.io"), claimPod("ns", "p", t0, "c"))
	ts := newTestScheduler(t, placeAll{}, objs...)
	src := &fakeTelemetry{nodes: map[string]*gputel.Node{"n1": {Received: t0, Interval: time.Second,
		Devices: map[string]gputel.Device{"GPU-0": {Unhealthy: true}}}}}
	d := recordingDecider{seen: make(chan map[string]*gputel.Node, 1)}
	s, err := New(Config{Client: ts.client, Decider: d, Telemetry: src, Resync: time.Hour, Debounce: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	testwait.Run(t, "scheduler", func(ctx context.Context) error { return s.Run(ctx) })
	wait := func(what string) map[string]*gputel.Node {
		t.Helper()
		select {
		case tel := <-d.seen:
			return tel
		case <-time.After(10 * time.Second):
			t.Fatalf("no cycle %s", what)
			return nil
		}
	}
	tel := wait("at the start")
	if tel["n1"] == nil || !tel["n1"].Devices["GPU-0"].Unhealthy {
		t.Fatalf("snapshot telemetry %v, want n1's unhealthy GPU-0", tel)
	}
	// Let the start-up cycles (informer events) pass, then a health change
	// wakes a cycle although the resync is an hour away.
	time.Sleep(200 * time.Millisecond)
	select {
	case <-d.seen:
	default:
	}
	start := time.Now()
	s.Wake()
	wait("after Wake")
	if d := time.Since(start); d > time.Second {
		t.Errorf("cycle %s after Wake, want well within a stream interval", d)
	}
}
