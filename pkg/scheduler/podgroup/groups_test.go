package podgroup

import (
	"strings"
	"testing"

	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

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
	if groups, errs := FromObjects(nil); len(groups) != 0 || len(errs) != 0 {
		t.Fatalf("FromObjects(nil) = %v, %v", groups, errs)
	}
}
