package scheduler

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	resourceclient "k8s.io/client-go/kubernetes/typed/resource/v1"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/gpud/gpud/pkg/scheduler/decide"
	"github.com/gpud/gpud/pkg/scheduler/plan"
)

// guard bounds the waits of these tests for what must happen (a failure
// when it passes, never a timing assertion).
const guard = 30 * time.Second

// gate blocks one pod's Binding (or first claim write) until opened, and
// says when it was reached.
type gate struct {
	reached, open chan struct{}
	once          sync.Once
}

func newGate() *gate { return &gate{reached: make(chan struct{}), open: make(chan struct{})} }

func (g *gate) block() {
	g.once.Do(func() { close(g.reached) })
	<-g.open
}

func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(guard):
		t.Fatalf("%s: not within %s", what, guard)
	}
}

// boundLog records Bindings from any goroutine.
type boundLog struct {
	mu     sync.Mutex
	nodes  map[string]string
	counts map[string]int
	added  chan string
}

func recordBindings(ts *testScheduler) *boundLog {
	l := &boundLog{nodes: map[string]string{}, counts: map[string]int{}, added: make(chan string, 16)}
	ts.client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "binding" {
			b := a.(k8stesting.CreateAction).GetObject().(*corev1.Binding)
			l.mu.Lock()
			l.nodes[b.Name] = b.Target.Name
			l.counts[b.Name]++
			l.mu.Unlock()
			l.added <- b.Name
			return true, b, nil
		}
		return false, nil, nil
	})
	return l
}

func (l *boundLog) has(pod string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.nodes[pod]
	return ok
}

// count is how many Bindings pod got.
func (l *boundLog) count(pod string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.counts[pod]
}

// waitBound waits until pod's Binding is recorded.
func (l *boundLog) waitBound(t *testing.T, pod string) {
	t.Helper()
	deadline := time.After(guard)
	for !l.has(pod) {
		select {
		case <-l.added:
		case <-deadline:
			t.Fatalf("pod %s not bound within %s", pod, guard)
		}
	}
}

// slowClient calls before ahead of every Binding ("bind", pod name) and
// claim update ("claim", claim name), outside the fake clientset's lock
// (its reactors run under it: one that blocks stops every request).
type slowClient struct {
	kubernetes.Interface
	before func(verb, name string)
}

func (c slowClient) CoreV1() corev1client.CoreV1Interface {
	return slowCore{c.Interface.CoreV1(), c.before}
}
func (c slowClient) ResourceV1() resourceclient.ResourceV1Interface {
	return slowResource{c.Interface.ResourceV1(), c.before}
}

type slowCore struct {
	corev1client.CoreV1Interface
	before func(verb, name string)
}

func (c slowCore) Pods(ns string) corev1client.PodInterface {
	return slowPods{c.CoreV1Interface.Pods(ns), c.before}
}

type slowPods struct {
	corev1client.PodInterface
	before func(verb, name string)
}

func (p slowPods) Bind(ctx context.Context, b *corev1.Binding, opts metav1.CreateOptions) error {
	p.before("bind", b.Name)
	return p.PodInterface.Bind(ctx, b, opts)
}

type slowResource struct {
	resourceclient.ResourceV1Interface
	before func(verb, name string)
}

func (c slowResource) ResourceClaims(ns string) resourceclient.ResourceClaimInterface {
	return slowClaims{c.ResourceV1Interface.ResourceClaims(ns), c.before}
}

type slowClaims struct {
	resourceclient.ResourceClaimInterface
	before func(verb, name string)
}

func (c slowClaims) Update(ctx context.Context, cl *resourceapi.ResourceClaim, opts metav1.UpdateOptions) (*resourceapi.ResourceClaim, error) {
	c.before("claim", cl.Name)
	return c.ResourceClaimInterface.Update(ctx, cl, opts)
}

func (c slowClaims) UpdateStatus(ctx context.Context, cl *resourceapi.ResourceClaim, opts metav1.UpdateOptions) (*resourceapi.ResourceClaim, error) {
	c.before("claim", cl.Name)
	return c.ResourceClaimInterface.UpdateStatus(ctx, cl, opts)
}

// blockOn makes the scheduler's requests of verb on name wait for g.
func blockOn(ts *testScheduler, verb, name string, g *gate) {
	ts.cfg.Client = slowClient{Interface: ts.client, before: func(v, n string) {
		if v == verb && n == name {
			g.block()
		}
	}}
}

// cycleAsync runs one cycle (Scheduler.cycleOn, which does not wait for
// its binds) on in, with the claims merged with what is assumed as the
// runtime's informer listing does; the channel closes when it returns.
func (ts *testScheduler) cycleAsync(ctx context.Context, in inputs, now time.Time) <-chan struct{} {
	in.claims = ts.assumed.mergeClaims(in.claims, now)
	done := make(chan struct{})
	go func() {
		defer close(done)
		ts.Scheduler.cycleOn(ctx, in, now)
	}()
	return done
}

