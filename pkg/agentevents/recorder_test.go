package agentevents

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/memwatch"
)

const (
	testNode    = "gpu-node-1"
	testNodeUID = "node-uid-1"
	gpuA        = "GPU-aaaaaaaa-0000-0000-0000-000000000001"
	gpuB        = "GPU-bbbbbbbb-0000-0000-0000-000000000002"
)

// start runs a recorder on a fake clientset holding the node, with a
// frozen clock (no bucket refills), and waits until it knows the node's
// UID.
func start(t *testing.T, limits Limits) (*Recorder, *fake.Clientset, *prometheus.Registry) {
	t.Helper()
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode, UID: testNodeUID}})
	reg := prometheus.NewRegistry()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r, err := New(Config{Client: client, NodeName: testNode, Limits: limits, Metrics: reg, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	testwait.Run(t, "recorder", r.Run)
	testwait.For(t, 10*time.Second, "the node's uid", func() bool { return r.nodeRef("").UID == testNodeUID })
	return r, client, reg
}

// eventsFor lists the events the fake API server holds with this reason.
func eventsFor(t *testing.T, c kubernetes.Interface, reason string) []eventsv1.Event {
	t.Helper()
	l, err := c.EventsV1().Events("").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, e := range l.Items {
		if e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

func waitEvent(t *testing.T, c kubernetes.Interface, reason string) eventsv1.Event {
	t.Helper()
	var got []eventsv1.Event
	testwait.For(t, 10*time.Second, "a "+reason+" event", func() bool {
		got = eventsFor(t, c, reason)
		return len(got) > 0
	})
	return got[0]
}

func TestGPUHealthEventsOnTheNode(t *testing.T) {
	r, client, _ := start(t, Limits{})
	r.GPUHealth(gpuA, gpu.Unhealthy, "xid 48")
	e := waitEvent(t, client, ReasonGPUUnhealthy)
	if e.Type != corev1.EventTypeWarning {
		t.Errorf("type = %q, want Warning", e.Type)
	}
	if !strings.Contains(e.Note, gpuA) || !strings.Contains(e.Note, "xid 48") {
		t.Errorf("note = %q, want the GPU UUID and the Xid", e.Note)
	}
	want := corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: testNode, UID: testNodeUID, FieldPath: "gpus{" + gpuA + "}"}
	if e.Regarding != want {
		t.Errorf("regarding = %+v, want %+v", e.Regarding, want)
	}
	if e.ReportingController != ReportingController || e.ReportingInstance != testNode {
		t.Errorf("reporting = %s/%s, want %s/%s", e.ReportingController, e.ReportingInstance, ReportingController, testNode)
	}

	r.GPUHealth(gpuA, gpu.Healthy, "")
	if e := waitEvent(t, client, ReasonGPUHealthy); e.Type != corev1.EventTypeNormal || !strings.Contains(e.Note, gpuA) {
		t.Errorf("healthy event = %s %q, want Normal naming %s", e.Type, e.Note, gpuA)
	}
	r.GPUHealth(gpuB, gpu.Lost, "xid 79: gpu fell off the bus")
	if e := waitEvent(t, client, ReasonGPULost); e.Type != corev1.EventTypeWarning || !strings.Contains(e.Note, "xid 79") {
		t.Errorf("lost event = %s %q, want a Warning naming xid 79", e.Type, e.Note)
	}
}

func TestNodeTaintEvents(t *testing.T) {
	r, client, _ := start(t, Limits{})
	r.NodeTaint("gpu.gpud.io/unhealthy-node", "gpus-failed", "2 GPUs failed within 24h0m0s: GPU-1 (Xid 48), GPU-3 (Xid 79)")
	e := waitEvent(t, client, ReasonNodeTainted)
	if e.Type != corev1.EventTypeWarning || !strings.Contains(e.Note, "gpu.gpud.io/unhealthy-node=gpus-failed:NoSchedule") || !strings.Contains(e.Note, "Xid 79") {
		t.Errorf("tainted event = %s %q, want a Warning naming the taint and the reason", e.Type, e.Note)
	}
	want := corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: testNode, UID: testNodeUID}
	if e.Regarding != want {
		t.Errorf("regarding = %+v, want the node %+v", e.Regarding, want)
	}
	r.NodeTaint("gpu.gpud.io/unhealthy-node", "", "")
	if e := waitEvent(t, client, ReasonNodeTaintRemoved); e.Type != corev1.EventTypeNormal || !strings.Contains(e.Note, "gpu.gpud.io/unhealthy-node removed") {
		t.Errorf("removed event = %s %q, want Normal naming the taint", e.Type, e.Note)
	}
}

func TestPodEvents(t *testing.T) {
	r, client, _ := start(t, Limits{})
	v := memwatch.Violation{DeviceUUID: gpuA, Namespace: "team-a", Pod: "trainer", PodUID: "pod-uid-7", PIDs: []uint32{1, 2}, UsedBytes: 12 << 30, LimitBytes: 10 << 30}

	r.WatchdogKilled(v, 4242, 12<<30)
	e := waitEvent(t, client, ReasonGPUMemoryLimitKilled)
	want := corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: "team-a", Name: "trainer", UID: "pod-uid-7"}
	if e.Regarding != want || e.Namespace != "team-a" {
		t.Errorf("regarding = %+v in %q, want %+v in team-a", e.Regarding, e.Namespace, want)
	}
	for _, s := range []string{"4242", gpuA, "12288 MiB", "10240 MiB"} {
		if !strings.Contains(e.Note, s) {
			t.Errorf("note %q does not name %s", e.Note, s)
		}
	}

	r.WatchdogOverLimit(v, memwatch.EnforceReport)
	if e := waitEvent(t, client, ReasonGPUMemoryOverLimit); e.Type != corev1.EventTypeWarning || !strings.Contains(e.Note, "pids 1,2") {
		t.Errorf("over-limit event = %s %q", e.Type, e.Note)
	}

	r.MemoryLimitSet("team-a", "trainer", "pod-uid-7", "main", gpuA, 20<<30, 30<<30)
	e = waitEvent(t, client, ReasonGPUMemoryLimitSet)
	if e.Regarding.FieldPath != "spec.containers{main}" || !strings.Contains(e.Note, "20480 MiB") || !strings.Contains(e.Note, "30720 MiB") {
		t.Errorf("limit set event regarding %+v note %q, want container main, soft and hard", e.Regarding, e.Note)
	}
	r.MemoryLimitFailed("team-a", "trainer", "pod-uid-7", "main", []string{gpuA}, errors.New("ERROR_NO_PERMISSION"))
	if e := waitEvent(t, client, ReasonGPUMemoryLimitFailed); e.Type != corev1.EventTypeWarning || !strings.Contains(e.Note, "ERROR_NO_PERMISSION") {
		t.Errorf("limit failed event = %s %q", e.Type, e.Note)
	}
	r.MemoryBorrowerEvicted("team-a", "trainer", "pod-uid-7", "main", gpuA, 20<<30, 50<<30, 0)
	e = waitEvent(t, client, ReasonGPUMemoryBorrowerEvicted)
	if e.Type != corev1.EventTypeWarning || e.Regarding.FieldPath != "spec.containers{main}" || e.Regarding.UID != "pod-uid-7" {
		t.Errorf("borrower evicted event %s regarding %+v, want a Warning on container main of the pod", e.Type, e.Regarding)
	}
	for _, s := range []string{gpuA, "20480 MiB", "51200 MiB", "now 0 MiB"} {
		if !strings.Contains(e.Note, s) {
			t.Errorf("borrower evicted note %q does not say %s", e.Note, s)
		}
	}

	// A pod the watchdog could not name goes on the node, with its UID.
	r.WatchdogOverLimit(memwatch.Violation{DeviceUUID: gpuB, PodUID: "pod-uid-9", PIDs: []uint32{3}, UsedBytes: 2 << 30, LimitBytes: 1 << 30}, memwatch.EnforceKill)
	testwait.For(t, 10*time.Second, "an over-limit event on the node", func() bool {
		for _, e := range eventsFor(t, client, ReasonGPUMemoryOverLimit) {
			if e.Regarding.Kind == "Node" && strings.Contains(e.Note, "pod-uid-9") {
				return true
			}
		}
		return false
	})

	r.MIGLayoutChanged(gpuB, "MIG disabled", "3g.40gb×2")
	if e := waitEvent(t, client, ReasonMIGLayoutChanged); !strings.Contains(e.Note, "from MIG disabled to 3g.40gb×2") || e.Regarding.Kind != "Node" {
		t.Errorf("mig event regarding %+v note %q", e.Regarding, e.Note)
	}
}

