package jobs

import (
	"cmp"
	"slices"
)

// memoKey identifies jobs that fail alike within one Schedule call: same pod
// shape, gang, topology, allowed models and reserved-node mask.
type memoKey struct {
	cpu, mem, milli, gmem int64
	kind                  kind
	num, n                int
	mig                   *MIGProfile
	models                modelSet
	lv                    Level
	req                   bool
	mask                  uint64
}

// Schedule decides what runs at now: it starts what fits in policy order,
// preempts where a job is entitled to room, and explains every job it
// leaves pending. It applies its decisions before returning them.
func (s *Scheduler) Schedule(now int64) Result {
	s.round++
	rd := &round{s: s, now: now, memo: map[memoKey]Reason{}, noVictims: map[memoKey]bool{}}
	next := s.order(now)
	for j := next(); j != nil; j = next() {
		rd.consider(j)
	}
	res := rd.res
	for _, p := range res.Preempted {
		if j := s.jobs[p.JobID]; !j.running {
			res.Pending = append(res.Pending, Pending{p.JobID, reasonf(CodePreempted, "preempted for job %q (%s)", p.Beneficiary, p.Why)})
		}
	}
	if rd.bf != nil {
		res.Reserved, res.ReservedStart = rd.bf.head.job.ID, -1
		if rd.bf.ready {
			res.ReservedStart = rd.bf.start
		}
	}
	s.requeue(res.Preempted)
	return res
}

// round is one [Scheduler.Schedule] call in progress.
type round struct {
	s   *Scheduler
	now int64
	res Result
	// memo holds the reason of jobs that failed, by shape; noVictims the
	// shapes preemption found no room for.
	memo      map[memoKey]Reason
	noVictims map[memoKey]bool
	// head is the first job that did not fit; bf, with backfill on, keeps
	// later jobs from delaying it.
	head *jobState
	bf   *backfill
}

func (rd *round) pend(j *jobState, r Reason) {
	rd.res.Pending = append(rd.res.Pending, Pending{j.job.ID, r})
}

// consider starts j, preempts for it, or leaves it pending with a reason.
func (rd *round) consider(j *jobState) {
	s := rd.s
	dd, mask, key, ok := rd.admissible(j)
	if !ok {
		return
	}
	if rd.bf != nil {
		rd.bf.ensure() // project from the state the head blocked in
	}
	pods, miss := s.c.placeGang(&dd, j.n, j.job.Topology, j.job.Required, mask)
	if pods == nil {
		rd.noRoom(j, &dd, miss, mask, key)
		return
	}
	usage, _ := s.placementUsage(j, pods)
	if r, over := s.q.overLimit(j.queue, usage); over {
		s.c.unbindAll(pods, &dd)
		rd.pend(j, r)
		return
	}
	if rd.bf != nil {
		if r, ok := rd.bf.admit(j, &dd, pods, rd.now); !ok {
			s.c.unbindAll(pods, &dd)
			rd.pend(j, r)
			return
		}
	}
	s.commit(j, pods, rd.now)
	rd.res.Started = append(rd.res.Started, Start{JobID: j.job.ID, Pods: pods, Backfilled: rd.head != nil})
}

// admissible returns j's demand narrowed to the models its queue may use,
// its reserved-node mask and memo key; false, with j left pending, if j
// cannot start this round without trying to place it.
func (rd *round) admissible(j *jobState) (demand, []bool, memoKey, bool) {
	s := rd.s
	if rd.head != nil && !s.opts.Backfill {
		rd.pend(j, reasonf(CodeBlocked, "behind blocked job %q (backfill off)", rd.head.job.ID))
		return demand{}, nil, memoKey{}, false
	}
	if why, ok := s.never(j); !ok {
		rd.pend(j, why)
		return demand{}, nil, memoKey{}, false
	}
	dd := j.d
	models, why, ok := s.q.allowedModels(j.queue, &j.d, j.d.modelMilli()*int64(j.n), s.c)
	if !ok {
		rd.pend(j, why)
		return demand{}, nil, memoKey{}, false
	}
	dd.models = models
	mask, sig := s.reservedMask(j, rd.now)
	key := memoKey{cpu: dd.cpu, mem: dd.mem, milli: dd.milli, gmem: dd.gmem, kind: dd.kind, num: dd.num, n: j.n,
		mig: dd.mig, models: dd.models, lv: j.job.Topology, req: j.job.Required, mask: sig}
	if r, ok := rd.memo[key]; ok && (!s.opts.Preemption || rd.head != nil || rd.noVictims[key]) {
		rd.pend(j, r)
		return demand{}, nil, memoKey{}, false
	}
	return dd, mask, key, true
}

