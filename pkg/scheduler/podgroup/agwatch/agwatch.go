package agwatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/gpud/gpud/internal/informers"
	"github.com/gpud/gpud/pkg/scheduler/plan"
	"github.com/gpud/gpud/pkg/scheduler/podgroup"
	"github.com/gpud/gpud/pkg/scheduler/podgroup/autogang"
)

// Kind is a workload API the source reads when the server serves it.
type Kind struct {
	Group, Kind, Resource string
	// Versions are tried in order; the first served is read.
	Versions []string
}

// Kinds are the workload APIs autogang has rules for (a TrainJob runs as
// a JobSet, a RayJob and a RayService as a RayCluster: those are read).
// deploy/scheduler/rbac.yaml grants get, list and watch on each.
var Kinds = []Kind{
	{Group: autogang.BatchGroup, Kind: autogang.KindJob, Resource: "jobs", Versions: []string{"v1"}},
	{Group: autogang.JobSetGroup, Kind: autogang.KindJobSet, Resource: "jobsets", Versions: []string{"v1alpha2"}},
	{Group: autogang.LWSGroup, Kind: autogang.KindLWS, Resource: "leaderworkersets", Versions: []string{"v1"}},
	{Group: autogang.KubeflowGroup, Kind: "PyTorchJob", Resource: "pytorchjobs", Versions: []string{"v1"}},
	{Group: autogang.KubeflowGroup, Kind: "MPIJob", Resource: "mpijobs", Versions: []string{"v2beta1", "v1"}},
	{Group: autogang.KubeflowGroup, Kind: "TFJob", Resource: "tfjobs", Versions: []string{"v1"}},
	{Group: autogang.KubeflowGroup, Kind: "XGBoostJob", Resource: "xgboostjobs", Versions: []string{"v1"}},
	{Group: autogang.KubeflowGroup, Kind: "PaddleJob", Resource: "paddlejobs", Versions: []string{"v1"}},
	{Group: autogang.KubeflowGroup, Kind: "JAXJob", Resource: "jaxjobs", Versions: []string{"v1"}},
	{Group: autogang.RayGroup, Kind: autogang.KindRayCluster, Resource: "rayclusters", Versions: []string{"v1"}},
}

// Source watches the served workload APIs of Kinds.
type Source struct {
	infs   map[string]cache.SharedIndexInformer // by "group/Kind"
	served []string
	log    *slog.Logger
}

// NewSource asks disco which of Kinds the server serves and makes a
// dynamic informer (not yet running) for each through dyn, called only
// when one is served. log (may be nil) hears of gangs refused.
func NewSource(disco discovery.DiscoveryInterface, dyn func() (dynamic.Interface, error), log *slog.Logger) (*Source, error) {
	if disco == nil {
		return nil, errors.New("agwatch: nil discovery client")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Source{infs: map[string]cache.SharedIndexInformer{}, log: log}
	resources := map[string]map[string]bool{} // group version → served resources
	var gvrs []schema.GroupVersionResource
	var keys []string
	for _, k := range Kinds {
		for _, v := range k.Versions {
			gv := schema.GroupVersion{Group: k.Group, Version: v}.String()
			if _, done := resources[gv]; !done {
				rs, err := informers.ServedResources(disco, gv)
				if err != nil {
					return nil, fmt.Errorf("agwatch: %w", err)
				}
				resources[gv] = rs
			}
			if resources[gv][k.Resource] {
				gvrs = append(gvrs, schema.GroupVersionResource{Group: k.Group, Version: v, Resource: k.Resource})
				keys = append(keys, k.Group+"/"+k.Kind)
				s.served = append(s.served, k.Resource+"."+gv)
				break
			}
		}
	}
	if len(gvrs) == 0 {
		return s, nil
	}
	d, err := dyn()
	if err != nil {
		return nil, fmt.Errorf("agwatch: dynamic client: %w", err)
	}
	for i, gvr := range gvrs {
		s.infs[keys[i]] = NewInformer(d, gvr, 0)
	}
	return s, nil
}

// NewInformer returns an informer, not yet started, over every object of
// gvr in all namespaces, each pruned (autogang.Prune) as it arrives.
func NewInformer(dyn dynamic.Interface, gvr schema.GroupVersionResource, resync time.Duration) cache.SharedIndexInformer {
	inf := dynamicinformer.NewFilteredDynamicInformer(dyn, gvr, metav1.NamespaceAll, resync,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}, nil).Informer()
	// SetTransform fails only on a started informer; this one is new.
	_ = inf.SetTransform(func(obj any) (any, error) {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			autogang.Prune(u.Object)
		}
		return obj, nil
	})
	return inf
}

