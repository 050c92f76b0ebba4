package nodetaint

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpud/gpud/pkg/gpu"
)

// fakeInventory is an InventorySource the test sets.
type fakeInventory struct{ inv gpu.Inventory }

func (f *fakeInventory) Inventory() (gpu.Inventory, bool)  { return f.inv, true }
func (f *fakeInventory) InventoryChanged() <-chan struct{} { return make(chan struct{}) }

func (f *fakeInventory) set(bad ...int) {
	f.inv = gpu.Inventory{}
	for i := range 4 {
		g := gpu.GPU{UUID: "GPU-" + string(rune('0'+i)), Health: gpu.Healthy}
		for _, b := range bad {
			if b == i {
				g.Health, g.HealthReason = gpu.Unhealthy, "Xid 48"
			}
		}
		f.inv.GPUs = append(f.inv.GPUs, g)
	}
}

func TestSyncerTaintsAndClears(t *testing.T) {
	other := corev1.Taint{Key: "example.com/maintenance", Effect: corev1.TaintEffectNoSchedule}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", ResourceVersion: "1"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{other}}}
	client := fake.NewClientset(node)
	inv := &fakeInventory{}
	now := t0
	var told []Taint
	s, err := NewSyncer(SyncerConfig{Client: client, NodeName: "n1", Inventory: inv, Now: func() time.Time { return now },
		Tracker: Config{MaxGPUs: 2, ClearAfter: 10 * time.Minute}, OnChange: func(t Taint) { told = append(told, t) }})
	if err != nil {
		t.Fatal(err)
	}
	read := func() *corev1.Node {
		t.Helper()
		n, err := client.CoreV1().Nodes().Get(t.Context(), "n1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	sync := func(after time.Duration, bad ...int) {
		t.Helper()
		now = t0.Add(after)
		inv.set(bad...)
		if _, err := s.Sync(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	sync(0, 1)
	if n := read(); len(n.Spec.Taints) != 1 {
		t.Fatalf("taints %v after one GPU failed, want the other taint alone", n.Spec.Taints)
	}
	sync(time.Minute, 1, 3)
	n := read()
	if len(n.Spec.Taints) != 2 || n.Spec.Taints[0] != other || n.Spec.Taints[1].Key != TaintKey ||
		n.Spec.Taints[1].Value != ValueMultiple || n.Spec.Taints[1].Effect != corev1.TaintEffectNoSchedule {
		t.Fatalf("taints %+v, want the other one kept and %s=%s:NoSchedule", n.Spec.Taints, TaintKey, ValueMultiple)
	}
	if got, want := n.Annotations[ReasonAnnotation], "2 GPUs failed within 24h0m0s: GPU-1 (Xid 48), GPU-3 (Xid 48)"; got != want {
		t.Errorf("reason annotation %q, want %q", got, want)
	}
	if len(told) != 1 || told[0].Value != ValueMultiple || told[0].Reason != n.Annotations[ReasonAnnotation] {
		t.Errorf("OnChange told %+v, want the one taint written with its reason", told)
	}
	// An agent restart keeps the taint until the GPUs stay healthy.
	s, err = NewSyncer(SyncerConfig{Client: client, NodeName: "n1", Inventory: inv, Now: func() time.Time { return now },
		Tracker: Config{MaxGPUs: 2, ClearAfter: 10 * time.Minute}, OnChange: func(t Taint) { told = append(told, t) }})
	if err != nil {
		t.Fatal(err)
	}
	sync(2 * time.Minute)
	if n := read(); len(n.Spec.Taints) != 2 {
		t.Fatalf("taints %v after a restart, want the taint kept", n.Spec.Taints)
	}
	sync(12 * time.Minute)
	n = read()
	if len(n.Spec.Taints) != 1 || n.Spec.Taints[0] != other {
		t.Fatalf("taints %+v after 10m healthy, want the other one alone", n.Spec.Taints)
	}
	if _, ok := n.Annotations[ReasonAnnotation]; ok {
		t.Errorf("reason annotation left: %v", n.Annotations)
	}
	// The restarted syncer wrote once, the removal.
	if len(told) != 2 || told[1] != (Taint{}) {
		t.Errorf("OnChange told %+v, want the taint then its removal", told)
	}
}

// With NoExecuteAfter, a node still failing gets the NoExecute taint of
// the same key and value beside the NoSchedule one (the other taint kept,
// the metric and OnChange told); both go together once the GPUs stay
// healthy.
func TestSyncerNoExecute(t *testing.T) {
	other := corev1.Taint{Key: "example.com/maintenance", Effect: corev1.TaintEffectNoSchedule}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", ResourceVersion: "1"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{other}}}
	client := fake.NewClientset(node)
	inv := &fakeInventory{}
	now := t0
	var told []Taint
	reg := prometheus.NewRegistry()
	s, err := NewSyncer(SyncerConfig{Client: client, NodeName: "n1", Inventory: inv, Now: func() time.Time { return now }, Metrics: reg,
		Tracker: Config{MaxGPUs: 2, ClearAfter: 10 * time.Minute, NoExecuteAfter: 5 * time.Minute}, OnChange: func(t Taint) { told = append(told, t) }})
	if err != nil {
		t.Fatal(err)
	}
	sync := func(after time.Duration, bad ...int) []corev1.Taint {
		t.Helper()
		now = t0.Add(after)
		inv.set(bad...)
		if _, err := s.Sync(t.Context()); err != nil {
			t.Fatal(err)
		}
		n, err := client.CoreV1().Nodes().Get(t.Context(), "n1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n.Spec.Taints
	}
	gauge := func(effect corev1.TaintEffect) float64 {
		return testutil.ToFloat64(s.tainted.WithLabelValues(string(effect)))
	}
	if got := sync(0, 1, 3); len(got) != 2 || got[1].Effect != corev1.TaintEffectNoSchedule || gauge(corev1.TaintEffectNoSchedule) != 1 || gauge(corev1.TaintEffectNoExecute) != 0 {
		t.Fatalf("taints %+v, NoSchedule gauge %v: want the other taint and ours NoSchedule", got, gauge(corev1.TaintEffectNoSchedule))
	}
	if got := sync(4*time.Minute, 1, 3); len(got) != 2 {
		t.Fatalf("taints %+v before NoExecuteAfter, want NoSchedule alone", got)
	}
	got := sync(5*time.Minute, 1, 3)
	if len(got) != 3 || got[0] != other || got[2].Key != TaintKey || got[2].Effect != corev1.TaintEffectNoExecute || got[2].Value != got[1].Value || got[1].Effect != corev1.TaintEffectNoSchedule {
		t.Fatalf("taints %+v after 5m still failing, want the other one, ours NoSchedule and ours NoExecute of the same value", got)
	}
	if gauge(corev1.TaintEffectNoExecute) != 1 || len(told) != 2 || !told[1].NoExecute {
		t.Fatalf("NoExecute gauge %v, OnChange told %+v: want 1 and the NoExecute step", gauge(corev1.TaintEffectNoExecute), told)
	}
	sync(6*time.Minute, 1)
	sync(7 * time.Minute)
	if got := sync(15 * time.Minute); len(got) != 3 {
		t.Fatalf("taints %+v 9m healthy, want both kept until 10m", got)
	}
	if got := sync(16 * time.Minute); len(got) != 1 || got[0] != other || gauge(corev1.TaintEffectNoSchedule) != 0 || gauge(corev1.TaintEffectNoExecute) != 0 {
		t.Fatalf("taints %+v after 10m healthy, want the other one alone and the gauges 0", got)
	}
}
