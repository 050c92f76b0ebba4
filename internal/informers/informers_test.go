package informers

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

// TestRunSyncsAll: Synced is false until every informer has listed, true
// after Run started them, and Run returns once ctx ends.
func TestRunSyncsAll(t *testing.T) {
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}})
	f := informers.NewSharedInformerFactory(client, 0)
	infs := []cache.SharedIndexInformer{f.Core().V1().Nodes().Informer(), f.Core().V1().Pods().Informer()}
	if Synced(infs...) {
		t.Fatal("synced before running")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, infs...) }()
	deadline := time.Now().Add(10 * time.Second)
	for !Synced(infs...) {
		if time.Now().After(deadline) {
			t.Fatal("informers never synced")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := len(infs[0].GetStore().List()); got != 1 {
		t.Fatalf("node store holds %d objects, want 1", got)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after ctx ended")
	}
	if !Synced() {
		t.Fatal("an empty set is synced")
	}
}

// TestServed: a resource the server lists in its group version is served;
// another resource of that group version, or a group version the server
// does not serve at all, is not, and neither is an error.
func TestServed(t *testing.T) {
	client := fake.NewClientset()
	disco := client.Discovery().(*fakediscovery.FakeDiscovery)
	disco.Resources = []*metav1.APIResourceList{{GroupVersion: "example.com/v1", APIResources: []metav1.APIResource{{Name: "widgets"}}}}
	for _, c := range []struct {
		gv, resource string
		want         bool
	}{
		{"example.com/v1", "widgets", true},
		{"example.com/v1", "gadgets", false},
		{"example.com/v2", "widgets", false},
	} {
		got, err := Served(disco, c.gv, c.resource)
		if err != nil || got != c.want {
			t.Errorf("Served(%s, %s) = %v, %v; want %v, nil", c.gv, c.resource, got, err, c.want)
		}
	}
	if _, err := Served(nil, "example.com/v1", "widgets"); err == nil {
		t.Error("Served with no discovery client: no error")
	}
}
