// Package wait holds the one context-aware sleep of the agent's loops
// (device plugin registration backoff, NVML event retries), so each loop
// stops as soon as its ctx ends.
package wait

import (
	"context"
	"time"
)

// Sleep waits d or until ctx ends; it reports whether d passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
