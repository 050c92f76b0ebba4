package view

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
)

// UsageCache carries what allocated claims take from one view to the
// next built through it, so that a view counts only the claims allocated,
// changed or released since the last instead of every claim again, and
// models re-bind only the nodes those touch. It holds while the new view
// has the last one's devices (the same nodes, taken over from a
// [PoolCache], in the same order, so devices keep their ids); otherwise
// the view counts every claim afresh and the cache starts over. Claims
// are compared by their allocation object (informers and the assume cache
// replace a claim on every change, never change it).
//
// Like a PoolCache, only the latest view built through it may be used,
// and a decider must leave that view's usage as it found it (what-ifs
// undone): the next view starts from it.
type UsageCache struct {
	devs   []*Device
	usage  usage
	claims map[string]*claimUse
	// gen counts views; a claim not seen in the current one is released.
	gen uint64
}

// claimUse is one allocated claim as the cache counted it.
type claimUse struct {
	alloc *resourceapi.AllocationResult
	// skip is what counting it reported (devices the view does not
	// have), reported again by every view while the claim is unchanged.
	skip *Skip
	gen  uint64
}

// recountEvery is how often (in views) the cache counts every claim
// afresh even when it could carry over: a decider that left a change in
// a view's usage (a bug) is corrected within this many cycles.
const recountEvery = 64

// NewUsageCache returns an empty cache.
func NewUsageCache() *UsageCache { return &UsageCache{} }

// carries reports whether the cache's usage holds for a view with devs.
func (c *UsageCache) carries(devs []*Device) bool {
	if c == nil || c.claims == nil || len(c.devs) != len(devs) || (c.gen+1)%recountEvery == 0 {
		return false
	}
	for i, d := range devs {
		if c.devs[i] != d {
			return false
		}
	}
	return true
}

// count fills v's usage from claims: from the cache's, by what changed,
// when it carries over (carried: [UsageCache.carries] of v's devices;
// v.usage is then the cache's), else afresh. It returns the skips of
// claims naming devices v does not have.
func (c *UsageCache) count(v *View, claims []*resourceapi.ResourceClaim, carried bool) []Skip {
	var skips []Skip
	if c == nil {
		for cl := range LatestAllocated(claims) {
			if sk := countClaim(v, cl); sk != nil {
				skips = append(skips, *sk)
			}
		}
		return skips
	}
	if carried {
		v.usage = c.usage
	} else {
		c.claims = make(map[string]*claimUse, len(claims))
	}
	c.gen++
	seen := 0
	for cl := range LatestAllocated(claims) {
		id := ClaimID(cl)
		e := c.claims[id]
		if e != nil && e.alloc == cl.Status.Allocation {
			e.gen = c.gen
		} else {
			if e != nil {
				v.usage.sub(v, e.alloc, nil)
			}
			e = &claimUse{alloc: cl.Status.Allocation, skip: countClaim(v, cl), gen: c.gen}
			c.claims[id] = e
		}
		seen++
		if e.skip != nil {
			skips = append(skips, *e.skip)
		}
	}
	if seen < len(c.claims) {
		for id, e := range c.claims {
			if e.gen != c.gen {
				v.usage.sub(v, e.alloc, nil)
				delete(c.claims, id)
			}
		}
	}
	c.devs, c.usage = v.devs, v.usage
	return skips
}

// countClaim adds claim's allocation to v's usage, with the skip it
// reports when it names devices v does not have.
func countClaim(v *View, claim *resourceapi.ResourceClaim) *Skip {
	if err := v.usage.add(v, claim.Status.Allocation, nil); err != nil {
		return &Skip{Kind: "ResourceClaim", Name: fmt.Sprintf("%s/%s", claim.Namespace, claim.Name), Reason: err.Error()}
	}
	return nil
}
