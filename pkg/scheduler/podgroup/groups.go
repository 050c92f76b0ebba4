package podgroup

import (
	"fmt"
	"sort"
	"strings"

	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpud/gpud/pkg/scheduler/plan"
)

// InTreeGroupVersion is Kubernetes' own scheduling.k8s.io/v1beta1, which
// serves Workload and PodGroup when kube-apiserver runs with the
// GenericWorkload feature gate and --runtime-config=scheduling.k8s.io/v1beta1=true.
const InTreeGroupVersion = "scheduling.k8s.io/v1beta1"

// FromObjects converts PodGroups of both APIs into the plan's groups by
// Key (pgwatch.Groups is it over informers). Objects are *PodGroup,
// *unstructured.Unstructured (a coscheduling PodGroup) or
// *schedulingv1beta1.PodGroup; anything else is an error.
func FromObjects(objs []any) (map[string]*plan.Group, []error) {
	type entry struct {
		g      *plan.Group
		inTree bool
	}
	seen := make(map[string]entry, len(objs))
	var errs []keyedErr
	for _, obj := range objs {
		var (
			g      *plan.Group
			err    error
			inTree bool
		)
		switch o := obj.(type) {
		case *PodGroup:
			g, err = ToGroup(o)
		case *unstructured.Unstructured:
			g, err = FromUnstructuredGroup(o)
		case *schedulingv1beta1.PodGroup:
			g, err = FromInTree(o)
			inTree = true
		default:
			err = fmt.Errorf("%w: unexpected object %T in the store", ErrInvalid, obj)
		}
		if err != nil {
			errs = append(errs, keyedErr{key: keyOfObject(obj), err: err})
			continue
		}
		k := Key(g.Namespace, g.Name)
		prev, dup := seen[k]
		switch {
		case !dup:
			seen[k] = entry{g: g, inTree: inTree}
		case inTree && !prev.inTree:
			seen[k] = entry{g: g, inTree: true}
			errs = append(errs, keyedErr{key: k, err: shadowed(k)})
		case !inTree && prev.inTree:
			errs = append(errs, keyedErr{key: k, err: shadowed(k)})
		default: // the same object twice (a store never does this)
			seen[k] = entry{g: g, inTree: inTree}
		}
	}
	out := make(map[string]*plan.Group, len(seen))
	for k, e := range seen {
		out[k] = e.g
	}
	for _, e := range errs {
		if _, ok := out[e.key]; !ok && e.key != "" {
			ns, name, _ := strings.Cut(e.key, "/")
			out[e.key] = &plan.Group{Namespace: ns, Name: name, Invalid: e.err.Error()}
		}
	}
	sort.SliceStable(errs, func(i, j int) bool { return errs[i].key < errs[j].key })
	list := make([]error, len(errs))
	for i, e := range errs {
		list[i] = e.err
	}
	return out, list
}

type keyedErr struct {
	key string
	err error
}

func shadowed(k string) error {
	return fmt.Errorf("PodGroup %s: a scheduling.k8s.io/v1beta1 PodGroup has the same name, which wins; rename one of them: %w", k, ErrInvalid)
}

func keyOfObject(obj any) string {
	if m, ok := obj.(metav1.Object); ok {
		return Key(m.GetNamespace(), m.GetName())
	}
	return ""
}
