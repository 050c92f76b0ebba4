package podgroup

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	schedinformers "k8s.io/client-go/informers/scheduling/v1beta1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/gpud/gpud/pkg/scheduler/plan"
)

// InTreeGroupVersion is Kubernetes' own scheduling.k8s.io/v1beta1, which
// serves Workload and PodGroup when kube-apiserver runs with the
// GenericWorkload feature gate and --runtime-config=scheduling.k8s.io/v1beta1=true.
const InTreeGroupVersion = "scheduling.k8s.io/v1beta1"

// NewInformer returns an informer, not yet started, over every
// coscheduling PodGroup in all namespaces. It stores each object as a
// *PodGroup (converted once, when it arrives) or, when the object does
// not decode, as the *unstructured.Unstructured it came as, so that
// Groups can say why it was skipped. Call it only when Installed says
// the CRD is served: otherwise its reflector logs list errors forever.
func NewInformer(dyn dynamic.Interface, resync time.Duration) cache.SharedIndexInformer {
	inf := dynamicinformer.NewFilteredDynamicInformer(dyn, GVR, metav1.NamespaceAll, resync,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}, nil).Informer()
	// SetTransform fails only on a started informer; this one is new.
	_ = inf.SetTransform(transform)
	return inf
}

// transform keeps the typed object in the store. It never fails: an
// object that does not decode is kept as it came, for Groups to report.
func transform(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil // a tombstone or an already typed object
	}
	pg, err := FromUnstructured(u)
	if err != nil {
		return obj, nil
	}
	return pg, nil
}

// NewInTreeInformer returns an informer, not yet started, over every
// scheduling.k8s.io/v1beta1 PodGroup; call it only when InTreeInstalled
// says that group version is served.
func NewInTreeInformer(client kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
	return schedinformers.NewPodGroupInformer(client, metav1.NamespaceAll, resync,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
}

// Installed reports whether the API server serves coscheduling PodGroups
// (scheduling.x-k8s.io/v1alpha1 podgroups, the CRD in
// deploy/scheduler/podgroup-crd.yaml). false with a nil error means the
// CRD is not installed: the scheduler runs without coscheduling gangs.
func Installed(disco discovery.DiscoveryInterface) (bool, error) {
	return served(disco, GroupVersion.String(), Resource)
}

// InTreeInstalled reports whether the API server serves
// scheduling.k8s.io/v1beta1 podgroups (Kubernetes 1.37 with
// GenericWorkload on).
func InTreeInstalled(disco discovery.DiscoveryInterface) (bool, error) {
	return served(disco, InTreeGroupVersion, "podgroups")
}

func served(disco discovery.DiscoveryInterface, gv, resource string) (bool, error) {
	if disco == nil {
		return false, errors.New("podgroup: nil discovery client")
	}
	list, err := disco.ServerResourcesForGroupVersion(gv)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("podgroup: discover %s: %w", gv, err)
	}
	for _, r := range list.APIResources {
		if r.Name == resource {
			return true, nil
		}
	}
	return false, nil
}

// Groups converts what the informers hold into the plan's groups by
// Key. Pass the coscheduling informer (NewInformer), the in-tree one
// (NewInTreeInformer) or both; a nil informer (its API not served) is
// skipped. Objects that do not convert are returned with only their key
// and plan.Group.Invalid set (so their pods say why they wait), each also
// as an error naming it and the field (errors.Is ErrInvalid), in key
// order.
//
// When both formats define one key, the scheduling.k8s.io PodGroup is
// kept and the coscheduling one left out with an error: pods naming the
// key through the label then join the in-tree group.
func Groups(infs ...cache.SharedIndexInformer) (map[string]*plan.Group, []error) {
	var objs []any
	for _, inf := range infs {
		if inf != nil {
			objs = append(objs, inf.GetStore().List()...)
		}
	}
	return FromObjects(objs)
}

// FromObjects is Groups over a list of objects: *PodGroup,
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
