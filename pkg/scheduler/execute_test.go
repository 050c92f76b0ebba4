package scheduler

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/gpud/gpud/pkg/allocator/jobs"
	"github.com/gpud/gpud/pkg/scheduler/plan"
	"github.com/gpud/gpud/pkg/scheduler/view"
)

// l40sNode returns the objects of one 4-GPU node (L40S) and the class.
func l40sNode(t *testing.T) []runtime.Object {
	objs := []runtime.Object{kubeNode("n1"), gpuClass()}
	for _, s := range nodeSlices(t, "pcie-l40s", "n1") {
		objs = append(objs, s)
	}
	return objs
}

func viewInputs(t *testing.T, objs []runtime.Object, claims []*resourceapi.ResourceClaim, pods []*corev1.Pod) inputs {
	in := inputs{claims: claims, pods: pods}
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.Node:
			in.nodes = append(in.nodes, o)
		case *resourceapi.ResourceSlice:
			in.slices = append(in.slices, o)
		case *resourceapi.DeviceClass:
			in.classes = append(in.classes, o)
		}
	}
	return in
}

func TestExecuteBind(t *testing.T) {
	base := l40sNode(t)
	c := wholeClaim("ns", "c", "gpu.gpud.io")
	pod := claimPod("ns", "p", t0, "c")
	ts := newTestScheduler(t, placeAll{}, append(base, c, pod)...)
	sn := ts.snapshotOf(viewInputs(t, base, []*resourceapi.ResourceClaim{c}, []*corev1.Pod{pod}))
	p := ts.cfg.Decider.Decide(sn.Snapshot)
	if len(p.Binds) != 1 {
		t.Fatalf("plan = %+v", p)
	}
	ts.execute(t.Context(), sn, p)

	if len(ts.bindings) != 1 || ts.bindings[0] != "ns/p=n1" {
		t.Fatalf("bindings = %v", ts.bindings)
	}
	got := ts.claimFromAPI(t, "ns", "c")
	if got.Status.Allocation == nil || len(got.Status.Allocation.Devices.Results) != 1 || len(got.Status.ReservedFor) != 1 || got.Status.ReservedFor[0].UID != pod.UID {
		t.Fatalf("claim status = %+v", got.Status)
	}
	if !slices.Equal(got.Finalizers, []string{resourceapi.Finalizer}) {
		t.Errorf("finalizers = %v, want the delete protection kube-scheduler adds", got.Finalizers)
	}
	if n, ok := ts.assumed.boundNode(pod.UID); !ok || n != "n1" {
		t.Errorf("assumed bound = %q %v", n, ok)
	}
	// The next cycle, before the informer catches up: the pod counts as
	// bound and the claim as allocated, so nothing is decided twice.
	sn = ts.snapshotOf(viewInputs(t, base, []*resourceapi.ResourceClaim{c}, []*corev1.Pod{pod}))
	if len(sn.Pending) != 0 || len(sn.Bound) != 1 || sn.Bound[0].Claims[0].Status.Allocation == nil {
		t.Fatalf("next cycle: pending %d bound %d", len(sn.Pending), len(sn.Bound))
	}
	if err := view.Check(sn.View); err != nil {
		t.Fatal(err)
	}
	ev := <-ts.events.Events
	if !strings.Contains(ev, "Scheduled") || !strings.Contains(ev, "ns/p to n1") {
		t.Errorf("event %q", ev)
	}
}

