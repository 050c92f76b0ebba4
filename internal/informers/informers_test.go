package informers

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
