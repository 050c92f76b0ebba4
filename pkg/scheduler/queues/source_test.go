package queues

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	discoveryfake "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/pkg/allocator/jobs"
)

func unstructuredQueue(t *testing.T, q *Queue) *unstructured.Unstructured {
	t.Helper()
	q.APIVersion, q.Kind = GroupVersion.String(), Kind
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(q)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: obj}
}

// A Source follows Queue and Namespace changes live and, once it hears
// from the leader's decisions, writes each Queue's status.
func TestSource(t *testing.T) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}
	client := fake.NewClientset(ns)
	a := queue("team-a", "", func(s *Spec) { s.Limit.GPUMilli = 1000; s.Namespaces = []string{"team-a"} })
	bad := queue("bad", "nowhere")
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{GVR: "QueueList"},
		unstructuredQueue(t, a), unstructuredQueue(t, bad))
	src, err := NewSource(Config{Dynamic: dyn, Client: client, StatusInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var changes atomic.Int32
	src.OnChange(func() { changes.Add(1) })
	testwait.Run(t, "source", src.Run)
	testwait.For(t, 30*time.Second, "informers synced", src.Synced)

	qs, _, of := src.Set()
	if len(qs) != 1 || qs[0].Quota.Limit.GPUMilli != 1000 {
		t.Fatalf("queues %+v, want team-a with its limit", qs)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "team-a", Labels: map[string]string{"gpud.io/queue": "other"}}}
	if _, err := of(pod); !errors.Is(err, ErrRefused) {
		t.Fatalf("a team-a pod naming another queue: %v, want ErrRefused", err)
	}

	// No status before the leader decides; then usage, pending and conditions.
	if got := getQueue(t, dyn, "team-a"); len(got.Status.Conditions) != 0 {
		t.Fatalf("status written before any decision: %+v", got.Status)
	}
	src.Observe(map[string]jobs.Resources{"team-a": {GPUMilli: 500}}, map[string]int{"team-a": 2})
	testwait.ForErr(t, 30*time.Second, "team-a's status", func() error {
		st := getQueue(t, dyn, "team-a").Status
		if st.Usage.GPUMilli != 500 || st.PendingPods != 2 || !meta.IsStatusConditionTrue(st.Conditions, ConditionAccepted) {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	testwait.ForErr(t, 30*time.Second, "bad's Accepted=False", func() error {
		c := meta.FindStatusCondition(getQueue(t, dyn, "bad").Status.Conditions, ConditionAccepted)
		if c == nil || c.Status != metav1.ConditionFalse || c.Message != `spec.parent: queue "nowhere" is not defined (no Queue object or --queues entry of that name)` {
			return fmt.Errorf("Accepted %+v", c)
		}
		return nil
	})

	// A limit changed on the API is in the next Set.
	before := changes.Load()
	cur := getQueue(t, dyn, "team-a")
	cur.Spec.Limit.GPUMilli = 3000
	if _, err := dyn.Resource(GVR).Update(t.Context(), unstructuredQueue(t, cur), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 30*time.Second, "the new limit in Set", func() bool {
		qs, _, _ := src.Set()
		return len(qs) == 1 && qs[0].Quota.Limit.GPUMilli == 3000
	})
	if changes.Load() == before {
		t.Fatal("OnChange not called on a Queue update")
	}
}

func getQueue(t *testing.T, dyn *dynamicfake.FakeDynamicClient, name string) *Queue {
	t.Helper()
	u, err := dyn.Resource(GVR).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q, err := FromUnstructured(u)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// toggledDiscovery serves the Queue CRD once served is set.
type toggledDiscovery struct {
	*discoveryfake.FakeDiscovery
	served atomic.Bool
}

func (d *toggledDiscovery) ServerResourcesForGroupVersion(gv string) (*metav1.APIResourceList, error) {
	if gv != GroupVersion.String() || !d.served.Load() {
		return nil, apierrors.NewNotFound(schema.GroupResource{}, gv)
	}
	return &metav1.APIResourceList{GroupVersion: gv, APIResources: []metav1.APIResource{{Name: Resource, Kind: Kind}}}, nil
}

// A Source made before the Queue CRD is installed serves the --queues
// file (each pod's queue its label) and, once discovery serves the CRD,
// the Queue objects, without a restart.
func TestSourceCRDInstalledLater(t *testing.T) {
	client := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}})
	a := queue("team-a", "", func(s *Spec) { s.Limit.GPUMilli = 1000; s.Namespaces = []string{"team-a"} })
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{GVR: "QueueList"},
		unstructuredQueue(t, a))
	disco := &toggledDiscovery{FakeDiscovery: &discoveryfake.FakeDiscovery{Fake: &k8stesting.Fake{}}}
	file := []jobs.Queue{{Name: "batch"}}
	src, err := NewSource(Config{Dynamic: dyn, Client: client, File: file, Discovery: disco, RecheckInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var changes atomic.Int32
	src.OnChange(func() { changes.Add(1) })
	testwait.Run(t, "source", src.Run)
	if src.Served() || !src.Synced() {
		t.Fatalf("served %v synced %v before the CRD: want false, true (nothing to wait for)", src.Served(), src.Synced())
	}
	qs, _, of := src.Set()
	if len(qs) != 1 || qs[0].Name != "batch" || of != nil {
		t.Fatalf("before the CRD: queues %+v, queueOf set %v; want the file's and the pods' labels", qs, of != nil)
	}

	disco.served.Store(true)
	testwait.ForErr(t, 30*time.Second, "the Queue objects' tree", func() error {
		qs, _, of := src.Set()
		if len(qs) != 2 || of == nil {
			return fmt.Errorf("queues %+v", qs)
		}
		return nil
	})
	_, _, of = src.Set()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "team-a"}}
	if q, err := of(pod); err != nil || q != "team-a" {
		t.Fatalf("a team-a pod: queue %q, %v; want team-a (its namespace's Queue)", q, err)
	}
	testwait.For(t, 30*time.Second, "a change reported", func() bool { return changes.Load() > 0 })
}