func TestExecuteGangRollback(t *testing.T) {
	base := l40sNode(t)
	c1, c2 := wholeClaim("ns", "c1", "gpu.gpud.io"), wholeClaim("ns", "c2", "gpu.gpud.io")
	p1, p2 := claimPod("ns", "p1", t0, "c1"), claimPod("ns", "p2", t0.Add(time.Second), "c2")
	ts := newTestScheduler(t, placeAll{gang: "ns/g"}, append(base, c1, c2, p1, p2)...)
	ts.client.PrependReactor("update", "resourceclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
		u := a.(k8stesting.UpdateAction)
		if c := u.GetObject().(*resourceapi.ResourceClaim); c.Name == "c2" && c.Status.Allocation != nil {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceclaims"}, c.Name, errors.New("stale"))
		}
		return false, nil, nil
	})
	sn := ts.snapshotOf(viewInputs(t, base, []*resourceapi.ResourceClaim{c1, c2}, []*corev1.Pod{p1, p2}))
	p := ts.cfg.Decider.Decide(sn.Snapshot)
	if len(p.Binds) != 2 {
		t.Fatalf("plan = %+v", p)
	}
	ts.execute(t.Context(), sn, p)
	if len(ts.bindings) != 0 {
		t.Errorf("bindings = %v, want none (gang all-or-nothing)", ts.bindings)
	}
	for _, name := range []string{"c1", "c2"} {
		if got := ts.claimFromAPI(t, "ns", name); got.Status.Allocation != nil || len(got.Status.ReservedFor) != 0 || len(got.Finalizers) != 0 {
			t.Errorf("claim %s after rollback: %+v, finalizers %v", name, got.Status, got.Finalizers)
		}
	}
	if v := metricValue(t, ts.m.conflicts); v != 1 {
		t.Errorf("conflicts = %v, want 1", v)
	}
	if v := metricValue(t, ts.m.rollbacks); v != 1 {
		t.Errorf("rollbacks = %v, want 1 (c1)", v)
	}
	// The next cycle sees c1 free again (the rollback is assumed).
	sn = ts.snapshotOf(viewInputs(t, base, []*resourceapi.ResourceClaim{c1, c2}, []*corev1.Pod{p1, p2}))
	for _, c := range sn.claims {
		if c.Status.Allocation != nil {
			t.Errorf("claim %s still allocated in the next view", c.Name)
		}
	}
}

func TestExecuteBindingFailureRollsBack(t *testing.T) {
	base := l40sNode(t)
	// c is shared: allocated already for another pod; p adds itself.
	shared := wholeClaim("ns", "shared", "gpu.gpud.io")
	c := wholeClaim("ns", "c", "gpu.gpud.io")
	pod := claimPod("ns", "p", t0, "c", "shared")
	ts := newTestScheduler(t, placeAll{}, append(base, c, shared, pod)...)
	ts.client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "binding" {
			return true, nil, errors.New("node is gone")
		}
		return false, nil, nil
	})
	sn := ts.snapshotOf(viewInputs(t, base, []*resourceapi.ResourceClaim{c, shared}, []*corev1.Pod{pod}))
	p := ts.cfg.Decider.Decide(sn.Snapshot)
	ts.execute(t.Context(), sn, p)
	for _, name := range []string{"c", "shared"} {
		if got := ts.claimFromAPI(t, "ns", name); got.Status.Allocation != nil || len(got.Status.ReservedFor) != 0 || len(got.Finalizers) != 0 {
			t.Errorf("claim %s after a failed Binding: %+v", name, got.Status)
		}
	}
	if _, ok := ts.assumed.boundNode(pod.UID); ok {
		t.Error("pod assumed bound after a failed Binding")
	}
}