// TestPipelineSlowBindDoesNotDelayNextDecision: a pod whose Binding hangs
// (a slow API server, a slow webhook) does not hold up the cycle that
// decided it, and the next cycle binds a pod created after it while the
// first bind is still under way; the first then completes.
func TestPipelineSlowBindDoesNotDelayNextDecision(t *testing.T) {
	base := l40sNode(t)
	c1, c2 := wholeClaim("ns", "c1", "gpu.gpud.io"), wholeClaim("ns", "c2", "gpu.gpud.io")
	p1, p2 := claimPod("ns", "p1", t0, "c1"), claimPod("ns", "p2", t0.Add(time.Second), "c2")
	ts := newTestScheduler(t, placeAll{}, append(base, c1, c2, p1, p2)...)
	ts.binds.max = 2 // the slow bind holds one worker
	bl := recordBindings(ts)
	slow := newGate()
	blockOn(ts, "bind", "p1", slow)

	done := ts.cycleAsync(t.Context(), viewInputs(t, base, []*resourceapi.ResourceClaim{c1}, []*corev1.Pod{p1}), t0)
	waitFor(t, slow.reached, "p1's Binding sent")
	waitFor(t, done, "the first cycle returning while p1's Binding is under way")

	// The informers have not seen p1 bound: p1 is pending to them.
	done = ts.cycleAsync(t.Context(), viewInputs(t, base, []*resourceapi.ResourceClaim{c1, c2}, []*corev1.Pod{p1, p2}), t0)
	waitFor(t, done, "the second cycle")
	bl.waitBound(t, "p2")
	if bl.has("p1") {
		t.Fatal("p1 bound before its Binding was let through")
	}
	close(slow.open)
	ts.binds.wait()
	if !bl.has("p1") {
		t.Fatal("p1 not bound once its Binding went through")
	}
	if got := ts.claimFromAPI(t, "ns", "c1"); got.Status.Allocation == nil || len(got.Status.ReservedFor) != 1 {
		t.Errorf("c1 after p1's slow bind: %+v", got.Status)
	}
}

// TestPipelineInFlightAssumed: while a pod's bind is in flight (none of
// its writes done), the next cycle counts its GPU and its host port as
// taken: another pod with the same host port on the one node stays
// pending, and a GPU pod gets another GPU.
func TestPipelineInFlightAssumed(t *testing.T) {
	slices_ := nodeSlices(t, "pcie-l40s", "n")
	node := rulesNode("n")
	c1, c2, c3 := wholeClaim("default", "c1", "gpu.gpud.io"), wholeClaim("default", "c2", "gpu.gpud.io"), wholeClaim("default", "c3", "gpu.gpud.io")
	p1 := withHostPort(claimPod("default", "p1", t0, "c1"), 9999)
	p2 := withHostPort(claimPod("default", "p2", t0.Add(time.Second), "c2"), 9999)
	p3 := claimPod("default", "p3", t0.Add(2*time.Second), "c3")
	objs := []runtime.Object{node, gpuClass(), c1, c2, c3, p1, p2, p3}
	for _, s := range slices_ {
		objs = append(objs, s)
	}
	ts := newTestScheduler(t, decide.New(decide.Config{}), objs...)
	ts.binds.max = 2 // the slow bind holds one worker
	bl := recordBindings(ts)
	held := newGate()
	blockOn(ts, "claim", "c1", held)
	in := func(claims []*resourceapi.ResourceClaim, pods ...*corev1.Pod) inputs {
		return inputs{pods: pods, nodes: []*corev1.Node{node}, slices: slices_, classes: []*resourceapi.DeviceClass{gpuClass()}, claims: claims}
	}

	done := ts.cycleAsync(t.Context(), in([]*resourceapi.ResourceClaim{c1}, p1), t0)
	waitFor(t, held.reached, "p1's first claim write sent")
	waitFor(t, done, "the first cycle returning while p1's claim write is under way")
	// Nothing of p1's bind is written: the informers show c1 unallocated
	// and p1 unbound.
	done = ts.cycleAsync(t.Context(), in([]*resourceapi.ResourceClaim{c1, c2, c3}, p1, p2, p3), t0)
	waitFor(t, done, "the second cycle")
	bl.waitBound(t, "p3")
	if bl.has("p2") {
		t.Error("p2 bound to node n while p1, bound there with the same host port, was in flight")
	}
	close(held.open)
	ts.binds.wait()
	d1, d3 := devicesOf(ts.claimFromAPI(t, "default", "c1")), devicesOf(ts.claimFromAPI(t, "default", "c3"))
	if len(d1) != 1 || len(d3) != 1 || d1[0] == d3[0] {
		t.Fatalf("devices: c1 %v, c3 %v; want one each, different (p3 was decided while p1 was in flight)", d1, d3)
	}
	if c2 := ts.claimFromAPI(t, "default", "c2"); c2.Status.Allocation != nil {
		t.Errorf("c2 allocated for p2, which cannot run beside p1: %+v", c2.Status)
	}
	if n := bl.count("p1"); n != 1 {
		t.Errorf("p1 got %d Bindings, want 1 (the second cycle must see it bound, not pending)", n)
	}
}

