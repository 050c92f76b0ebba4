package scheduler

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/pkg/scheduler/plan"
)

// TestRunLeaderBinds runs the whole runtime on a fake clientset: the
// informers sync, the replica takes the Lease, a cycle binds the pending
// pod, the probes say ready, and Run returns nil when its context ends.
func TestRunLeaderBinds(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a lease and a cycle")
	}
	objs := append(l40sNode(t), wholeClaim("ns", "c", "gpu.gpud.io"), claimPod("ns", "p", t0, "c"))
	ts := newTestScheduler(t, placeAll{}, objs...)
	var mu sync.Mutex
	bound := make(chan struct{})
	ts.client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "binding" {
			mu.Lock()
			defer mu.Unlock()
			select {
			case <-bound:
			default:
				close(bound)
			}
		}
		return false, nil, nil
	})
	s, err := New(Config{Client: ts.client, Decider: placeAll{}, Now: ts.cfg.Now, Debounce: time.Millisecond,
		LeaderElection: &LeaderElection{Namespace: "kube-system", Identity: "test", LeaseDuration: 2 * time.Second,
			RenewDeadline: time.Second, RetryPeriod: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	if code := get(t, srv.URL+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz before Run = %d, want 503", code)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	select {
	case <-bound:
	case err := <-done:
		t.Fatalf("Run returned early: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no Binding within 30s")
	}
	if code := get(t, srv.URL+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz while leading = %d, want 200", code)
	}
	if code := get(t, srv.URL+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d, want 200", code)
	}
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body := new(strings.Builder)
	_, _ = io.Copy(body, resp.Body)
	resp.Body.Close()
	for _, want := range []string{"gpud_scheduler_binds_total 1", "gpud_scheduler_leader 1", `gpud_scheduler_gpu_memory_bytes{model="NVIDIA L40S",state="allocated"}`} {
		if !strings.Contains(body.String(), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v, want nil after cancel", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if err := s.Run(t.Context()); err == nil {
		t.Error("second Run succeeded")
	}
}

func get(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestRunLostLease: a leader whose lease renewals fail stops deciding and
// Run returns ErrLostLease (the process exits; its Deployment restarts it).
func TestRunLostLease(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a lease to expire")
	}
	ts := newTestScheduler(t, placeAll{}, l40sNode(t)...)
	var mu sync.Mutex
	failRenew := false
	ts.client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if failRenew {
			return true, nil, errors.New("apiserver unreachable")
		}
		return false, nil, nil
	})
	s, err := New(Config{Client: ts.client, Decider: placeAll{}, Now: ts.cfg.Now,
		LeaderElection: &LeaderElection{Namespace: "kube-system", Identity: "test", LeaseDuration: 1500 * time.Millisecond,
			RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(t.Context()) }()
	deadline := time.Now().Add(30 * time.Second)
	for !s.Ready() {
		if time.Now().After(deadline) {
			t.Fatal("never led")
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	failRenew = true
	mu.Unlock()
	select {
	case err := <-done:
		if !errors.Is(err, ErrLostLease) {
			t.Fatalf("Run = %v, want ErrLostLease", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run kept going after its lease could not be renewed")
	}
	if s.Ready() {
		t.Error("ready after losing the lease")
	}
}

func TestHealthzStuckLeader(t *testing.T) {
	ts := newTestScheduler(t, placeAll{})
	srv := httptest.NewServer(ts.Handler())
	defer srv.Close()
	ts.setLeading(true)
	ts.lastCycle.Store(time.Now().UnixNano())
	if code := get(t, srv.URL+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz after a cycle = %d", code)
	}
	ts.lastCycle.Store(time.Now().Add(-ts.stuckAfter() - time.Second).UnixNano())
	if code := get(t, srv.URL+"/healthz"); code != http.StatusInternalServerError {
		t.Errorf("/healthz of a leader without cycles = %d, want 500", code)
	}
	ts.setLeading(false)
	if code := get(t, srv.URL+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz of a follower = %d, want 200", code)
	}
}

type panicky struct{}

func (panicky) Decide(*plan.Snapshot) plan.Plan { panic("bad object") }

func TestDeciderPanicIsAnError(t *testing.T) {
	ts := newTestScheduler(t, panicky{})
	if _, err := ts.decide(&plan.Snapshot{}); err == nil || !strings.Contains(err.Error(), "bad object") {
		t.Fatalf("decide = %v, want the panic as an error", err)
	}
}

// TestCatchUp: a new term reads the claims from the API server, so that
// what the previous leader wrote counts even before the informer has it.
func TestCatchUp(t *testing.T) {
	written := wholeClaim("ns", "c", "gpu.gpud.io")
	written.Status.Allocation = &resourceapi.AllocationResult{}
	ts := newTestScheduler(t, placeAll{}, written)
	ts.catchUp(t.Context())
	got := ts.assumed.mergeClaims(nil, t0) // the informer has nothing yet
	if len(got) != 1 || got[0].Name != "c" || got[0].Status.Allocation == nil {
		t.Fatalf("claims after catch-up = %v, want the API server's allocated claim", got)
	}
}

// TestNewPodSkipsDebounce: a pod of this scheduler arriving after a cycle
// is decided at once, not after the Debounce gap that batches other events
// (here a minute): kube-scheduler makes a pod arriving alone wait for no
// timer either. The second pod arrives right after the first one's Binding,
// whose events poke a cycle too.
func TestNewPodSkipsDebounce(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the runtime")
	}
	objs := l40sNode(t)
	ts := newTestScheduler(t, placeAll{}, objs...)
	binds := make(chan string, 4)
	ts.client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "binding" {
			binds <- a.(k8stesting.CreateAction).GetObject().(*corev1.Binding).Name
		}
		return false, nil, nil
	})
	ctx := runQuiet(t, Config{Client: ts.client, Decider: placeAll{}, Now: ts.cfg.Now})
	for _, name := range []string{"p1", "p2"} {
		c := wholeClaim("ns", "c-"+name, "gpu.gpud.io")
		if _, err := ts.client.ResourceV1().ResourceClaims("ns").Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := ts.client.CoreV1().Pods("ns").Create(ctx, claimPod("ns", name, t0, c.Name), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-binds:
			if got != name {
				t.Fatalf("bound %s, want %s", got, name)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s not bound within 20s: it waited for the debounce of a minute", name)
		}
	}
}

// TestMissingClaimReportedAfterGrace: a pod whose claim does not exist is
// not marked unschedulable at once (its claim is usually moments behind
// it), and is told why once claimGrace has passed, by a cycle of its own
// (no event comes, Resync is an hour).
func TestMissingClaimReportedAfterGrace(t *testing.T) {
	if testing.Short() {
		t.Skip("waits claimGrace")
	}
	ts := newTestScheduler(t, placeAll{}, l40sNode(t)...)
	patched := make(chan time.Time, 4)
	ts.client.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "status" && strings.Contains(string(a.(k8stesting.PatchAction).GetPatch()), "waiting for ResourceClaim") {
			patched <- time.Now()
		}
		return false, nil, nil
	})
	ctx := runQuiet(t, Config{Client: ts.client, Decider: placeAll{}})
	pod := claimPod("ns", "p", time.Now(), "not-yet")
	created := time.Now()
	pod.CreationTimestamp = metav1.NewTime(created)
	if _, err := ts.client.CoreV1().Pods("ns").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case at := <-patched:
		// CreationTimestamp has whole seconds on the API server; here it
		// keeps the nanoseconds, so the grace counts from created.
		if d := at.Sub(created); d < claimGrace-time.Second {
			t.Errorf("marked unschedulable %s after creation, before the %s grace", d.Round(time.Millisecond), claimGrace)
		}
	case <-time.After(claimGrace + 15*time.Second):
		t.Fatalf("not told about its missing claim within %s", claimGrace+15*time.Second)
	}
}

// runQuiet runs a scheduler on cfg with a Debounce of a minute and a
// Resync of an hour, so that a cycle only runs when an event or a timer
// the runtime sets asks for it at once, and waits for its first cycle. The
// returned context ends with the test (and stops the scheduler).
func runQuiet(t *testing.T, cfg Config) context.Context {
	t.Helper()
	cfg.Debounce, cfg.Resync = time.Minute, time.Hour
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	go func() { _ = s.Run(ctx) }()
	for !s.synced.Load() || s.lastCycle.Load() == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	return ctx
}

// TestRunClientsApart: with EventClient and LeaseClient set, the leader
// lease and the Events go through them, not the bind client, so that
// binds at the bind client's rate limit neither delay a lease renewal nor
// share their budget with Events (kube-scheduler's three clients).
func TestRunClientsApart(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a lease and a cycle")
	}
	objs := append(l40sNode(t), wholeClaim("ns", "c", "gpu.gpud.io"), claimPod("ns", "p", t0, "c"))
	ts := newTestScheduler(t, placeAll{}, objs...)
	events, leases := fake.NewClientset(), fake.NewClientset()
	s, err := New(Config{Client: ts.client, EventClient: events, LeaseClient: leases, Decider: placeAll{}, Now: ts.cfg.Now, Debounce: time.Millisecond,
		LeaderElection: &LeaderElection{Namespace: "kube-system", Identity: "test", LeaseDuration: 2 * time.Second,
			RenewDeadline: time.Second, RetryPeriod: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	testwait.For(t, 30*time.Second, "a Scheduled Event through EventClient", func() bool {
		got, err := events.EventsV1().Events("ns").List(t.Context(), metav1.ListOptions{})
		return err == nil && slices.ContainsFunc(got.Items, func(e eventsv1.Event) bool { return e.Reason == "Scheduled" && e.Regarding.Name == "p" })
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v, want nil after cancel", err)
	}
	if got, err := leases.CoordinationV1().Leases("kube-system").List(t.Context(), metav1.ListOptions{}); err != nil || len(got.Items) != 1 {
		t.Errorf("leases through LeaseClient: %v, %v; want the scheduler's one", got, err)
	}
	for _, a := range ts.client.Actions() {
		if r := a.GetResource().Resource; r == "events" || r == "leases" {
			t.Errorf("bind client: %s %s, want none (EventClient and LeaseClient are set)", a.GetVerb(), r)
		}
	}
	if !slices.ContainsFunc(ts.client.Actions(), func(a k8stesting.Action) bool { return a.GetSubresource() == "binding" }) {
		t.Error("no Binding through Client")
	}
}
