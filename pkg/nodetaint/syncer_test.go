package nodetaint

import (
	"testing"
	"time"

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
