package jobs

import (
	"slices"
	"sort"
)

func slicesContains[T comparable](s []T, v T) bool { return slices.Contains(s, v) }

func slicesSortFunc[T any](s []T, less func(a, b T) bool) {
	sort.SliceStable(s, func(x, y int) bool { return less(s[x], s[y]) })
}

// greedy finds a victim set that frees a placement for the job, trying the
// narrowest topology level first and, within it, every domain, keeping the
// cheapest. The cluster is unchanged when it returns.
func (sr *search) greedy() []*jobState {
	lvs := levels(sr.j.job.Topology, sr.j.job.Required)
	if sr.j.n <= 1 {
		lvs = []Level{LevelNone}
	}
	for _, l := range lvs {
		var best []*jobState
		var bestCost victimCost
		for _, nodes := range sr.s.c.groups[l] {
			vs, ok := sr.tryGroup(nodes)
			if !ok {
				continue
			}
			if c := costOf(vs, sr.now); best == nil || c.less(bestCost) {
				best, bestCost = vs, c
			}
		}
		if best != nil {
			return best
		}
	}
	return nil
}

// tryGroup places the job's pods one by one inside nodes; a pod that does
// not fit goes to the node whose victim set is cheapest. It returns the
// victims (non-nil on success, maybe empty) and undoes everything.
func (sr *search) tryGroup(nodes []int) ([]*jobState, bool) {
	c, d := sr.s.c, sr.d
	has := false
	for _, i := range nodes {
		if len(sr.onNode[i]) > 0 && (sr.mask == nil || !sr.mask[i]) {
			has = true
			break
		}
	}
	if !has {
		return nil, false
	}
	removed := []*jobState{}
	var placed []PodPlacement
	ok := true
	for range sr.j.n {
		if p, fit := c.bestChoice(d, nodes, sr.mask); fit {
			c.bind(&p, d)
			placed = append(placed, p)
			continue
		}
		bestNode := -1
		var bestSet []*jobState
		var bestCost victimCost
		for _, i := range nodes {
			if len(sr.onNode[i]) == 0 || (sr.mask != nil && sr.mask[i]) {
				continue
			}
			bound := len(sr.onNode[i])
			if bestNode >= 0 {
				bound = bestCost.jobs
			}
			set := sr.nodeVictims(i, bound)
			if set == nil {
				continue
			}
			if cost := costOf(set, sr.now); bestNode < 0 || cost.less(bestCost) {
				bestNode, bestSet, bestCost = i, set, cost
			}
		}
		if bestNode < 0 {
			ok = false
			break
		}
		for _, v := range bestSet {
			sr.remove(v)
			removed = append(removed, v)
		}
		p, fit := c.choose(bestNode, d)
		if !fit {
			ok = false
			break
		}
		c.bind(&p, d)
		placed = append(placed, p)
	}
	c.unbindAll(placed, d)
	for k := len(removed) - 1; k >= 0; k-- {
		sr.restore(removed[k])
	}
	if !ok {
		return nil, false
	}
	return removed, true
}

func (sr *search) usable(v *jobState) bool {
	if v.removed {
		return false
	}
	return v.why != "reclaim" || sr.s.q.overGuarantee(v.queue, sr.freed[v.queue])
}

func (sr *search) remove(v *jobState) {
	sr.s.c.unbindAll(v.pods, &v.d)
	v.removed = true
	sr.freed[v.queue] = sr.freed[v.queue].Add(v.usage)
}

func (sr *search) restore(v *jobState) {
	sr.s.c.rebind(v, v.pods)
	v.removed = false
	sr.freed[v.queue] = sr.freed[v.queue].Sub(v.usage)
}

// onNodeToggle unbinds (or binds back) v's pods on node i only: enough to
// test whether one pod fits on i.
func (sr *search) toggle(v *jobState, i int, off bool) {
	for k := range v.pods {
		if v.pods[k].Node != i {
			continue
		}
		if off {
			sr.s.c.unbind(&v.pods[k], &v.d)
		} else {
			sr.s.c.bind(&v.pods[k], &v.d)
		}
	}
}

func (sr *search) fitsOn(i int, vs ...*jobState) bool {
	for _, v := range vs {
		sr.toggle(v, i, true)
	}
	ok := sr.s.c.podsFit(i, sr.d, 1) > 0
	for k := len(vs) - 1; k >= 0; k-- {
		sr.toggle(vs[k], i, false)
	}
	return ok
}