// writes counts the API writes of events the fake server saw.
func writes(c *fake.Clientset) int {
	n := 0
	for _, a := range c.Actions() {
		if a.GetResource().Resource == "events" && (a.GetVerb() == "create" || a.GetVerb() == "patch" || a.GetVerb() == "update") {
			n++
		}
	}
	return n
}

func TestRateLimitHoldsUnderAFlood(t *testing.T) {
	r, client, reg := start(t, Limits{Burst: 3, Every: time.Hour, NodeBurst: 20, NodeEvery: time.Hour})
	// An Xid storm on one GPU: each transition has a new note.
	for i := range 1000 {
		r.GPUHealth(gpuA, gpu.Unhealthy, fmt.Sprintf("xid %d", i))
	}
	if got := testutil.ToFloat64(r.counts.WithLabelValues(ReasonGPUUnhealthy, "rate_limited")); got != 997 {
		t.Errorf("rate_limited = %v, want 997", got)
	}
	// Another GPU's event still goes: the limit is per object.
	r.GPUHealth(gpuB, gpu.Unhealthy, "xid 48")
	testwait.For(t, 10*time.Second, "gpu B's event", func() bool {
		for _, e := range eventsFor(t, client, ReasonGPUUnhealthy) {
			if e.Regarding.FieldPath == "gpus{"+gpuB+"}" {
				return true
			}
		}
		return false
	})
	// A kill storm over 1000 pods: each a new object, which neither the
	// per-object limit nor client-go's aggregation bounds; the node's
	// bucket does (20, of which 4 went above).
	for i := range 1000 {
		r.WatchdogKilled(memwatch.Violation{DeviceUUID: gpuA, Namespace: "ns", Pod: fmt.Sprintf("p%d", i), PodUID: fmt.Sprintf("u%d", i), UsedBytes: 2 << 30, LimitBytes: 1 << 30}, 1, 1<<30)
	}
	if got := testutil.ToFloat64(r.counts.WithLabelValues(ReasonGPUMemoryLimitKilled, "rate_limited")); got != 1000-16 {
		t.Errorf("rate-limited kills = %v of 1000 pods, want all but the node's burst left, 16", got)
	}
	testwait.For(t, 10*time.Second, "16 kill events written", func() bool { return len(eventsFor(t, client, ReasonGPUMemoryLimitKilled)) == 16 })
	time.Sleep(200 * time.Millisecond) // nothing more may land
	if n := writes(client); n != 20 {
		t.Errorf("%d event writes for 2000 events (node burst 20), want 20", n)
	}
	if got := testutil.ToFloat64(r.counts.WithLabelValues(ReasonGPUUnhealthy, "written")); got != 4 {
		t.Errorf("written = %v on gpu A and B, want 3+1", got)
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
}

func TestLimiterRefillsAndStaysBounded(t *testing.T) {
	lm := newLimiter(Limits{Burst: 2, Every: time.Minute, NodeBurst: 100, NodeEvery: time.Millisecond, MaxKeys: 3})
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if got := []bool{lm.allow("a", t0), lm.allow("a", t0), lm.allow("a", t0)}; !slices.Equal(got, []bool{true, true, false}) {
		t.Fatalf("three at once: %v, want a burst of 2 then a refusal", got)
	}
	if !lm.allow("a", t0.Add(time.Minute)) {
		t.Error("a token after one interval: refused")
	}
	lm.allow("b", t0)
	lm.allow("c", t0)
	if lm.allow("d", t0) {
		t.Error("a fourth key with 3 kept and none refilled: allowed, want refused (bounded)")
	}
	if len(lm.keys) > 3 {
		t.Errorf("%d keys kept, want at most 3", len(lm.keys))
	}
	if !lm.allow("d", t0.Add(time.Hour)) {
		t.Error("a new key once the others refilled: refused")
	}
	node := newLimiter(Limits{Burst: 100, Every: time.Minute, NodeBurst: 2, NodeEvery: time.Hour})
	if got := []bool{node.allow("x", t0), node.allow("y", t0), node.allow("z", t0)}; !slices.Equal(got, []bool{true, true, false}) {
		t.Errorf("three keys at once: %v, want the node's burst of 2, then a refusal", got)
	}
}

func TestNilRecorderDoesNothing(t *testing.T) {
	var r *Recorder
	r.GPUHealth(gpuA, gpu.Unhealthy, "xid 48")
	r.WatchdogOverLimit(memwatch.Violation{}, memwatch.EnforceReport)
	r.WatchdogKilled(memwatch.Violation{}, 1, 1)
	r.MemoryLimitSet("ns", "p", "u", "c", gpuA, 1, 1)
	r.MemoryLimitFailed("ns", "p", "u", "c", nil, errors.New("x"))
	r.MemoryBorrowerEvicted("ns", "p", "u", "c", gpuA, 1, 2, 0)
	r.MIGLayoutChanged(gpuA, "a", "b")
}

func TestNewRefusesMissingConfig(t *testing.T) {
	_, err := New(Config{})
	if err == nil || !strings.Contains(err.Error(), "Client") || !strings.Contains(err.Error(), "NodeName") {
		t.Errorf("New(Config{}) = %v, want an error naming Client and NodeName", err)
	}
}

func TestTruncateKeepsRunes(t *testing.T) {
	s := strings.Repeat("é", 600) // 1200 bytes
	got := truncate(s, maxNoteBytes)
	if len(got) > maxNoteBytes || !strings.HasSuffix(got, "...") || !strings.HasPrefix(got, "éé") {
		t.Errorf("truncate: %d bytes, want at most %d ending in ...", len(got), maxNoteBytes)
	}
	for _, r := range got {
		if r == '\uFFFD' {
			t.Fatal("truncate cut a rune")
		}
	}
}

// Two changes of one GPU in a row are two events, each with its own note:
// client-go's aggregation would have kept the first note for both.
func TestRepeatsKeepTheirNotes(t *testing.T) {
	r, client, _ := start(t, Limits{})
	r.MIGLayoutChanged(gpuA, "MIG disabled", "MIG enabled, no MIG devices")
	r.MIGLayoutChanged(gpuA, "MIG enabled, no MIG devices", "1g.5gb×1")
	var notes []string
	testwait.For(t, 10*time.Second, "two MIG events on gpu A", func() bool {
		notes = nil
		for _, e := range eventsFor(t, client, ReasonMIGLayoutChanged) {
			notes = append(notes, e.Note)
		}
		return len(notes) == 2
	})
	slices.Sort(notes)
	if !strings.HasSuffix(notes[0], "from MIG disabled to MIG enabled, no MIG devices") || !strings.HasSuffix(notes[1], "from MIG enabled, no MIG devices to 1g.5gb×1") {
		t.Errorf("notes %q, want each change's own", notes)
	}
}

// A queue the API server does not drain drops events rather than block.
func TestFullQueueDrops(t *testing.T) {
	r, err := New(Config{Client: fake.NewClientset(), NodeName: testNode, Limits: Limits{Burst: 1000, NodeBurst: 1000, MaxKeys: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range queueLen + 10 { // Run is not running: nothing drains
		r.GPUHealth(fmt.Sprintf("GPU-%d", i), gpu.Unhealthy, "xid 48")
	}
	if got := testutil.ToFloat64(r.counts.WithLabelValues(ReasonGPUUnhealthy, "queue_full")); got != 10 {
		t.Errorf("queue_full = %v, want 10", got)
	}
}
