// Package informers runs a set of client-go informers as one component:
// the watch sources that own several informers (PodGroups, workload
// owners) share its Run and Synced instead of each looping over theirs.
package informers

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/cache"
)

// Run runs every informer until ctx ends, then returns nil.
func Run(ctx context.Context, infs ...cache.SharedIndexInformer) error {
	for _, inf := range infs {
		go inf.Run(ctx.Done())
	}
	<-ctx.Done()
	return nil
}

// Synced reports whether every informer has synced; true for none.
func Synced(infs ...cache.SharedIndexInformer) bool {
	for _, inf := range infs {
		if !inf.HasSynced() {
			return false
		}
	}
	return true
}

// ServedResources lists the resources the API server serves in group
// version gv (as "podgroups"), by discovery; nil without error when it
// does not serve gv at all. Watch sources call it once at start to make
// informers only for what a cluster has installed (a CRD, an optional
// API).
func ServedResources(disco discovery.DiscoveryInterface, gv string) (map[string]bool, error) {
	if disco == nil {
		return nil, errors.New("informers: nil discovery client")
	}
	list, err := disco.ServerResourcesForGroupVersion(gv)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("discover %s: %w", gv, err)
	}
	out := make(map[string]bool, len(list.APIResources))
	for _, r := range list.APIResources {
		out[r.Name] = true
	}
	return out, nil
}

// Served reports whether the API server serves resource in group version
// gv ([ServedResources]).
func Served(disco discovery.DiscoveryInterface, gv, resource string) (bool, error) {
	rs, err := ServedResources(disco, gv)
	return rs[resource], err
}
