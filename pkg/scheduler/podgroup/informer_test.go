package podgroup

import (
	"errors"
	"strings"
	"testing"
	"time"

	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	discoveryfake "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/gpud/gpud/pkg/scheduler/plan"
)

func TestInformerGroups(t *testing.T) {
	good := coschedulingPodGroup()
	bad := coschedulingPodGroup()
	bad.SetName("zero")
	bad.Object["spec"].(map[string]any)["minMember"] = int64(0)
	undecodable := coschedulingPodGroup()
	undecodable.SetName("words")
	undecodable.Object["spec"].(map[string]any)["minMember"] = "three"

	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{GVR: "PodGroupList"}, good, bad, undecodable)
	inf := NewInformer(dyn, 0)
	ctx := t.Context()
	go inf.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("informer did not sync")
	}
	// The transform stored the good object typed, the undecodable one as it came.
	if obj, ok, _ := inf.GetStore().GetByKey("default/nginx"); !ok {
		t.Fatal("default/nginx not in the store")
	} else if _, typed := obj.(*PodGroup); !typed {
		t.Fatalf("store holds %T, want *PodGroup", obj)
	}
	if obj, _, _ := inf.GetStore().GetByKey("default/words"); obj == nil {
		t.Fatal("default/words not in the store")
	} else if _, raw := obj.(*unstructured.Unstructured); !raw {
		t.Fatalf("store holds %T for an undecodable object, want *unstructured.Unstructured", obj)
	}

	groups, errs := Groups(inf, nil)
	want := plan.Group{Namespace: "default", Name: "nginx", MinMember: 3, ScheduleTimeout: 10 * time.Second, Created: created.Time}
	if len(groups) != 3 || !same(groups["default/nginx"], &want) {
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
		if !errors.Is(err, ErrInvalid) {
			t.Fatalf("%v is not ErrInvalid", err)
		}
	}
}

func TestFromObjectsBothFormats(t *testing.T) {
	cos := pgWith(3, nil)
	cos.Namespace, cos.Name = "ml", "same"
	other := pgWith(2, nil)
	other.Namespace, other.Name = "ml", "only-cos"
	in := &schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "same", CreationTimestamp: created},
		Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
			Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 8}}},
	}
	for _, order := range [][]any{{cos, in, other}, {in, cos, other}} {
		groups, errs := FromObjects(order)
		if len(groups) != 2 || groups["ml/same"].MinMember != 8 || groups["ml/only-cos"].MinMember != 2 {
			t.Fatalf("FromObjects() = %v; want ml/same from the in-tree PodGroup (8) and ml/only-cos (2)", groups)
		}
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), "PodGroup ml/same: a scheduling.k8s.io/v1beta1 PodGroup has the same name") {
			t.Fatalf("FromObjects() errors = %v", errs)
		}
	}
	_, errs := FromObjects([]any{"a string"})
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "unexpected object string") {
		t.Fatalf("FromObjects(string) errors = %v", errs)
	}
	if groups, errs := Groups(); len(groups) != 0 || len(errs) != 0 {
		t.Fatalf("Groups() with no informer = %v, %v", groups, errs)
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
	if ok, err := Installed(broken); ok || err == nil || !strings.Contains(err.Error(), "podgroup: discover scheduling.x-k8s.io/v1alpha1: connection refused") {
		t.Fatalf("Installed(broken) = %v, %v", ok, err)
	}
	if _, err := Installed(nil); err == nil {
		t.Fatal("Installed(nil) did not fail")
	}
}