func devicesOf(c *resourceapi.ResourceClaim) []string {
	if c.Status.Allocation == nil {
		return nil
	}
	var out []string
	for _, r := range c.Status.Allocation.Devices.Results {
		out = append(out, r.Pool+"/"+r.Device)
	}
	return out
}

// TestPipelineFailedBindRollsBackItsUnit: of two pods bound by one cycle,
// the one whose Binding fails has its claim rolled back, is no longer
// assumed bound, backs off with its reason on its status, and a cycle is
// asked for; the other stays bound with its claim. After its backoff the
// pod is decided again and binds.
func TestPipelineFailedBindRollsBackItsUnit(t *testing.T) {
	base := l40sNode(t)
	c1, c2 := wholeClaim("ns", "c1", "gpu.gpud.io"), wholeClaim("ns", "c2", "gpu.gpud.io")
	p1, p2 := claimPod("ns", "p1", t0, "c1"), claimPod("ns", "p2", t0.Add(time.Second), "c2")
	ts := newTestScheduler(t, placeAll{}, append(base, c1, c2, p1, p2)...)
	bl := recordBindings(ts)
	var mu sync.Mutex
	fail := true
	ts.client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if fail && a.GetSubresource() == "binding" && a.(k8stesting.CreateAction).GetObject().(*corev1.Binding).Name == "p1" {
			return true, nil, errors.New("webhook said no")
		}
		return false, nil, nil
	})
	select { // a poke left from before
	case <-ts.trigger:
	default:
	}
	ts.cycleOn(t.Context(), viewInputs(t, base, []*resourceapi.ResourceClaim{c1, c2}, []*corev1.Pod{p1, p2}), t0)

	if bl.has("p1") || !bl.has("p2") {
		t.Fatalf("bound p1 %v p2 %v, want p2 only", bl.has("p1"), bl.has("p2"))
	}
	if got := ts.claimFromAPI(t, "ns", "c1"); got.Status.Allocation != nil || len(got.Status.ReservedFor) != 0 || len(got.Finalizers) != 0 {
		t.Errorf("c1 after p1's failed Binding: %+v, finalizers %v; want rolled back", got.Status, got.Finalizers)
	}
	if got := ts.claimFromAPI(t, "ns", "c2"); got.Status.Allocation == nil || len(got.Status.ReservedFor) != 1 {
		t.Errorf("c2 of the bound p2: %+v; want allocated and reserved", got.Status)
	}
	if _, ok := ts.assumed.boundNode(p1.UID); ok {
		t.Error("p1 still assumed bound after its Binding failed")
	}
	if n, ok := ts.assumed.boundNode(p2.UID); !ok || n != "n1" {
		t.Errorf("p2 assumed bound = %q %v, want n1", n, ok)
	}
	if !ts.backoff.waiting(p1.UID, t0) || ts.backoff.waiting(p2.UID, t0) {
		t.Errorf("backing off: p1 %v p2 %v, want p1 only", ts.backoff.waiting(p1.UID, t0), ts.backoff.waiting(p2.UID, t0))
	}
	select {
	case <-ts.trigger:
	default:
		t.Error("no cycle asked for after the failed bind")
	}
	got, err := ts.client.CoreV1().Pods("ns").Get(t.Context(), "p1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c := podScheduled(got); c == nil || c.Status != corev1.ConditionFalse || !strings.Contains(c.Message, "webhook said no") {
		t.Errorf("p1's PodScheduled = %+v, want False with the binding error", c)
	}

	// Decided again once its backoff is over (the informers show c1 as
	// rolled back, p1 pending, p2 bound).
	mu.Lock()
	fail = false
	mu.Unlock()
	later := t0.Add(maxBackoff)
	bound2 := p2.DeepCopy()
	bound2.Spec.NodeName = "n1"
	in := viewInputs(t, base, []*resourceapi.ResourceClaim{ts.claimFromAPI(t, "ns", "c1"), ts.claimFromAPI(t, "ns", "c2")}, []*corev1.Pod{got, bound2})
	in.claims = ts.assumed.mergeClaims(in.claims, later)
	ts.cycleOn(t.Context(), in, later)
	if !bl.has("p1") {
		t.Fatal("p1 not bound when decided again after its backoff")
	}
	d1, d2 := devicesOf(ts.claimFromAPI(t, "ns", "c1")), devicesOf(ts.claimFromAPI(t, "ns", "c2"))
	if len(d1) != 1 || len(d2) != 1 || slices.Equal(d1, d2) {
		t.Errorf("devices c1 %v c2 %v, want one each, different", d1, d2)
	}
}

