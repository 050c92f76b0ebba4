package pgwatch

import (
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	discoveryfake "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/gpud/gpud/pkg/scheduler/plan"
	"github.com/gpud/gpud/pkg/scheduler/podgroup"
)

// coschedulingPodGroup is a valid coscheduling PodGroup as the dynamic
// client returns it.
func coschedulingPodGroup() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "scheduling.x-k8s.io/v1alpha1",
		"kind":       "PodGroup",
		"metadata": map[string]any{
			"name": "nginx", "namespace": "default",
			"creationTimestamp": "2026-01-02T03:04:05Z", "resourceVersion": "7",
		},
		"spec": map[string]any{"minMember": int64(3), "scheduleTimeoutSeconds": int64(10)},
	}}
}

func TestInformerGroups(t *testing.T) {
	good := coschedulingPodGroup()
	bad := coschedulingPodGroup()
	bad.SetName("zero")
	bad.Object["spec"].(map[string]any)["minMember"] = int64(0)
	undecodable := coschedulingPodGroup()
	undecodable.SetName("words")
	undecodable.Object["spec"].(map[string]any)["minMember"] = "three"

	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{podgroup.GVR: "PodGroupList"}, good, bad, undecodable)
	inf := NewInformer(dyn, 0)
	ctx := t.Context()
	go inf.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("informer did not sync")
	}
	// The transform stored the good object typed, the undecodable one as it came.
	if obj, ok, _ := inf.GetStore().GetByKey("default/nginx"); !ok {
		t.Fatal("default/nginx not in the store")
	} else if _, typed := obj.(*podgroup.PodGroup); !typed {
		t.Fatalf("store holds %T, want *PodGroup", obj)
	}
	if obj, _, _ := inf.GetStore().GetByKey("default/words"); obj == nil {
		t.Fatal("default/words not in the store")
	} else if _, raw := obj.(*unstructured.Unstructured); !raw {
		t.Fatalf("store holds %T for an undecodable object, want *unstructured.Unstructured", obj)
	}

	groups, errs := Groups(inf, nil)
	want := plan.Group{Namespace: "default", Name: "nginx", MinMember: 3, ScheduleTimeout: 10 * time.Second, Created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	if got := groups["default/nginx"]; len(groups) != 3 || got == nil || !got.Created.Equal(want.Created) || got.MinMember != want.MinMember || got.ScheduleTimeout != want.ScheduleTimeout {
		t.Fatalf("Groups() = %v, want default/nginx = %+v and the two invalid ones", groups, want)
	}
	// The invalid ones stay, saying why, so their pods can tell users.
	if g := groups["default/zero"]; g == nil || !strings.Contains(g.Invalid, "spec.minMember 0 is outside 1..") {
		t.Fatalf("default/zero = %+v, want Invalid naming spec.minMember", g)
	}
	if len(errs) != 2 || !strings.Contains(errs[0].Error(), "PodGroup default/words: decode") ||
		!strings.Contains(errs[1].Error(), "PodGroup default/zero: spec.minMember 0") {
		t.Fatalf("Groups() errors = %v, want default/words then default/zero", errs)
	}
	for _, err := range errs {
		if !errors.Is(err, podgroup.ErrInvalid) {
			t.Fatalf("%v is not ErrInvalid", err)
		}
	}
}