func TestReserveOnlyKeepsAllocation(t *testing.T) {
	base := l40sNode(t)
	c := wholeClaim("ns", "c", "gpu.gpud.io")
	other := claimPod("ns", "other", t0, "c")
	ts := newTestScheduler(t, placeAll{}, append(base, other)...)
	// Allocate c for another pod first.
	sn := ts.snapshotOf(viewInputs(t, base, []*resourceapi.ResourceClaim{c}, []*corev1.Pod{other}))
	items, _, err := sn.View.Demand([]*resourceapi.ResourceClaim{c})
	if err != nil {
		t.Fatal(err)
	}
	allocs, err := sn.View.Place(items, view.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := allocs[0].Status(other, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts.client.ResourceV1().ResourceClaims("ns").Create(t.Context(), st, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := claimPod("ns", "p", t0, "c")
	b := plan.Bind{Pod: newPod(pod, []*resourceapi.ResourceClaim{st}), Node: "n1", Allocations: []view.Allocation{{Claim: st, Result: st.Status.Allocation}}}
	ts.execute(t.Context(), &snapshot{Snapshot: &plan.Snapshot{}}, plan.Plan{Binds: []plan.Bind{b}})
	got := ts.claimFromAPI(t, "ns", "c")
	if len(got.Status.ReservedFor) != 2 || got.Status.ReservedFor[1].UID != pod.UID {
		t.Fatalf("reservedFor = %+v, want other then p", got.Status.ReservedFor)
	}
	if len(ts.bindings) != 1 {
		t.Fatalf("bindings = %v", ts.bindings)
	}
	// Again (the informer lagging): nothing is written twice.
	b.Allocations[0].Claim = got
	writes := 0
	ts.client.PrependReactor("update", "resourceclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
		writes++
		return false, nil, nil
	})
	if w, err := ts.writeClaims(t.Context(), b); err != nil || len(w) != 0 || writes != 0 {
		t.Fatalf("second write: %v, %d written, %d API writes", err, len(w), writes)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestWritePending(t *testing.T) {
	pod := claimPod("ns", "p", t0)
	ts := newTestScheduler(t, placeAll{}, pod)
	pd := plan.Pending{Pod: newPod(pod, nil), Code: "capacity", Message: "no GPU with 40Gi free on a H100", NominatedNode: "n1"}
	ts.writePending(t.Context(), []plan.Pending{pd})
	got, err := ts.client.CoreV1().Pods("ns").Get(t.Context(), "p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := podScheduled(got)
	if c == nil || c.Status != corev1.ConditionFalse || c.Reason != corev1.PodReasonUnschedulable || c.Message != pd.Message {
		t.Fatalf("condition = %+v", c)
	}
	if got.Status.NominatedNodeName != "n1" {
		t.Errorf("nominatedNodeName = %q", got.Status.NominatedNodeName)
	}
	if ev := <-ts.events.Events; !strings.Contains(ev, "FailedScheduling") || !strings.Contains(ev, "40Gi") {
		t.Errorf("event %q", ev)
	}
	// The same again (informer not caught up): no second patch, no event.
	patches := 0
	ts.client.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		patches++
		return false, nil, nil
	})
	ts.writePending(t.Context(), []plan.Pending{pd})
	// And with the informer's pod showing it: none either.
	pd.Pod = newPod(got, nil)
	ts.forgetStatus(pod.UID)
	ts.writePending(t.Context(), []plan.Pending{pd})
	if patches != 0 || len(ts.events.Events) != 0 {
		t.Errorf("unchanged status: %d patches, %d events", patches, len(ts.events.Events))
	}
	pd.Message = "something else"
	ts.writePending(t.Context(), []plan.Pending{pd})
	if patches != 1 {
		t.Errorf("changed status: %d patches, want 1", patches)
	}
}

// TestWritePendingClearsNomination: a pod nominated in an earlier cycle and
// pending without a nomination now loses it (the same message included),
// as kube-scheduler clears a stale nominatedNodeName.
func TestWritePendingClearsNomination(t *testing.T) {
	pod := claimPod("ns", "p", t0)
	ts := newTestScheduler(t, placeAll{}, pod)
	pd := plan.Pending{Pod: newPod(pod, nil), Code: "capacity", Message: "no GPU with 40Gi free on a H100", NominatedNode: "n1"}
	ts.writePending(t.Context(), []plan.Pending{pd})
	nominated, err := ts.client.CoreV1().Pods("ns").Get(t.Context(), "p", metav1.GetOptions{})
	if err != nil || nominated.Status.NominatedNodeName != "n1" {
		t.Fatalf("nominatedNodeName = %q, %v; want n1", nominated.Status.NominatedNodeName, err)
	}
	pd.Pod, pd.NominatedNode = newPod(nominated, nil), ""
	ts.writePending(t.Context(), []plan.Pending{pd})
	got, err := ts.client.CoreV1().Pods("ns").Get(t.Context(), "p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.NominatedNodeName != "" {
		t.Errorf("nominatedNodeName = %q after a cycle without a nomination, want cleared", got.Status.NominatedNodeName)
	}
	if c := podScheduled(got); c == nil || c.Message != pd.Message {
		t.Errorf("condition = %+v, want the pending message kept", c)
	}
	// Once the informer shows it cleared: nothing more to write.
	patches := 0
	ts.client.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		patches++
		return false, nil, nil
	})
	pd.Pod = newPod(got, nil)
	ts.forgetStatus(pod.UID)
	ts.writePending(t.Context(), []plan.Pending{pd})
	if patches != 0 {
		t.Errorf("cleared nomination rewritten: %d patches", patches)
	}
}

func TestGangUnits(t *testing.T) {
	p := func(n string) *plan.Pod { return newPod(claimPod("ns", n, t0), nil) }
	units := plan.Units([]plan.Bind{{Pod: p("a"), Gang: "g"}, {Pod: p("b")}, {Pod: p("c"), Gang: "g"}, {Pod: p("d"), Gang: "h"}})
	var got []string
	for _, u := range units {
		var names []string
		for _, b := range u {
			names = append(names, b.Pod.Pod.Name)
		}
		got = append(got, strings.Join(names, "+"))
	}
	if strings.Join(got, ",") != "a+c,b,d" {
		t.Errorf("units = %v", got)
	}
}

func TestTruncate(t *testing.T) {
	if got := truncate("héllo wörld", 8); len(got) > 8 || !strings.HasSuffix(got, "...") {
		t.Errorf("truncate = %q", got)
	}
	if got := truncate("short", 8); got != "short" {
		t.Errorf("truncate = %q", got)
	}
}

func TestEvictions(t *testing.T) {
	victim := claimPod("ns", "victim", t0)
	victim.Spec.NodeName = "n1"
	gone := claimPod("ns", "gone", t0)
	gone.Spec.NodeName = "n1"
	gone.DeletionTimestamp = ptr.To(metav1.NewTime(t0))
	preemptor := claimPod("ns", "big", t0)
	ts := newTestScheduler(t, placeAll{}, victim, gone, preemptor)
	var evicted []string
	ts.cfg.Evict = func(_ context.Context, p *corev1.Pod) error {
		evicted = append(evicted, p.Name)
		return nil
	}
	big := newPod(preemptor, nil)
	p := plan.Plan{
		Evictions: []plan.Eviction{{Victim: newPod(victim, nil), For: big, Why: "priority"}, {Victim: newPod(gone, nil), For: big, Why: "priority"}},
		Pending:   []plan.Pending{{Pod: big, Code: "preempting", Message: "evicting 1 pod on n1", NominatedNode: "n1"}},
	}
	ts.execute(t.Context(), &snapshot{Snapshot: &plan.Snapshot{}}, p)
	if strings.Join(evicted, ",") != "victim" {
		t.Errorf("evicted %v, want the victim only (the other one is terminating)", evicted)
	}
	if v, w := metricValue(t, ts.m.victims), metricValue(t, ts.m.preempts); v != 1 || w != 1 {
		t.Errorf("victims %v preemptions %v, want 1 and 1", v, w)
	}
	got, err := ts.client.CoreV1().Pods("ns").Get(t.Context(), "big", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.NominatedNodeName != "n1" {
		t.Errorf("preemptor nominated to %q, want n1", got.Status.NominatedNodeName)
	}
}

func TestDefaultEvictUsesEvictionAPI(t *testing.T) {
	victim := claimPod("ns", "victim", t0)
	ts := newTestScheduler(t, placeAll{}, victim)
	var got *policyv1.Eviction
	ts.client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "eviction" {
			got = a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
			return true, got, nil
		}
		return false, nil, nil
	})
	if err := ts.evict(t.Context(), victim); err != nil {
		t.Fatal(err)
	}
	if got == nil || got.Name != "victim" || got.DeleteOptions.Preconditions.UID == nil || *got.DeleteOptions.Preconditions.UID != victim.UID {
		t.Errorf("eviction = %+v, want one for the victim with its UID as precondition", got)
	}
}

