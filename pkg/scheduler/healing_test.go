package scheduler

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gpud/gpud/pkg/gputel"
	"github.com/gpud/gpud/pkg/scheduler/heal"
	"github.com/gpud/gpud/pkg/scheduler/plan"
	"github.com/gpud/gpud/pkg/scheduler/view"
)

// healCluster is node n1 (8 H100s) running a gang of two 4-GPU pods
// (a: gpu-0..3, b: gpu-4..7) and the UUID of each device.
type healCluster struct {
	slices []*resourceapi.ResourceSlice
	claims []*resourceapi.ResourceClaim
	pods   []*corev1.Pod
	uuid   map[string]string
	// groups are the PodGroups (nil: ns/g is unknown).
	groups map[string]*plan.Group
	// healed is what the last healOnce set for the decider.
	healed map[string][]string
}

func newHealCluster(t *testing.T) *healCluster {
	t.Helper()
	hc := &healCluster{slices: nodeSlices(t, "dgx-h100", "n1"), uuid: map[string]string{}}
	for _, s := range hc.slices {
		for _, d := range s.Spec.Devices {
			if a, ok := d.Attributes["uuid"]; ok && a.StringValue != nil {
				hc.uuid[d.Name] = *a.StringValue
			}
		}
	}
	for i, name := range []string{"a", "b"} {
		pod := claimPod("ns", name, t0, name)
		pod.Spec.NodeName = "n1"
		pod.Labels = map[string]string{plan.PodGroupLabel: "g"}
		c := wholeClaim("ns", name, "gpu.gpud.io")
		c.Status.Allocation = &resourceapi.AllocationResult{}
		for g := range 4 {
			c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{
				Request: "gpu", Driver: view.DriverName, Pool: "n1", Device: fmt.Sprintf("gpu-%d", 4*i+g)})
		}
		c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: name, UID: pod.UID}}
		hc.pods, hc.claims = append(hc.pods, pod), append(hc.claims, c)
	}
	return hc
}

// taint puts a taint on device name of n1's slices.
func (hc *healCluster) taint(name string, t resourceapi.DeviceTaint) {
	for _, s := range hc.slices {
		for i := range s.Spec.Devices {
			if s.Spec.Devices[i].Name == name {
				s.Spec.Devices[i].Taints = append(s.Spec.Devices[i].Taints, t)
			}
		}
	}
}

// healOnce runs one healing on hc with tel (device name → reason) as the
// stream's unhealthy devices; it returns the pods evicted and deleted
// and the events.
func healOnce(t *testing.T, ts *testScheduler, hc *healCluster, tel map[string]string) (evicted, deleted, events []string) {
	t.Helper()
	ts.cfg.Evict = func(_ context.Context, p *corev1.Pod) error {
		evicted = append(evicted, p.Name)
		return nil
	}
	ts.client.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		deleted = append(deleted, a.(k8stesting.DeleteAction).GetName())
		return true, nil, nil
	})
	sn := ts.snapshotOf(inputs{pods: hc.pods, claims: hc.claims, slices: hc.slices, nodes: []*corev1.Node{kubeNode("n1")}, groups: hc.groups})
	if len(tel) > 0 {
		nt := &gputel.Node{Devices: map[string]gputel.Device{}}
		for dev, why := range tel {
			nt.Devices[hc.uuid[dev]] = gputel.Device{Unhealthy: true, HealthReason: why}
		}
		sn.Telemetry = map[string]*gputel.Node{"n1": nt}
	}
	ts.heal(t.Context(), sn, hc.slices, t0)
	hc.healed = sn.Healed
	for {
		select {
		case e := <-ts.events.Events:
			events = append(events, e)
		default:
			slices.Sort(evicted)
			return evicted, deleted, events
		}
	}
}

func TestHealEvictsGangOfFailedGPU(t *testing.T) {
	hc := newHealCluster(t)
	ts := newTestScheduler(t, placeAll{})
	evicted, _, events := healOnce(t, ts, hc, map[string]string{"gpu-2": "Xid 79"})
	if strings.Join(evicted, ",") != "a,b" {
		t.Fatalf("evicted %v, want the whole gang a,b", evicted)
	}
	want := fmt.Sprintf("Warning GPUFailed Evicted: GPU %s on node n1 failed (Xid 79), reported by the telemetry stream", hc.uuid["gpu-2"])
	if !slices.Contains(events, want) {
		t.Errorf("events %q, want %q", events, want)
	}
	mate := fmt.Sprintf("Warning GPUFailed Evicted: gang ns/g member ns/a lost GPU %s on node n1 (Xid 79), reported by the telemetry stream", hc.uuid["gpu-2"])
	if !slices.Contains(events, mate) {
		t.Errorf("events %q, want %q", events, mate)
	}
	if v := metricValue(t, ts.healing.m.removals.WithLabelValues("device", "evict")); v != 1 {
		t.Errorf("gpud_heal_evictions_total{reason=device,action=evict} = %v, want 1", v)
	}
	if v := metricValue(t, ts.healing.m.removals.WithLabelValues("gang", "evict")); v != 1 {
		t.Errorf("gpud_heal_evictions_total{reason=gang,action=evict} = %v, want 1", v)
	}
	// A cycle before the informer shows them terminating: not again.
	if again, _, events := healOnce(t, ts, hc, map[string]string{"gpu-2": "Xid 79"}); len(again)+len(events) > 0 {
		t.Errorf("evicted %v again, events %q, before the pods showed terminating", again, events)
	}
}

