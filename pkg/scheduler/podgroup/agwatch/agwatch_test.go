package agwatch

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	discoveryfake "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/gpud/gpud/pkg/scheduler/plan"
)

func obj(apiVersion, kind, name string, spec map[string]any, owner *metav1.OwnerReference) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": kind,
		"metadata": map[string]any{"name": name, "namespace": "ml", "uid": "uid-" + name}, "spec": spec}}
	if owner != nil {
		u.SetOwnerReferences([]metav1.OwnerReference{*owner})
	}
	return u
}

func ctrl(apiVersion, kind, name string) *metav1.OwnerReference {
	yes := true
	return &metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: types.UID("uid-" + name), Controller: &yes}
}

// TestSource: only the workload APIs discovery lists are watched (MPIJob
// at the first served version), objects are pruned as they arrive, and
// the grouper maps pods through their owner chain.
func TestSource(t *testing.T) {
	podTemplate := map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": "x"}}}}
	js := obj("jobset.x-k8s.io/v1alpha2", "JobSet", "js", map[string]any{"replicatedJobs": []any{
		map[string]any{"name": "w", "replicas": int64(2), "template": map[string]any{"spec": map[string]any{
			"parallelism": int64(3), "template": podTemplate}}}}}, nil)
	job := obj("batch/v1", "Job", "js-w-0", map[string]any{"parallelism": int64(3), "completionMode": "Indexed", "template": podTemplate},
		ctrl("jobset.x-k8s.io/v1alpha2", "JobSet", "js"))
	mpi := obj("kubeflow.org/v2beta1", "MPIJob", "mpi", map[string]any{"mpiReplicaSpecs": map[string]any{
		"Launcher": map[string]any{"replicas": int64(1)}, "Worker": map[string]any{"replicas": int64(2)}}}, nil)
	mpi.SetAnnotations(map[string]string{"gpud.io/gang-topology": "zone", "gpud.io/gang-topology-mode": "preferred"})
	ray := obj("ray.io/v1", "RayCluster", "rc", map[string]any{"workerGroupSpecs": []any{map[string]any{"replicas": int64(4)}}}, nil)
	badTopo := obj("batch/v1", "Job", "bad", map[string]any{"parallelism": int64(2), "completionMode": "Indexed"}, nil)
	badTopo.SetAnnotations(map[string]string{"gpud.io/gang-topology": "rack", "gpud.io/gang-topology-mode": "hard"})

	lists := []*metav1.APIResourceList{
		{GroupVersion: "batch/v1", APIResources: []metav1.APIResource{{Name: "jobs", Kind: "Job"}, {Name: "cronjobs"}}},
		{GroupVersion: "jobset.x-k8s.io/v1alpha2", APIResources: []metav1.APIResource{{Name: "jobsets", Kind: "JobSet"}}},
		{GroupVersion: "kubeflow.org/v2beta1", APIResources: []metav1.APIResource{{Name: "mpijobs", Kind: "MPIJob"}}},
	}
	disco := &discoveryfake.FakeDiscovery{Fake: &clienttesting.Fake{Resources: lists}}
	gvrs := map[schema.GroupVersionResource]string{
		{Group: "batch", Version: "v1", Resource: "jobs"}:                    "JobList",
		{Group: "jobset.x-k8s.io", Version: "v1alpha2", Resource: "jobsets"}: "JobSetList",
		{Group: "kubeflow.org", Version: "v2beta1", Resource: "mpijobs"}:     "MPIJobList",
		{Group: "ray.io", Version: "v1", Resource: "rayclusters"}:            "RayClusterList",
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), gvrs, js, job, mpi, ray, badTopo)
	s, err := NewSource(disco, func() (dynamic.Interface, error) { return dyn, nil }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Served(), "jobs.batch/v1,jobsets.jobset.x-k8s.io/v1alpha2,mpijobs.kubeflow.org/v2beta1"; got != want {
		t.Fatalf("Served() = %q, want %q", got, want)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { _ = s.Run(ctx) }()
	if !cache.WaitForCacheSync(ctx.Done(), s.Synced) {
		t.Fatal("not synced")
	}
	stored, _, _ := s.infs["batch/Job"].GetStore().GetByKey("ml/js-w-0")
	if _, found, _ := unstructured.NestedFieldNoCopy(stored.(*unstructured.Unstructured).Object, "spec", "template"); found {
		t.Error("the Job's pod template was kept in the informer")
	}

	pod := func(owner *metav1.OwnerReference) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ml"}}
		if owner != nil {
			p.OwnerReferences = []metav1.OwnerReference{*owner}
		}
		return p
	}
	group := s.Grouper()
	tests := []struct {
		name    string
		pod     *corev1.Pod
		key     string
		min     int32
		invalid string
	}{
		{name: "jobset through its job", pod: pod(ctrl("batch/v1", "Job", "js-w-0")), key: "ml/jobset:js", min: 6},
		{name: "mpijob", pod: pod(ctrl("kubeflow.org/v2beta1", "MPIJob", "mpi")), key: "ml/mpijob:mpi", min: 3},
		{name: "raycluster not served", pod: pod(ctrl("ray.io/v1", "RayCluster", "rc"))},
		{name: "job with a bad topology mode", pod: pod(ctrl("batch/v1", "Job", "bad")), key: "ml/job:bad", min: 2,
			invalid: `Job ml/bad: annotation gpud.io/gang-topology-mode "hard"; want required (the default) or preferred`},
		{name: "job not seen", pod: pod(ctrl("batch/v1", "Job", "later")), key: "ml/job:later", invalid: "waiting for its owner Job ml/later"},
		{name: "no owner", pod: pod(nil)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			key, g := group(tc.pod)
			if key != tc.key {
				t.Fatalf("key %q, want %q", key, tc.key)
			}
			if key == "" {
				if g != nil {
					t.Fatalf("group %+v without a key", g)
				}
				return
			}
			if g.Namespace+"/"+g.Name != key || g.MinMember != tc.min || !strings.Contains(g.Invalid, tc.invalid) {
				t.Fatalf("group %+v, want %s min %d invalid %q", g, key, tc.min, tc.invalid)
			}
		})
	}
	// The workload's topology annotations come with its gang.
	if _, g := group(pod(ctrl("kubeflow.org/v2beta1", "MPIJob", "mpi"))); g == nil ||
		g.Topology != (plan.GangTopology{Level: "zone", Source: "annotation gpud.io/gang-topology on MPIJob ml/mpi"}) {
		t.Errorf("mpijob's group %+v, want its preferred zone level", g)
	}
	if _, g1 := group(pod(ctrl("batch/v1", "Job", "js-w-0"))); g1 == nil {
		t.Fatal("no group")
	} else if _, g2 := group(pod(ctrl("batch/v1", "Job", "js-w-0"))); g1 != g2 {
		t.Error("two pods of one gang got two *plan.Group in one cycle")
	}
}

// TestSourceNothingServed: a server without any workload API gives a
// source that groups nothing, is synced, and never makes a dynamic client.
func TestSourceNothingServed(t *testing.T) {
	disco := &discoveryfake.FakeDiscovery{Fake: &clienttesting.Fake{}}
	s, err := NewSource(disco, func() (dynamic.Interface, error) { return nil, errors.New("not needed") }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Served() != "none" || !s.Synced() {
		t.Fatalf("Served() = %q, Synced() = %v", s.Served(), s.Synced())
	}
	if key, g := s.Grouper()(&corev1.Pod{}); key != "" || g != nil {
		t.Fatalf("grouper gave %q %+v", key, g)
	}
}

// TestSourceDiscoveryError: a discovery failure other than "not served"
// stops the scheduler from starting without its gangs.
func TestSourceDiscoveryError(t *testing.T) {
	disco := &discoveryfake.FakeDiscovery{Fake: &clienttesting.Fake{}}
	disco.PrependReactor("get", "resource", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	if _, err := NewSource(disco, nil, nil); err == nil || !strings.Contains(err.Error(), "agwatch: discover batch/v1") {
		t.Fatalf("NewSource() = %v, want a discovery error naming batch/v1", err)
	}
}