// nodeVictims is the smallest set of usable victims on node i whose removal
// lets one pod fit there, or nil. Sizes 1 and 2 are searched exhaustively
// (in preference order); larger sets are greedy in preference order, then
// pruned until no victim can be dropped. Fractions, GPU memory and MIG
// slices are checked by the exact fit test.
// Nodes that need more than bound victims are skipped (nil).
func (sr *search) nodeVictims(i, bound int) []*jobState {
	var cs []*jobState
	for _, v := range sr.onNode[i] {
		if sr.usable(v) {
			cs = append(cs, v)
		}
	}
	if len(cs) == 0 {
		return nil
	}
	lb := sr.minVictims(i, cs)
	if lb > bound {
		return nil
	}
	set := sr.targeted(i, cs)
	if len(set) == 1 || (set != nil && len(set) <= lb) {
		return set
	}
	if set == nil && !sr.fitsOn(i, cs...) {
		return nil
	}
	if lb <= 1 {
		for _, v := range cs {
			if sr.fitsOn(i, v) {
				return []*jobState{v}
			}
		}
	}
	if len(set) != 2 && len(cs) <= 16 && lb <= 2 {
		for a := range cs {
			for b := a + 1; b < len(cs); b++ {
				if sr.fitsOn(i, cs[a], cs[b]) {
					return []*jobState{cs[a], cs[b]}
				}
			}
		}
	}
	if len(set) == 2 {
		return set
	}
	greedy := []*jobState{}
	for _, v := range cs {
		greedy = append(greedy, v)
		if sr.fitsOn(i, greedy...) {
			break
		}
	}
	for k := len(greedy) - 1; k >= 0 && len(greedy) > 1; k-- {
		without := append(append([]*jobState{}, greedy[:k]...), greedy[k+1:]...)
		if sr.fitsOn(i, without...) {
			greedy = without
		}
	}
	if set == nil || costOf(greedy, sr.now).less(costOf(set, sr.now)) {
		set = greedy
	}
	return set
}

// minVictims is a lower bound on the victims of cs needed on node i: for
// whole GPUs, the missing GPUs over the most any victim holds there; else 1.
func (sr *search) minVictims(i int, cs []*jobState) int {
	if sr.d.kind != kindWhole {
		return 1
	}
	missing := sr.d.num - sr.s.c.free[i].wholeFree
	most := 0
	for _, v := range cs {
		n := 0
		for _, p := range v.pods {
			if p.Node == i {
				n += len(p.GPUs)
			}
		}
		most = max(most, n)
	}
	if most == 0 {
		return len(cs) + 1
	}
	return max(1, (missing+most-1)/most)
}

// targeted tries the GPU-shaped victim sets of node i: for a MIG profile,
// the victims overlapping each allowed slot of each MIG GPU; for a
// fraction, each GPU's victims largest first; for whole GPUs, the GPUs
// whose occupants are fewest. It returns the smallest set that fits, or nil.
func (sr *search) targeted(i int, cs []*jobState) []*jobState {
	c, d := sr.s.c, sr.d
	inf := &c.info[i]
	var best []*jobState
	try := func(set []*jobState) {
		if len(set) > 0 && (best == nil || len(set) < len(best)) && sr.fitsOn(i, set...) {
			best = set
		}
	}
	onGPU := func(g int) []*jobState { // victims on g
		var out []*jobState
		for _, v := range cs {
			if v.onGPU(i, g) {
				out = append(out, v)
			}
		}
		return out
	}
	switch d.kind {
	case kindMIG:
		for g, sp := range inf.gpus {
			if !sp.mig || !sp.healthy || !d.models.has(sp.model) {
				continue
			}
			for _, st := range d.mig.Starts {
				m := d.mig.Mask(st)
				var set []*jobState
				for _, v := range cs {
					for _, p := range v.pods {
						if p.Node == i && p.MIGStart >= 0 && slicesContains(p.GPUs, g) && v.d.mig.Mask(p.MIGStart)&m != 0 {
							set = append(set, v)
							break
						}
					}
				}
				try(set)
			}
		}
	case kindFrac:
		for g, sp := range inf.gpus {
			if sp.mig || !sp.healthy || !d.models.has(sp.model) {
				continue
			}
			on := onGPU(g)
			slicesSortFunc(on, func(a, b *jobState) bool { return a.d.milli*int64(a.d.num) > b.d.milli*int64(b.d.num) })
			for k := 1; k <= len(on); k++ {
				if sr.fitsOn(i, on[:k]...) {
					try(append([]*jobState{}, on[:k]...))
					break
				}
			}
		}
	case kindWhole:
		var gs [64]int
		var cnt [64]int
		n := 0
		for g, sp := range inf.gpus {
			if g >= 64 || sp.mig || !sp.healthy || !d.models.has(sp.model) {
				continue
			}
			for _, v := range cs {
				if v.onGPU(i, g) {
					cnt[g]++
				}
			}
			gs[n] = g
			n++
		}
		if n < d.num {
			break
		}
		chosen := gs[:n]
		slicesSortFunc(chosen, func(a, b int) bool { return cnt[a] < cnt[b] })
		var set []*jobState
		for _, v := range cs {
			for _, g := range chosen[:d.num] {
				if v.onGPU(i, g) {
					set = append(set, v)
					break
				}
			}
		}
		try(set)
	}
	return best
}

// prune drops victims (least preferred first) the job fits without.
// A single pod's set is already minimal on its node, so only gangs prune.
func (sr *search) prune(vs []*jobState) []*jobState {
	if len(vs) <= 1 || sr.j.n <= 1 {
		return vs
	}
	for k := len(vs) - 1; k >= 0; k-- {
		rest := append(append([]*jobState{}, vs[:k]...), vs[k+1:]...)
		for _, v := range rest {
			sr.remove(v)
		}
		ok := sr.s.c.fitsGang(sr.d, sr.j.n, sr.j.job.Topology, sr.j.job.Required, sr.mask)
		for m := len(rest) - 1; m >= 0; m-- {
			sr.restore(rest[m])
		}
		if ok {
			vs = rest
		}
	}
	return vs
}

// onGPU reports whether v has a pod on GPU g of node i.
func (v *jobState) onGPU(i, g int) bool {
	for _, p := range v.pods {
		if p.Node == i && slices.Contains(p.GPUs, g) {
			return true
		}
	}
	return false
}