func TestInstalled(t *testing.T) {
	fake := func(lists ...*metav1.APIResourceList) *discoveryfake.FakeDiscovery {
		return &discoveryfake.FakeDiscovery{Fake: &clienttesting.Fake{Resources: lists}}
	}
	cos := &metav1.APIResourceList{GroupVersion: "scheduling.x-k8s.io/v1alpha1",
		APIResources: []metav1.APIResource{{Name: "podgroups", Namespaced: true, Kind: "PodGroup"}, {Name: "podgroups/status"}}}
	intree := &metav1.APIResourceList{GroupVersion: "scheduling.k8s.io/v1beta1",
		APIResources: []metav1.APIResource{{Name: "workloads"}, {Name: "podgroups"}}}
	quota := &metav1.APIResourceList{GroupVersion: "scheduling.x-k8s.io/v1alpha1",
		APIResources: []metav1.APIResource{{Name: "elasticquotas"}}}

	tests := []struct {
		name        string
		disco       *discoveryfake.FakeDiscovery
		cos, intree bool
	}{
		{name: "neither", disco: fake()},
		{name: "coscheduling", disco: fake(cos), cos: true},
		{name: "in-tree", disco: fake(intree), intree: true},
		{name: "both", disco: fake(cos, intree), cos: true, intree: true},
		{name: "group without podgroups", disco: fake(quota)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if ok, err := Installed(tc.disco); err != nil || ok != tc.cos {
				t.Fatalf("Installed() = %v, %v; want %v", ok, err, tc.cos)
			}
			if ok, err := InTreeInstalled(tc.disco); err != nil || ok != tc.intree {
				t.Fatalf("InTreeInstalled() = %v, %v; want %v", ok, err, tc.intree)
			}
		})
	}

	broken := fake()
	broken.PrependReactor("get", "resource", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	if ok, err := Installed(broken); ok || err == nil || !strings.Contains(err.Error(), "pgwatch: discover scheduling.x-k8s.io/v1alpha1: connection refused") {
		t.Fatalf("Installed(broken) = %v, %v", ok, err)
	}
	if _, err := Installed(nil); err == nil {
		t.Fatal("Installed(nil) did not fail")
	}
}

// TestSource: the source reads what the server serves (the CRD here, not
// the in-tree API), syncs, and hands the scheduler valid groups and the
// invalid ones with their reason; with neither API it has no groups and
// is synced at once.
func TestSource(t *testing.T) {
	cos := &metav1.APIResourceList{GroupVersion: "scheduling.x-k8s.io/v1alpha1",
		APIResources: []metav1.APIResource{{Name: "podgroups", Namespaced: true, Kind: "PodGroup"}}}
	bad := coschedulingPodGroup()
	bad.SetName("zero")
	bad.Object["spec"].(map[string]any)["minMember"] = int64(0)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{podgroup.GVR: "PodGroupList"}, coschedulingPodGroup(), bad)
	disco := &discoveryfake.FakeDiscovery{Fake: &clienttesting.Fake{Resources: []*metav1.APIResourceList{cos}}}
	src, err := NewSource(disco, func() (dynamic.Interface, error) { return dyn, nil }, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if src.APIs() != "scheduling.x-k8s.io" {
		t.Errorf("APIs() = %q, want scheduling.x-k8s.io", src.APIs())
	}
	go func() { _ = src.Run(t.Context()) }()
	deadline := time.Now().Add(10 * time.Second)
	for !src.Synced() {
		if time.Now().After(deadline) {
			t.Fatal("source did not sync")
		}
		time.Sleep(10 * time.Millisecond)
	}
	groups := src.Groups()
	if g := groups["default/nginx"]; len(groups) != 2 || g == nil || g.MinMember != 3 || g.Invalid != "" {
		t.Fatalf("Groups() = %v, want default/nginx (3) and default/zero invalid", groups)
	}
	if g := groups["default/zero"]; g == nil || !strings.Contains(g.Invalid, "spec.minMember 0") {
		t.Errorf("default/zero = %+v, want Invalid naming spec.minMember", g)
	}

	none, err := NewSource(&discoveryfake.FakeDiscovery{Fake: &clienttesting.Fake{}}, func() (dynamic.Interface, error) {
		t.Fatal("a dynamic client was made for an API the server does not serve")
		return nil, nil
	}, nil, nil)
	if err != nil || none.APIs() != "none" || !none.Synced() || none.Groups() != nil {
		t.Fatalf("no PodGroup API: %v, APIs %q, synced %v, groups %v", err, none.APIs(), none.Synced(), none.Groups())
	}
}