// TestPipelineStopsWithTerm: when the term ends (lease lost, shutdown)
// with a bind under way and another queued, Run returns only once the
// workers are gone: the bind under way rolled back its claim, the queued
// one wrote nothing, and no worker is left.
func TestPipelineStopsWithTerm(t *testing.T) {
	if testing.Short() {
		t.Skip("runs informers")
	}
	objs := append(l40sNode(t), wholeClaim("ns", "c1", "gpu.gpud.io"), wholeClaim("ns", "c2", "gpu.gpud.io"),
		claimPod("ns", "p1", t0, "c1"), claimPod("ns", "p2", t0.Add(time.Second), "c2"))
	ts := newTestScheduler(t, placeAll{}, objs...)
	held := newGate()
	var mu sync.Mutex
	var written []string
	client := slowClient{Interface: ts.client, before: func(v, n string) {
		if v != "claim" {
			return
		}
		mu.Lock()
		written = append(written, n)
		mu.Unlock()
		held.block()
	}}
	s, err := New(Config{Client: client, InformerClient: ts.client, Decider: placeAll{}, Now: ts.cfg.Now, Debounce: time.Millisecond, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	waitFor(t, held.reached, "a claim write under way")
	cancel()
	select {
	case err := <-done:
		t.Fatalf("Run returned (%v) with a bind under way", err)
	default:
	}
	close(held.open)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v", err)
		}
	case <-time.After(guard):
		t.Fatal("Run did not return after its context ended")
	}
	if !s.binds.idle() {
		t.Error("bind workers left after Run returned")
	}
	mu.Lock()
	first := written[0]
	others := slices.DeleteFunc(slices.Clone(written), func(n string) bool { return n == first })
	mu.Unlock()
	if len(others) != 0 {
		t.Errorf("claims written after the term ended: %v (first %s); want only the bind under way's own writes and rollback", others, first)
	}
	for _, name := range []string{"c1", "c2"} {
		if got := ts.claimFromAPI(t, "ns", name); got.Status.Allocation != nil || len(got.Finalizers) != 0 {
			t.Errorf("%s after the term: %+v, finalizers %v; want as before", name, got.Status, got.Finalizers)
		}
	}
}

// TestStatusBudget: pending-status writes stay within their share of the
// client's rate; what is over budget is written by a later cycle, and a
// pod whose reason has not changed costs no write.
func TestStatusBudget(t *testing.T) {
	var pods []runtime.Object
	var pending []plan.Pending
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		p := claimPod("ns", name, t0)
		pods = append(pods, p)
		pending = append(pending, plan.Pending{Pod: newPod(p, nil), Code: "capacity", Message: "no free GPU for " + name})
	}
	ts := newTestScheduler(t, placeAll{}, pods...)
	now := t0
	ts.cfg.Now = func() time.Time { return now }
	ts.statusBudget = flowcontrol.NewTokenBucketPassiveRateLimiterWithClock(1, 2, passiveClock(ts.cfg.Now))
	var mu sync.Mutex
	patched := map[string]int{}
	ts.client.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		patched[a.(k8stesting.PatchAction).GetName()]++
		return false, nil, nil
	})
	total := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, c := range patched {
			n += c
		}
		return n
	}
	ts.writePending(t.Context(), pending)
	if n := total(); n != 2 {
		t.Fatalf("first cycle: %d status writes, want 2 (the burst)", n)
	}
	if v := metricValue(t, ts.statusDeferred); v != 3 {
		t.Errorf("deferred = %v, want 3", v)
	}
	now = now.Add(2 * time.Second) // two more tokens
	ts.writePending(t.Context(), pending)
	if n := total(); n != 4 {
		t.Fatalf("a cycle 2s later: %d status writes in all, want 4 (the two written first are not written again)", n)
	}
	for name, c := range patched {
		if c != 1 {
			t.Errorf("pod %s written %d times", name, c)
		}
	}

	rc, err := kubernetes.NewForConfig(&rest.Config{Host: "http://127.0.0.1:1", QPS: 200, Burst: 400})
	if err != nil {
		t.Fatal(err)
	}
	if got := newStatusBudget(rc, time.Now).QPS(); got != 50 {
		t.Errorf("status budget of a client at 200 QPS = %v/s, want 50", got)
	}
}