func TestQueueMetrics(t *testing.T) {
	m := newMetrics()
	m.setQuotas([]jobs.Queue{{Name: "team-a", Quota: jobs.Quota{Guaranteed: jobs.Resources{GPUMilli: 8000}, Limit: jobs.Resources{GPUMilli: 16000, CPUMilli: 64000}}}})
	m.setQueueUsage(map[string]jobs.Resources{"team-a": {GPUMilli: 2500, MIGSlices: 1}})
	m.setQueueUsage(nil) // a decider that does not track queues leaves the last values
	fams, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		if !strings.HasPrefix(f.GetName(), "gpud_scheduler_queue_") {
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
	want := map[string]float64{
		"gpud_scheduler_queue_guaranteed,team-a,gpu_milli": 8000,
		"gpud_scheduler_queue_limit,team-a,gpu_milli":      16000, "gpud_scheduler_queue_limit,team-a,cpu_milli": 64000,
		"gpud_scheduler_queue_used,team-a,gpu_milli": 2500, "gpud_scheduler_queue_used,team-a,mig_slices": 1,
		"gpud_scheduler_queue_used,team-a,cpu_milli": 0, "gpud_scheduler_queue_used,team-a,memory_mib": 0, "gpud_scheduler_queue_used,team-a,gpu_memory_mib": 0,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("queue metrics %v, want %v", got, want)
	}
}

// TestBindingLostResponse: a Binding that the API server carried out but
// whose response was lost counts as bound; its claims stay.
func TestBindingLostResponse(t *testing.T) {
	base := l40sNode(t)
	c := wholeClaim("ns", "c", "gpu.gpud.io")
	pod := claimPod("ns", "p", t0, "c")
	ts := newTestScheduler(t, placeAll{}, append(base, c, pod)...)
	ts.client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "binding" {
			return false, nil, nil
		}
		b := a.(k8stesting.CreateAction).GetObject().(*corev1.Binding)
		p, err := ts.client.Tracker().Get(corev1.SchemeGroupVersion.WithResource("pods"), b.Namespace, b.Name)
		if err != nil {
			return true, nil, err
		}
		bound := p.(*corev1.Pod).DeepCopy()
		bound.Spec.NodeName = b.Target.Name
		if err := ts.client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("pods"), bound, b.Namespace); err != nil {
			return true, nil, err
		}
		return true, nil, context.DeadlineExceeded
	})
	sn := ts.snapshotOf(viewInputs(t, base, []*resourceapi.ResourceClaim{c}, []*corev1.Pod{pod}))
	ts.execute(t.Context(), sn, ts.cfg.Decider.Decide(sn.Snapshot))
	if got := ts.claimFromAPI(t, "ns", "c"); got.Status.Allocation == nil || len(got.Status.ReservedFor) != 1 {
		t.Fatalf("claim of a bound pod rolled back: %+v", got.Status)
	}
	if n, ok := ts.assumed.boundNode(pod.UID); !ok || n != "n1" {
		t.Errorf("assumed bound = %q %v", n, ok)
	}
}

