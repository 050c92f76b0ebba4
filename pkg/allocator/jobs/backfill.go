package jobs

import (
	"cmp"
	"slices"
)

// backfill is EASY backfill's view of one blocked job: the earliest time it
// fits if running jobs end at their estimates, and the cluster as it will be
// then (shadow), which jobs started now and still running must not spoil.
type backfill struct {
	s      *Scheduler
	now    int64
	ready  bool // shadow computed
	head   *jobState
	hd     demand
	mask   []bool
	start  int64
	shadow *cluster
}

// ensure computes the shadow on first use: it projects running jobs' ends
// (by estimate) until the head fits, binary-searching the number of
// releases while moving one shadow cluster back and forth, so it costs
// O(running) binds and O(log running) fit checks. Jobs started since the
// head blocked are running by then and are projected like the others.
func (b *backfill) ensure() {
	if b.ready {
		return
	}
	b.ready = true
	s, h, now := b.s, b.head, b.now
	b.start, b.shadow = never, s.c.clone()
	if mask, _ := s.reservedMask(h, now); mask != nil {
		b.mask = slices.Clone(mask)
	}
	order := slices.Clone(s.running)
	slices.SortFunc(order, func(x, y *jobState) int {
		return cmp.Or(cmp.Compare(x.estEnd(now), y.estEnd(now)), cmp.Compare(x.seq, y.seq))
	})
	// Jobs without an estimate never end in the projection.
	n := len(order)
	for n > 0 && order[n-1].estEnd(now) == never {
		n--
	}
	cur := 0
	move := func(k int) {
		for ; cur < k; cur++ {
			b.shadow.unbindAll(order[cur].pods, &order[cur].d)
		}
		for ; cur > k; cur-- {
			p := order[cur-1]
			for i := range p.pods {
				b.shadow.bind(&p.pods[i], &p.d)
			}
		}
	}
	fits := func(k int) bool {
		move(k)
		return b.shadow.fitsGang(&b.hd, h.n, h.job.Topology, h.job.Required, b.mask)
	}
	if !fits(n) {
		return // start stays never; the shadow has every known release
	}
	lo, hi := 0, n // fits(hi) holds; fits(0) failed in Schedule
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if fits(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	move(hi)
	if hi > 0 {
		b.start = order[hi-1].estEnd(now)
	} else {
		b.start = now
	}
}

// admit decides whether j, placed now at pods, leaves the blocked job's
// reserved start intact: j ends by its estimate before the start, or the
// blocked job still fits in the shadow with j's pods held.
func (b *backfill) admit(j *jobState, d *demand, pods []PodPlacement, now int64) (Reason, bool) {
	if j.job.EstimateSeconds > 0 && now+j.job.EstimateSeconds <= b.start {
		return Reason{}, true
	}
	for i := range pods {
		b.shadow.bind(&pods[i], d)
	}
	if b.shadow.fitsGang(&b.hd, b.head.n, b.head.job.Topology, b.head.job.Required, b.mask) {
		return Reason{}, true
	}
	b.shadow.unbindAll(pods, d)
	if b.start == never {
		return reasonf(CodeBackfill, "fits now but would hold capacity blocked job %q needs (its start is unknown)", b.head.job.ID), false
	}
	return reasonf(CodeBackfill, "fits now but would delay blocked job %q past its reserved start at t=%d (estimate %ds ends t=%d)",
		b.head.job.ID, b.start, j.job.EstimateSeconds, now+j.job.EstimateSeconds), false
}