// noRoom handles a job that did not fit: preempt for it if allowed, else
// leave it pending; the first such job becomes the head backfill protects.
func (rd *round) noRoom(j *jobState, dd *demand, miss gangMiss, mask []bool, key memoKey) {
	s := rd.s
	r := s.capacityReason(j, dd, miss, mask)
	if s.opts.Preemption && rd.head == nil && !rd.noVictims[key] {
		if vs, ok := s.preempt(j, dd, mask, rd.now); ok {
			rd.res.Preempted = append(rd.res.Preempted, vs...)
			rd.res.Started = append(rd.res.Started, Start{JobID: j.job.ID, Pods: j.pods})
			clear(rd.memo)
			return
		}
		rd.noVictims[key] = true
	}
	rd.memo[key] = r
	rd.pend(j, r)
	if rd.head == nil {
		rd.head = j
		if s.opts.Backfill {
			rd.bf = &backfill{s: s, head: j, hd: *dd, now: rd.now}
		}
	}
}

// requeue keeps jobs stopped by preemption, and those not reached,
// pending, in submission order, and drops stopped jobs from running.
func (s *Scheduler) requeue(preempted []Preemption) {
	s.pending = slices.DeleteFunc(s.pending, func(j *jobState) bool { return j.running })
	for _, p := range preempted {
		v := s.jobs[p.JobID]
		i, _ := slices.BinarySearchFunc(s.pending, v.seq, func(x *jobState, seq int) int { return cmp.Compare(x.seq, seq) })
		s.pending = slices.Insert(s.pending, i, v)
	}
	s.running = slices.DeleteFunc(s.running, func(j *jobState) bool { return !j.running })
}

// order returns an iterator over pending jobs in policy order. With fair
// share it picks, at every level of the queue tree, the child below its
// guarantee or else with the lowest weighted DRF share, re-evaluated after
// each job since starts change shares.
func (s *Scheduler) order(now int64) func() *jobState {
	byQueue := make([][]*jobState, len(s.q.list))
	remain := make([]int, len(s.q.list))
	for _, j := range s.pending {
		byQueue[j.queue] = append(byQueue[j.queue], j)
		for a := j.queue; a >= 0; a = s.q.list[a].parent {
			remain[a]++
		}
	}
	if !s.opts.FairShare {
		all := slices.Clone(s.pending)
		slices.SortFunc(all, func(a, b *jobState) int {
			return cmp.Or(s.orderCmp(a, b, now), cmp.Compare(a.job.Submit, b.job.Submit), cmp.Compare(a.seq, b.seq))
		})
		i := 0
		return func() *jobState {
			if i == len(all) {
				return nil
			}
			i++
			return all[i-1]
		}
	}
	for _, l := range byQueue {
		slices.SortFunc(l, func(a, b *jobState) int {
			return cmp.Or(cmp.Compare(b.job.Priority, a.job.Priority), s.orderCmp(a, b, now),
				cmp.Compare(a.job.Submit, b.job.Submit), cmp.Compare(a.seq, b.seq))
		})
	}
	pos := make([]int, len(s.q.list))
	if s.opts.Objective != nil {
		return s.objectiveOrder(byQueue, remain, pos)
	}
	return func() *jobState {
		level := s.q.roots
		for {
			best := -1
			var bestBelow bool
			var bestShare float64
			for _, qi := range level {
				if remain[qi] == 0 {
					continue
				}
				below := s.q.list[qi].usage.GPUMilli < s.q.list[qi].q.Quota.Guaranteed.GPUMilli
				sh := s.q.share(qi, s.c.capacity)
				if best < 0 || (below && !bestBelow) || (below == bestBelow && sh < bestShare) {
					best, bestBelow, bestShare = qi, below, sh
				}
			}
			if best < 0 {
				return nil
			}
			if len(s.q.list[best].children) == 0 {
				j := byQueue[best][pos[best]]
				pos[best]++
				for a := best; a >= 0; a = s.q.list[a].parent {
					remain[a]--
				}
				return j
			}
			level = s.q.list[best].children
		}
	}
}
