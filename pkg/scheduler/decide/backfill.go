package decide

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/gpud/gpud/pkg/allocator/jobs"
)

// backfillState is the cycle's backfill: the head (the first unit that
// waits for room and would fit with running pods gone) and its shadow,
// which units bound behind it must not delay; tries counts the units
// checked as head. Once there is a head, preemption stops for the cycle.
type backfillState struct {
	head   *unit
	shadow *shadow
	tries  int
}

// maxHeadTries caps the units a cycle checks as the backfill head.
const maxHeadTries = 8

// blocked reports whether a head waits (and the cycle backfills).
func (b *backfillState) blocked() bool { return b.head != nil }

// ensure computes the head's shadow, if there is a head.
func (b *backfillState) ensure() {
	if b.shadow != nil {
		b.shadow.ensure()
	}
}

// admit is shadow.admit, nil (admitted) when there is no head.
func (b *backfillState) admit(u *unit, pls []*placed) *failure {
	if b.shadow == nil {
		return nil
	}
	return b.shadow.admit(u, pls)
}

// tryHead checks u as the head, while there is none and tries are left:
// build makes u's shadow (ready); an active one makes u the head. A unit
// whose shadow is inactive would not fit even with every running pod
// gone, and blocks nobody.
func (b *backfillState) tryHead(u *unit, build func(*unit) *shadow) {
	if b.head != nil || b.tries >= maxHeadTries {
		return
	}
	b.tries++
	if sh := build(u); sh.active {
		b.head, b.shadow = u, sh
	}
}

// shadow is EASY backfill's view of the blocked head unit, as in
// pkg/allocator/jobs: the earliest time it fits if running pods end at
// their runtime estimates (start), and the releases that make it fit
// (order[:hi]), which units bound behind it must not spoil. When no
// estimate makes it fit, the start is unknown and the shadow is the
// cluster with every running pod gone; when even that does not fit, the
// head never fits as the cluster is, and blocks nobody.
type shadow struct {
	c      *cycle
	head   *unit
	ready  bool
	active bool
	start  int64
	order  []relPod
	hi     int
	all    bool
	// early are units admitted because their estimates end before start:
	// gone by then, so the shadow releases them too.
	early []*placed
	tests int
	// headNodes are where the head places in the shadow: a unit that
	// touches none of them leaves that placement intact.
	headNodes map[string]bool
}

func (b *shadow) ensure() {
	if b.ready {
		return
	}
	b.ready = true
	c := b.c
	b.order = c.boundHolds()
	slices.SortStableFunc(b.order, func(x, y relPod) int {
		return cmp.Or(cmp.Compare(x.end, y.end), cmp.Compare(x.pod.Key(), y.pod.Key()))
	})
	n := len(b.order)
	for n > 0 && b.order[n-1].end == never {
		n--
	}
	b.start = never
	if !b.fits(n, false) {
		if b.fits(0, true) {
			b.active, b.all = true, true
			b.headNodes = b.nodesAt(0, true)
		}
		return
	}
	b.active = true
	lo, hi := 0, n // fits(hi); the head did not fit with nothing released
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if b.fits(mid, false) {
			hi = mid
		} else {
			lo = mid
		}
	}
	b.hi = hi
	b.headNodes = b.nodesAt(hi, false)
	b.start = unixSeconds(c.s.Now)
	if hi > 0 {
		b.start = b.order[hi-1].end
	}
}

// fits reports whether the head places with order[:k] (or every running
// pod) and the early units gone.
func (b *shadow) fits(k int, all bool) bool { return b.nodesAt(k, all) != nil }

// nodesAt is where the head places with order[:k] (or every running pod)
// and the early units gone; nil if it does not.
func (b *shadow) nodesAt(k int, all bool) map[string]bool {
	b.tests++
	rel := b.order[:k]
	if all {
		rel = b.order
	}
	c := b.c
	var out map[string]bool
	c.without(rel, func() {
		for _, pl := range b.early {
			c.release(pl.allocs...)
			c.nodes.give(pl.node, pl.pod)
		}
		if nodes, ok := c.tryUnit(b.head, false); ok {
			out = map[string]bool{}
			for _, n := range nodes {
				out[n] = true
			}
		}
		for i := len(b.early) - 1; i >= 0; i-- {
			_ = c.assume(b.early[i].allocs...)
			c.nodes.take(b.early[i].node, b.early[i].pod)
		}
	})
	return out
}

// admit decides whether u, placed now at pls, leaves the head's start
// intact: u's estimate ends by the start, or the head still fits in the
// shadow with u held.
func (b *shadow) admit(u *unit, pls []*placed) *failure {
	if !b.active {
		return nil
	}
	now := unixSeconds(b.c.s.Now)
	if u.est > 0 && now+int64(u.est.Seconds()) <= b.start {
		b.early = append(b.early, pls...)
		return nil
	}
	if !slices.ContainsFunc(pls, func(pl *placed) bool { return b.headNodes[pl.node] }) {
		return nil // away from where the head will go
	}
	if b.tests >= b.c.cfg.MaxBackfillTests {
		return fail(jobs.CodeBackfill, "fits now, but blocked %s waits ahead of it and this cycle's backfill checks are spent", b.head.name())
	}
	if nodes := b.nodesAt(b.hi, b.all); nodes != nil {
		b.headNodes = nodes // where the head goes now, u held
		return nil
	}
	if b.start == never {
		return fail(jobs.CodeBackfill, "fits now but would hold room that blocked %s needs (its start is unknown: running pods without a %s annotation hold it)",
			b.head.name(), "gpud.io/runtime-estimate")
	}
	est := "no runtime estimate"
	if u.est > 0 {
		est = fmt.Sprintf("runtime estimate %s ends %s", u.est, time.Unix(now+int64(u.est.Seconds()), 0).UTC().Format(time.RFC3339))
	}
	return fail(jobs.CodeBackfill, "fits now but would delay blocked %s past its reserved start at %s (%s)",
		b.head.name(), time.Unix(b.start, 0).UTC().Format(time.RFC3339), est)
}

// newShadow is u's shadow as the backfill head, computed.
func (c *cycle) newShadow(u *unit) *shadow {
	b := &shadow{c: c, head: u}
	b.ensure()
	return b
}
