// Package pgwatch watches the PodGroups of both APIs the scheduler reads
// (coscheduling's scheduling.x-k8s.io/v1alpha1 CRD and Kubernetes'
// scheduling.k8s.io/v1beta1): whether each is served, informers that keep
// them converted, and the plan's groups from those informers.
package pgwatch

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	schedinformers "k8s.io/client-go/informers/scheduling/v1beta1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/gpud/gpud/internal/informers"
	"github.com/gpud/gpud/pkg/scheduler/plan"
	"github.com/gpud/gpud/pkg/scheduler/podgroup"
)

// NewInformer returns an informer, not yet started, over every
// coscheduling PodGroup in all namespaces. It stores each object as a
// *podgroup.PodGroup (converted once, when it arrives) or, when the object does
// not decode, as the *unstructured.Unstructured it came as, so that
// Groups can say why it was skipped. Call it only when Installed says
// the CRD is served: otherwise its reflector logs list errors forever.
func NewInformer(dyn dynamic.Interface, resync time.Duration) cache.SharedIndexInformer {
	inf := dynamicinformer.NewFilteredDynamicInformer(dyn, podgroup.GVR, metav1.NamespaceAll, resync,
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
	pg, err := podgroup.FromUnstructured(u)
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
	return served(disco, podgroup.GroupVersion.String(), podgroup.Resource)
}

// InTreeInstalled reports whether the API server serves
// scheduling.k8s.io/v1beta1 podgroups (Kubernetes 1.37 with
// GenericWorkload on).
func InTreeInstalled(disco discovery.DiscoveryInterface) (bool, error) {
	return served(disco, podgroup.InTreeGroupVersion, "podgroups")
}

func served(disco discovery.DiscoveryInterface, gv, resource string) (bool, error) {
	ok, err := informers.Served(disco, gv, resource)
	if err != nil {
		return false, fmt.Errorf("pgwatch: %w", err)
	}
	return ok, nil
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
	return podgroup.FromObjects(objs)
}

// Source feeds the scheduler the PodGroups of whichever PodGroup APIs the
// server has: scheduler-plugins' CRD (scheduling.x-k8s.io) and Kubernetes'
// own scheduling.k8s.io/v1beta1. Neither: no groups.
type Source struct {
	infs []cache.SharedIndexInformer
	apis string
	log  *slog.Logger
}

// NewSource asks disco which PodGroup APIs the server serves and makes an
// informer (not yet running) for each: the CRD's through dyn, the in-tree
// one through client. log (may be nil) hears of PodGroups left out.
func NewSource(disco discovery.DiscoveryInterface, dyn func() (dynamic.Interface, error), client kubernetes.Interface, log *slog.Logger) (*Source, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Source{log: log, apis: "none"}
	var apis []string
	if ok, err := Installed(disco); err != nil {
		return nil, err
	} else if ok {
		d, err := dyn()
		if err != nil {
			return nil, fmt.Errorf("pgwatch: dynamic client for PodGroups: %w", err)
		}
		s.infs = append(s.infs, NewInformer(d, 0))
		apis = append(apis, podgroup.GroupVersion.Group)
	}
	if ok, err := InTreeInstalled(disco); err != nil {
		return nil, err
	} else if ok {
		s.infs = append(s.infs, NewInTreeInformer(client, 0))
		apis = append(apis, podgroup.InTreeGroupVersion)
	}
	if len(apis) > 0 {
		s.apis = strings.Join(apis, ",")
	}
	return s, nil
}

// APIs names the PodGroup APIs the source reads, comma-separated, or
// "none".
func (s *Source) APIs() string { return s.apis }

// Run runs the informers until ctx ends.
func (s *Source) Run(ctx context.Context) error {
	return informers.Run(ctx, s.infs...)
}

// Synced reports whether every informer has synced.
func (s *Source) Synced() bool {
	return informers.Synced(s.infs...)
}

// Groups is the plan's groups now (Groups over the informers); PodGroups
// left out are logged at debug level (their pods' pending reason names
// them).
func (s *Source) Groups() map[string]*plan.Group {
	if len(s.infs) == 0 {
		return nil
	}
	g, errs := Groups(s.infs...)
	for _, err := range errs {
		s.log.Debug("podgroup left out", "err", err)
	}
	return g
}
