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
	var res Result
	memo := map[memoKey]Reason{}
	noVictims := map[memoKey]bool{}
	var head *jobState
	var bf *backfill
	next := s.order()
	for j := next(); j != nil; j = next() {
		if head != nil && !s.opts.Backfill {
			res.Pending = append(res.Pending, Pending{j.job.ID, reasonf(CodeBlocked, "behind blocked job %q (backfill off)", head.job.ID)})
			continue
		}
		if why, ok := s.never(j); !ok {
			res.Pending = append(res.Pending, Pending{j.job.ID, why})
			continue
		}
		dd := j.d
		models, why, ok := s.q.allowedModels(j.queue, &j.d, j.d.modelMilli()*int64(j.n), s.c)
		if !ok {
			res.Pending = append(res.Pending, Pending{j.job.ID, why})
			continue
		}
		dd.models = models
		mask, sig := s.reservedMask(j, now)
		key := memoKey{cpu: dd.cpu, mem: dd.mem, milli: dd.milli, gmem: dd.gmem, kind: dd.kind, num: dd.num, n: j.n,
			mig: dd.mig, models: dd.models, lv: j.job.Topology, req: j.job.Required, mask: sig}
		if r, ok := memo[key]; ok && (!s.opts.Preemption || head != nil || noVictims[key]) {
			res.Pending = append(res.Pending, Pending{j.job.ID, r})
			continue
		}
		if bf != nil {
			bf.ensure() // project from the state the head blocked in
		}
		pods, miss := s.c.placeGang(&dd, j.n, j.job.Topology, j.job.Required, mask)
		if pods == nil {
			r := s.capacityReason(j, &dd, miss, mask)
			if s.opts.Preemption && head == nil && !noVictims[key] {
				if vs, ok := s.preempt(j, &dd, mask, now); ok {
					res.Preempted = append(res.Preempted, vs...)
					res.Started = append(res.Started, Start{JobID: j.job.ID, Pods: j.pods})
					clear(memo)
					continue
				}
				noVictims[key] = true
			}
			memo[key] = r
			res.Pending = append(res.Pending, Pending{j.job.ID, r})
			if head == nil {
				head = j
				if s.opts.Backfill {
					bf = &backfill{s: s, head: j, hd: dd, now: now}
				}
			}
			continue
		}
		usage, _ := s.placementUsage(j, pods)
		if r, over := s.q.overLimit(j.queue, usage); over {
			s.c.unbindAll(pods, &dd)
			res.Pending = append(res.Pending, Pending{j.job.ID, r})
			continue
		}
		if bf != nil {
			if r, ok := bf.admit(j, &dd, pods, now); !ok {
				s.c.unbindAll(pods, &dd)
				res.Pending = append(res.Pending, Pending{j.job.ID, r})
				continue
			}
		}
		s.commit(j, pods, now)
		res.Started = append(res.Started, Start{JobID: j.job.ID, Pods: pods, Backfilled: head != nil})
	}
	for _, p := range res.Preempted {
		if j := s.jobs[p.JobID]; !j.running {
			res.Pending = append(res.Pending, Pending{p.JobID, reasonf(CodePreempted, "preempted for job %q (%s)", p.Beneficiary, p.Why)})
		}
	}
	if bf != nil {
		res.Reserved, res.ReservedStart = bf.head.job.ID, -1
		if bf.ready {
			res.ReservedStart = bf.start
		}
	}
	// Keep jobs stopped by preemption, and those not reached, pending, in
	// submission order.
	s.pending = slices.DeleteFunc(s.pending, func(j *jobState) bool { return j.running })
	for _, p := range res.Preempted {
		v := s.jobs[p.JobID]
		i, _ := slices.BinarySearchFunc(s.pending, v.seq, func(x *jobState, seq int) int { return cmp.Compare(x.seq, seq) })
		s.pending = slices.Insert(s.pending, i, v)
	}
	s.running = slices.DeleteFunc(s.running, func(j *jobState) bool { return !j.running })
	return res
}

// order returns an iterator over pending jobs in policy order. With fair
// share it picks, at every level of the queue tree, the child below its
// guarantee or else with the lowest weighted DRF share, re-evaluated after
// each job since starts change shares.
func (s *Scheduler) order() func() *jobState {
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
			return cmp.Or(cmp.Compare(a.job.Submit, b.job.Submit), cmp.Compare(a.seq, b.seq))
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
			return cmp.Or(cmp.Compare(b.job.Priority, a.job.Priority), cmp.Compare(a.job.Submit, b.job.Submit), cmp.Compare(a.seq, b.seq))
		})
	}
	pos := make([]int, len(s.q.list))
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
