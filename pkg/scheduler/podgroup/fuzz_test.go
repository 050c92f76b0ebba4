package podgroup

import (
	"encoding/json"
	"testing"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// FuzzFromUnstructured feeds arbitrary JSON objects, decoded as the
// dynamic client decodes them (integers as int64), through
// FromUnstructured and ToGroup: neither may panic, an accepted group is
// within bounds and names the object, and a decoded PodGroup survives a
// round trip through unstructured unchanged.
func FuzzFromUnstructured(f *testing.F) {
	seed, err := json.Marshal(coschedulingPodGroup().Object)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	for _, s := range []string{
		`{"apiVersion":"scheduling.x-k8s.io/v1alpha1","kind":"PodGroup","metadata":{"name":"a","namespace":"b"},"spec":{"minMember":2}}`,
		`{"metadata":{"name":"a","namespace":"b"},"spec":{"minMember":-2,"scheduleTimeoutSeconds":99999}}`,
		`{"metadata":{"name":"a","namespace":"b"},"spec":{"minMember":4294967297}}`,
		`{"metadata":{"name":"a","namespace":"b"},"spec":{"minMember":2.5}}`,
		`{"metadata":{"name":"a","namespace":"b"},"spec":{"minResources":{"cpu":"1e3","x":-1}}}`,
		`{"metadata":"x","spec":null,"status":{"scheduleStartTime":"yesterday"}}`,
		`{"spec":{"minMember":{}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 64<<10 {
			return // the API server bounds objects; keep runs fast
		}
		var obj map[string]any
		if err := utiljson.Unmarshal(data, &obj); err != nil || obj == nil {
			return
		}
		u := &unstructured.Unstructured{Object: obj}
		pg, err := FromUnstructured(u)
		if err != nil {
			return
		}
		if g, err := ToGroup(pg); err == nil {
			if g.MinMember < 1 || g.MinMember > MaxMinMember {
				t.Fatalf("accepted minMember %d", g.MinMember)
			}
			if g.ScheduleTimeout < 0 || g.ScheduleTimeout > MaxTimeoutSeconds*time.Second {
				t.Fatalf("accepted timeout %s", g.ScheduleTimeout)
			}
			if g.Namespace == "" || g.Name == "" || g.Namespace != pg.Namespace || g.Name != pg.Name {
				t.Fatalf("group %s/%s from PodGroup %s/%s", g.Namespace, g.Name, pg.Namespace, pg.Name)
			}
		}
		back, err := runtime.DefaultUnstructuredConverter.ToUnstructured(pg)
		if err != nil {
			t.Fatalf("ToUnstructured(%+v): %v", pg, err)
		}
		again, err := FromUnstructured(&unstructured.Unstructured{Object: back})
		if err != nil {
			t.Fatalf("round trip of %+v: %v", pg, err)
		}
		if !apiequality.Semantic.DeepEqual(pg.Spec, again.Spec) || pg.Name != again.Name || pg.Namespace != again.Namespace ||
			pg.Status.Phase != again.Status.Phase || pg.Status.Running != again.Status.Running {
			t.Fatalf("round trip changed the PodGroup:\n%+v\n%+v", pg, again)
		}
	})
}