// An elastic gang (2 running, minMember 1) loses only the member on the
// failed GPU, says so, and the decider is told where the gang ran.
func TestHealElasticGangLosesOnlyFailedMember(t *testing.T) {
	hc := newHealCluster(t)
	hc.groups = map[string]*plan.Group{"ns/g": {Namespace: "ns", Name: "g", MinMember: 1}}
	ts := newTestScheduler(t, placeAll{})
	evicted, _, events := healOnce(t, ts, hc, map[string]string{"gpu-2": "Xid 79"})
	if strings.Join(evicted, ",") != "a" {
		t.Fatalf("evicted %v, want a alone", evicted)
	}
	want := fmt.Sprintf("Warning GPUFailed Evicted: GPU %s on node n1 failed (Xid 79), reported by the telemetry stream; gang ns/g keeps its 1 other member running", hc.uuid["gpu-2"])
	if !slices.Contains(events, want) {
		t.Errorf("events %q, want %q", events, want)
	}
	if got := hc.healed["ns/g"]; strings.Join(got, ",") != "n1" {
		t.Errorf("snapshot Healed %v, want ns/g on n1", hc.healed)
	}
}

func TestHealTaints(t *testing.T) {
	noExec := resourceapi.DeviceTaint{Key: "gpu.gpud.io/unhealthy", Value: "Xid-79", Effect: resourceapi.DeviceTaintEffectNoExecute}
	tests := []struct {
		name  string
		taint resourceapi.DeviceTaint
		// tolerate: claim b's results tolerate every taint.
		tolerate bool
		want     string
		event    string
	}{
		{name: "NoExecute evicts", taint: noExec, want: "a,b", event: "on node n1 failed (Xid 79), reported by a NoExecute device taint"},
		{name: "NoSchedule keeps", taint: resourceapi.DeviceTaint{Key: "gpu.gpud.io/unhealthy", Value: "Xid-63", Effect: resourceapi.DeviceTaintEffectNoSchedule}},
		{name: "tolerated", taint: noExec, tolerate: true},
		{name: "an admin's taint", taint: resourceapi.DeviceTaint{Key: "example.com/maintenance", Effect: resourceapi.DeviceTaintEffectNoExecute},
			want: "a,b", event: "failed (taint example.com/maintenance (NoExecute))"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hc := newHealCluster(t)
			hc.taint("gpu-5", tc.taint)
			if tc.tolerate {
				for i := range hc.claims[1].Status.Allocation.Devices.Results {
					hc.claims[1].Status.Allocation.Devices.Results[i].Tolerations = []resourceapi.DeviceToleration{{Operator: resourceapi.DeviceTolerationOpExists}}
				}
			}
			evicted, _, events := healOnce(t, newTestScheduler(t, placeAll{}), hc, nil)
			if strings.Join(evicted, ",") != tc.want {
				t.Fatalf("evicted %v, want %q", evicted, tc.want)
			}
			if tc.event != "" && !slices.ContainsFunc(events, func(e string) bool { return strings.Contains(e, tc.event) }) {
				t.Errorf("events %q, want one with %q", events, tc.event)
			}
		})
	}
}

