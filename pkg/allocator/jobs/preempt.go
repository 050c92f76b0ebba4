package jobs

import (
	"cmp"
	"slices"
)

// victimCost orders victim sets: fewer jobs, then fewer that cannot resume
// from a checkpoint, then less run time thrown away (most recently started).
type victimCost struct {
	jobs, nonCkpt int
	elapsed       int64
}

func (a victimCost) less(b victimCost) bool {
	return cmp.Or(cmp.Compare(a.jobs, b.jobs), cmp.Compare(a.nonCkpt, b.nonCkpt), cmp.Compare(a.elapsed, b.elapsed)) < 0
}

func costOf(vs []*jobState, now int64) victimCost {
	var c victimCost
	for _, v := range vs {
		c.jobs++
		if !v.job.Checkpointable {
			c.nonCkpt++
		}
		c.elapsed += now - v.start
	}
	return c
}

// search is the state of one preemption search for job j.
type search struct {
	s      *Scheduler
	j      *jobState
	d      *demand
	mask   []bool
	now    int64
	onNode [][]*jobState // eligible victims with a pod on each node
	freed  []Resources   // per queue, by victims removed so far
}

// eligible says why running job v may be preempted for j, or "".
func (s *Scheduler) eligible(j, v *jobState, jUse Resources, now int64) string {
	if s.opts.Order == OrderLAS {
		if s.lasLevel(v, now) > s.lasLevel(j, now) {
			return "attained-service"
		}
		return ""
	}
	if v.queue == j.queue && v.job.Priority < j.job.Priority {
		return "priority"
	}
	if v.queue != j.queue && s.q.belowGuarantee(j.queue, jUse) && s.q.overGuarantee(v.queue, Resources{}) {
		return "reclaim"
	}
	if v.job.Preemptible && !s.q.within(v.queue, j.queue) {
		for _, r := range s.res {
			if now >= r.r.Start && now < r.r.End && s.q.within(j.queue, r.queue) && !s.q.within(v.queue, r.queue) {
				for _, p := range v.pods {
					if slices.Contains(r.nodes, p.Node) {
						return "reservation"
					}
				}
			}
		}
	}
	return ""
}

// preempt frees room for j by stopping the fewest eligible jobs (whole
// gangs), places j and returns the preemptions. It changes nothing and
// returns false if j would not fit even with every eligible job stopped, or
// if j's queue limits would still be exceeded.
func (s *Scheduler) preempt(j *jobState, d *demand, mask []bool, now int64) ([]Preemption, bool) {
	jUse := Resources{GPUMilli: d.milli * int64(d.num*j.n)}
	if d.kind == kindMIG {
		jUse = Resources{MIGSlices: int64(d.mig.Compute * j.n)}
	}
	sr := &search{s: s, j: j, d: d, mask: mask, now: now,
		onNode: make([][]*jobState, len(s.c.info)), freed: make([]Resources, len(s.q.list))}
	var cands []*jobState
	for _, v := range s.running {
		if !v.running || v.round == s.round {
			continue // stopped or started earlier in this Schedule call
		}
		if v.why = s.eligible(j, v, jUse, now); v.why != "" {
			cands = append(cands, v)
		}
	}
	if len(cands) == 0 {
		return nil, false
	}
	// Most preferred victims first: lower priority, checkpointable, most
	// recently started.
	slices.SortFunc(cands, func(a, b *jobState) int {
		return cmp.Or(cmp.Compare(a.job.Priority, b.job.Priority), cmp.Compare(ckpt(b), ckpt(a)),
			cmp.Compare(b.start, a.start), cmp.Compare(b.seq, a.seq))
	})
	for _, v := range cands {
		for _, p := range v.pods {
			if l := sr.onNode[p.Node]; len(l) == 0 || l[len(l)-1] != v {
				sr.onNode[p.Node] = append(l, v)
			}
		}
	}
	// Never preempt for a job that would still not fit: for a gang, check
	// with every candidate gone before searching; the search itself only
	// returns sets it placed the job with.
	if j.n > 1 {
		for _, v := range cands {
			s.c.unbindAll(v.pods, &v.d)
		}
		ok := s.c.fitsGang(d, j.n, j.job.Topology, j.job.Required, mask)
		for _, v := range cands {
			s.c.rebind(v, v.pods)
		}
		if !ok {
			return nil, false
		}
	}
	victims := sr.greedy()
	if victims == nil {
		return nil, false
	}
	victims = sr.prune(victims)
	// Apply: stop victims, place j, check quota exactly.
	for _, v := range victims {
		s.stop(v)
	}
	pods, _ := s.c.placeGang(d, j.n, j.job.Topology, j.job.Required, mask)
	if pods != nil {
		use, _ := s.placementUsage(j, pods)
		if _, over := s.q.overLimit(j.queue, use); over {
			s.c.unbindAll(pods, d)
			pods = nil
		}
	}
	if pods == nil { // quota still exceeded: undo
		for _, v := range victims {
			s.c.rebind(v, v.savedPods)
			v.running = true
			v.pods = v.savedPods
			s.q.charge(v.queue, v.usage, v.model, v.milli, 1)
		}
		return nil, false
	}
	s.commit(j, pods, now)
	out := make([]Preemption, len(victims))
	for i, v := range victims {
		v.attained += v.d.modelMilli() * int64(v.n) * (now - v.start)
		out[i] = Preemption{JobID: v.job.ID, Beneficiary: j.job.ID, Why: v.why}
	}
	return out, true
}

func ckpt(j *jobState) int {
	if j.job.Checkpointable {
		return 1
	}
	return 0
}

// rebind binds v's pods ps again after they were unbound.
func (c *cluster) rebind(v *jobState, ps []PodPlacement) {
	for i := range ps {
		c.bind(&ps[i], &v.d)
	}
}