// TestWritePendingNumbersOnly: a reason that changes only in its counts is
// not rewritten every cycle (that spent the client budget binds need in
// make sched-bench) but is refreshed after refreshStatus.
func TestWritePendingNumbersOnly(t *testing.T) {
	pod := claimPod("ns", "p", t0)
	ts := newTestScheduler(t, placeAll{}, pod)
	now := t0
	ts.cfg.Now = func() time.Time { return now }
	pd := plan.Pending{Pod: newPod(pod, nil), Code: "capacity", Message: "no free GPU: 68 nodes short of free GPU"}
	ts.writePending(t.Context(), []plan.Pending{pd})
	<-ts.events.Events
	patches := 0
	ts.client.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		patches++
		return false, nil, nil
	})
	now = t0.Add(10 * time.Second)
	pd.Message = "no free GPU: 65 nodes short of free GPU"
	ts.writePending(t.Context(), []plan.Pending{pd})
	got := must(ts.client.CoreV1().Pods("ns").Get(t.Context(), "p", metav1.GetOptions{}))
	pd.Pod = newPod(got, nil)
	ts.forgetStatus(pod.UID)
	ts.writePending(t.Context(), []plan.Pending{pd})
	if patches != 0 {
		t.Fatalf("counts-only change 10s later: %d patches, want 0", patches)
	}
	now = t0.Add(refreshStatus + time.Second)
	ts.writePending(t.Context(), []plan.Pending{pd})
	if patches != 1 {
		t.Fatalf("counts-only change after %v: %d patches, want 1", refreshStatus, patches)
	}
	if got := messageShape("a 40Gi b 12 c7"); got != "a #Gi b # c#" {
		t.Errorf("messageShape = %q", got)
	}
}