// Served names the workload APIs read ("jobs.batch/v1,..."), or "none".
func (s *Source) Served() string {
	if len(s.served) == 0 {
		return "none"
	}
	return strings.Join(s.served, ",")
}

// Run runs the informers until ctx ends.
func (s *Source) Run(ctx context.Context) error {
	return informers.Run(ctx, slices.Collect(maps.Values(s.infs))...)
}

// Synced reports whether every informer has synced.
func (s *Source) Synced() bool {
	return informers.Synced(slices.Collect(maps.Values(s.infs))...)
}

// lookup is autogang.Lookup over the informers' stores.
func (s *Source) lookup(ns string, ref autogang.Ref) (map[string]any, bool) {
	inf, ok := s.infs[ref.Group()+"/"+ref.Kind]
	if !ok {
		return nil, false
	}
	obj, exists, err := inf.GetStore().GetByKey(ns + "/" + ref.Name)
	if err != nil || !exists {
		return nil, true
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, true
	}
	return u.Object, true
}

// Grouper returns one cycle's grouping: a pod's gang key
// ("namespace/<kind>:<name>") and group, or "" and nil for a pod in no
// gang. Pods of one gang share one *plan.Group. A gang refused
// (autogang.Gang.Invalid) comes with Invalid set, and is logged at debug
// level once per cycle. The returned func is not safe for concurrent use.
func (s *Source) Grouper() func(pod *corev1.Pod) (string, *plan.Group) {
	if len(s.infs) == 0 {
		return func(*corev1.Pod) (string, *plan.Group) { return "", nil }
	}
	type result struct {
		key string
		g   *plan.Group
	}
	seen := map[string]*plan.Group{}
	// Pods of one controller (a Job's) resolve alike, but for
	// LeaderWorkerSet pods, whose group is in their labels.
	byOwner := map[types.UID]result{}
	return func(pod *corev1.Pod) (string, *plan.Group) {
		if pod == nil {
			return "", nil
		}
		p := autogang.Pod{Namespace: pod.Namespace, Labels: pod.Labels, Annotations: pod.Annotations}
		c := metav1.GetControllerOf(pod)
		cacheable := c != nil && c.UID != "" && pod.Labels[autogang.LWSNameLabel] == ""
		if cacheable {
			if r, ok := byOwner[c.UID]; ok {
				return r.key, r.g
			}
		}
		if c != nil {
			p.Owner = &autogang.Ref{APIVersion: c.APIVersion, Kind: c.Kind, Name: c.Name, UID: string(c.UID)}
		}
		key, pg := s.group(p, seen)
		if cacheable {
			byOwner[c.UID] = result{key, pg}
		}
		return key, pg
	}
}

// group resolves one pod, sharing one *plan.Group per gang key in seen.
func (s *Source) group(p autogang.Pod, seen map[string]*plan.Group) (string, *plan.Group) {
	g, ok := autogang.Resolve(p, s.lookup)
	if !ok {
		return "", nil
	}
	key := g.Key()
	if pg, ok := seen[key]; ok {
		return key, pg
	}
	pg := &plan.Group{Namespace: g.Namespace, Name: g.Name, MinMember: g.MinMember, Created: g.Created, Invalid: g.Invalid}
	if pg.Invalid == "" {
		topo, err := podgroup.ParseTopology(g.Topology, g.Object)
		if err != nil {
			pg.Invalid = err.Error()
		}
		pg.Topology = topo
	}
	if g.Invalid != "" {
		s.log.Debug("workload not grouped", "gang", key, "reason", g.Invalid)
	}
	seen[key] = pg
	return key, pg
}