func TestHealAnnotations(t *testing.T) {
	t.Run("keep", func(t *testing.T) {
		hc := newHealCluster(t)
		hc.pods[1].Annotations = map[string]string{heal.Annotation: "keep"}
		evicted, deleted, events := healOnce(t, newTestScheduler(t, placeAll{}), hc, map[string]string{"gpu-2": "Xid 79"})
		if len(evicted)+len(deleted) > 0 {
			t.Fatalf("evicted %v deleted %v, want nothing: a member is marked keep", evicted, deleted)
		}
		if !slices.ContainsFunc(events, func(e string) bool { return strings.HasPrefix(e, "Warning GPUFailedKept") }) {
			t.Errorf("events %q, want GPUFailedKept", events)
		}
	})
	t.Run("delete", func(t *testing.T) {
		hc := newHealCluster(t)
		hc.pods[0].Annotations = map[string]string{heal.Annotation: "delete"}
		evicted, deleted, _ := healOnce(t, newTestScheduler(t, placeAll{}), hc, map[string]string{"gpu-2": "Xid 79"})
		if strings.Join(evicted, ",") != "b" || strings.Join(deleted, ",") != "a" {
			t.Fatalf("evicted %v deleted %v, want b evicted and a deleted", evicted, deleted)
		}
	})
	t.Run("bad value", func(t *testing.T) {
		hc := newHealCluster(t)
		hc.pods[0].Annotations = map[string]string{heal.Annotation: "never"}
		ts := newTestScheduler(t, placeAll{})
		evicted, _, events := healOnce(t, ts, hc, map[string]string{"gpu-2": "Xid 79"})
		if strings.Join(evicted, ",") != "a,b" {
			t.Fatalf("evicted %v, want a,b (the default applies)", evicted)
		}
		want := `Warning InvalidAnnotation annotation gpud.io/on-gpu-failure "never" is not one of evict, delete, keep; evict applies until it is fixed`
		if !slices.Contains(events, want) {
			t.Errorf("events %q, want %q", events, want)
		}
		// Told once, and before any GPU fails.
		if _, _, again := healOnce(t, ts, hc, nil); slices.Contains(again, want) {
			t.Errorf("told again: %q", again)
		}
		hc.pods[0].Annotations[heal.Annotation] = "evcit"
		_, _, events = healOnce(t, newTestScheduler(t, placeAll{}), hc, nil)
		if !slices.ContainsFunc(events, func(e string) bool { return strings.Contains(e, `"evcit"`) }) {
			t.Errorf("events %q with no GPU failed, want the bad annotation told", events)
		}
	})
}

// A GPU the stream reports unhealthy for an error workloads may survive
// (a contained ECC error, a graphics exception) keeps new pods off it but
// leaves running ones alone, as the agent's NoSchedule taint does; a lost
// GPU is healed like Xid 79.
func TestHealOnlyFatalTelemetry(t *testing.T) {
	for _, why := range []string{"xid 94: contained ECC error", "xid 13: graphics engine exception"} {
		hc := newHealCluster(t)
		ts := newTestScheduler(t, placeAll{})
		if evicted, _, events := healOnce(t, ts, hc, map[string]string{"gpu-2": why}); len(evicted)+len(events) > 0 {
			t.Errorf("%s: evicted %v, events %q; want the pods left running", why, evicted, events)
		}
	}
	hc := newHealCluster(t)
	ts := newTestScheduler(t, placeAll{})
	if evicted, _, _ := healOnce(t, ts, hc, map[string]string{"gpu-2": "gpu lost"}); strings.Join(evicted, ",") != "a,b" {
		t.Errorf("gpu lost: evicted %v, want the gang a,b", evicted)
	}
}

func TestHealOff(t *testing.T) {
	hc := newHealCluster(t)
	ts := newTestScheduler(t, placeAll{})
	s, err := New(Config{Client: ts.client, Decider: placeAll{}, HealOff: true})
	if err != nil {
		t.Fatal(err)
	}
	ts.Scheduler = s
	s.recorder = ts.events
	if evicted, _, _ := healOnce(t, ts, hc, map[string]string{"gpu-2": "Xid 79"}); len(evicted) > 0 {
		t.Fatalf("evicted %v with healing off", evicted)
	}
	if _, err := New(Config{Client: ts.client, Decider: placeAll{}, Heal: heal.Config{Default: "keep"}}); err == nil {
		t.Error("New accepted default action keep")
	}
}

// A gang evicted by one healing: while its replacements land on failed
// GPUs again, the next healing waits (backoff) and the pods are told.
func TestHealBackoffTold(t *testing.T) {
	hc := newHealCluster(t)
	ts := newTestScheduler(t, placeAll{})
	if ev, _, _ := healOnce(t, ts, hc, map[string]string{"gpu-2": "Xid 79"}); len(ev) != 2 {
		t.Fatalf("first healing evicted %v", ev)
	}
	// The replacements (new UIDs) on the same failed GPU.
	for _, p := range hc.pods {
		p.UID += "-2"
		hc.claims[slices.Index(hc.pods, p)].Status.ReservedFor[0].UID = p.UID
	}
	ev, _, events := healOnce(t, ts, hc, map[string]string{"gpu-2": "Xid 79"})
	if len(ev) != 0 {
		t.Fatalf("evicted %v during the backoff", ev)
	}
	if !slices.ContainsFunc(events, func(e string) bool { return strings.HasPrefix(e, "Warning GPUFailedBackoff") }) {
		t.Errorf("events %q, want GPUFailedBackoff", events)
	}
	if v := metricValue(t, ts.healing.m.backoffs); v != 1 {
		t.Errorf("gpud_heal_backoffs_total %v, want 1", v)
	}
}