// A Queue CRD deleted while the Source runs sends it back to the
// --queues file (each pod's queue its label), logged and counted; once
// the CRD is installed again, the Queue objects serve again.
func TestSourceCRDDeleted(t *testing.T) {
	client := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}})
	a := queue("team-a", "", func(s *Spec) { s.Limit.GPUMilli = 1000; s.Namespaces = []string{"team-a"} })
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{GVR: "QueueList"},
		unstructuredQueue(t, a))
	disco := &toggledDiscovery{FakeDiscovery: &discoveryfake.FakeDiscovery{Fake: &k8stesting.Fake{}}}
	disco.served.Store(true)
	file := []jobs.Queue{{Name: "batch"}}
	src, err := NewSource(Config{Dynamic: dyn, Client: client, File: file, Discovery: disco, RecheckInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	testwait.Run(t, "source", src.Run)
	objects := func() error {
		qs, _, of := src.Set()
		if len(qs) != 2 || of == nil {
			return fmt.Errorf("queues %+v, queueOf set %v", qs, of != nil)
		}
		return nil
	}
	testwait.ForErr(t, 30*time.Second, "the Queue objects' tree", objects)
	served, removed := src.Collectors()[0], src.Collectors()[1]
	if v := testutil.ToFloat64(served); v != 1 {
		t.Fatalf("gpud_scheduler_queue_crd_served %v while served, want 1", v)
	}

	disco.served.Store(false) // the CRD is deleted
	testwait.ForErr(t, 30*time.Second, "the --queues file alone", func() error {
		qs, _, of := src.Set()
		if len(qs) != 1 || qs[0].Name != "batch" || of != nil {
			return fmt.Errorf("queues %+v, queueOf set %v", qs, of != nil)
		}
		return nil
	})
	if s, r := testutil.ToFloat64(served), testutil.ToFloat64(removed); s != 0 || r != 1 {
		t.Errorf("after the CRD is deleted: served %v, removed %v; want 0 and 1", s, r)
	}
	if src.Served() {
		t.Error("Served() true after the CRD is deleted")
	}

	disco.served.Store(true) // installed again
	testwait.ForErr(t, 30*time.Second, "the Queue objects' tree again", objects)
	if r := testutil.ToFloat64(removed); r != 1 {
		t.Errorf("removed %v after the CRD is back, want still 1", r)
	}
}
