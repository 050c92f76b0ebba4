// Package informers runs a set of client-go informers as one component:
// the watch sources that own several informers (PodGroups, workload
// owners) share its Run and Synced instead of each looping over theirs.
package informers

import (
	"context"

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
