package agwatch

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	discoveryfake "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
)

// BenchmarkGrouper is one cycle's grouping of 10,000 pods: a JobSet of
// 100 Jobs of 100 pods each (pods of one Job resolve once per cycle).
func BenchmarkGrouper(b *testing.B) {
	const jobs, perJob = 100, 100
	objs := []runtime.Object{obj("jobset.x-k8s.io/v1alpha2", "JobSet", "js", map[string]any{"replicatedJobs": []any{
		map[string]any{"name": "w", "replicas": int64(jobs), "template": map[string]any{"spec": map[string]any{"parallelism": int64(perJob)}}}}}, nil)}
	var pods []*corev1.Pod
	for j := range jobs {
		name := fmt.Sprintf("js-w-%d", j)
		objs = append(objs, obj("batch/v1", "Job", name, map[string]any{"parallelism": int64(perJob)}, ctrl("jobset.x-k8s.io/v1alpha2", "JobSet", "js")))
		for i := range perJob {
			pods = append(pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", name, i), Namespace: "ml",
				OwnerReferences: []metav1.OwnerReference{*ctrl("batch/v1", "Job", name)}}})
		}
	}
	lists := []*metav1.APIResourceList{
		{GroupVersion: "batch/v1", APIResources: []metav1.APIResource{{Name: "jobs"}}},
		{GroupVersion: "jobset.x-k8s.io/v1alpha2", APIResources: []metav1.APIResource{{Name: "jobsets"}}},
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		{Group: "batch", Version: "v1", Resource: "jobs"}:                    "JobList",
		{Group: "jobset.x-k8s.io", Version: "v1alpha2", Resource: "jobsets"}: "JobSetList",
	}, objs...)
	s, err := NewSource(&discoveryfake.FakeDiscovery{Fake: &clienttesting.Fake{Resources: lists}},
		func() (dynamic.Interface, error) { return dyn, nil }, nil)
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = s.Run(b.Context()) }()
	if !cache.WaitForCacheSync(b.Context().Done(), s.Synced) {
		b.Fatal("not synced")
	}
	b.ReportAllocs()
	for b.Loop() {
		group := s.Grouper()
		for _, p := range pods {
			if key, _ := group(p); key != "ml/jobset:js" {
				b.Fatalf("pod %s in %q", p.Name, key)
			}
		}
	}
}
