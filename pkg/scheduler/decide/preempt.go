package decide

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gpud/gpud/pkg/allocator"
	"github.com/gpud/gpud/pkg/allocator/jobs"
	"github.com/gpud/gpud/pkg/scheduler/plan"
	"github.com/gpud/gpud/pkg/scheduler/view"
)

// eligible says why v may be preempted for u ("" if it may not):
// "priority" (lower priority, same queue or a queue over its guarantee),
// "reclaim" (u's queue stays within its guarantee, v's is over it) or
// "reservation" (v runs on a node reserved, now, for u's queue).
func (c *cycle) eligible(u *unit, v *victim, uUse jobs.Resources) string {
	if v.prio < u.prio && (v.queue == u.queue || c.fair.tree.OverGuarantee(v.queue, jobs.Resources{})) {
		return "priority"
	}
	if v.queue != u.queue && c.fair.tree.BelowGuarantee(u.queue, uUse) && c.fair.tree.OverGuarantee(v.queue, jobs.Resources{}) {
		return "reclaim"
	}
	now := unixSeconds(c.s.Now)
	for _, r := range c.s.Reservations {
		if now < r.Start || now >= r.End || !c.fair.tree.Within(u.queue, r.Queue) || c.fair.tree.Within(v.queue, r.Queue) {
			continue
		}
		for _, n := range v.nodes {
			if slices.Contains(r.Nodes, n) {
				return "reservation"
			}
		}
	}
	return ""
}

// unitUse estimates the GPU u asks, for the reclaim rule: milli-GPU and
// MIG compute slices.
func (c *cycle) unitUse(u *unit) jobs.Resources {
	var r jobs.Resources
	for _, p := range u.pods {
		p = c.devicesOf(p)
		r.GPUMilli += p.PluginDevices * allocator.MilliPerGPU
		items, err := c.demand(p)
		if err != nil {
			continue
		}
		for _, it := range items {
			switch it.Kind {
			case view.Whole:
				r.GPUMilli += int64(it.Count) * allocator.MilliPerGPU
			case view.Fraction:
				r.GPUMilli++
			case view.MIG:
				if i := allocator.MIGProfileIndex(it.Alloc.MIGProfile); i >= 0 {
					r.MIGSlices += int64(allocator.MIGProfiles[i].Compute)
				}
			}
		}
	}
	return r
}

// search is one preemption search for u.
type search struct {
	c     *cycle
	u     *unit
	tests int
	// freed counts, per pod, the victims released that hold it (a gang
	// and its members overlap): a pod is released on its first and held
	// again on its last.
	freed map[*plan.Pod]int
	// taken are the victims this search has removed so far (find).
	taken []*victim
}

// free releases vs (devices, CPU, memory, queue usage) on the view; a pod
// already released by another victim is not released twice.
func (sr *search) free(vs []*victim) {
	if sr.freed == nil {
		sr.freed = map[*plan.Pod]int{}
	}
	sr.c.tel.enter(len(vs))
	for _, v := range vs {
		for i, h := range v.holds {
			if sr.freed[h.pod]++; sr.freed[h.pod] > 1 {
				continue
			}
			sr.c.release(h.allocs...)
			sr.c.tel.release(h.allocs)
			sr.c.nodes.give(h.node, h.pod)
			sr.c.fair.tree.Charge(v.queue, v.uses[i].use, v.uses[i].model, -1)
		}
	}
}

// hold takes back what free released.
func (sr *search) hold(vs []*victim) {
	sr.c.tel.leave(len(vs))
	for i := len(vs) - 1; i >= 0; i-- {
		v := vs[i]
		for j := len(v.holds) - 1; j >= 0; j-- {
			h := v.holds[j]
			if sr.freed[h.pod]--; sr.freed[h.pod] > 0 {
				continue
			}
			delete(sr.freed, h.pod)
			_ = sr.c.assume(h.allocs...)
			sr.c.tel.hold(h.allocs)
			sr.c.nodes.take(h.node, h.pod)
			sr.c.fair.tree.Charge(v.queue, v.uses[j].use, v.uses[j].model, 1)
		}
	}
}

// allowed reports whether evicting set, with the victims the search took
// already, keeps every elastic gang at its minimum: no more of its
// members alone than its spare, unless the whole gang goes too.
func (sr *search) allowed(set []*victim) bool {
	alone := map[*victim]int{}
	for _, l := range [][]*victim{sr.taken, set} {
		for _, v := range l {
			if v.whole != nil {
				alone[v.whole]++
			}
		}
	}
	for w, n := range alone {
		if n > w.spare && !slices.Contains(sr.taken, w) && !slices.Contains(set, w) {
			return false
		}
	}
	return true
}

func (sr *search) spent() bool { return sr.tests >= sr.c.cfg.MaxFitTests }

// fitsOn reports whether pod p fits on node with vs gone.
func (sr *search) fitsOn(p *plan.Pod, node string, vs []*victim) bool {
	sr.tests++
	sr.free(vs)
	pl, _ := sr.c.placePod(sr.u, p, map[string]bool{node: true})
	if pl != nil {
		sr.c.undo([]*placed{pl})
	}
	sr.hold(vs)
	return pl != nil
}

// better reports whether victim set a is preferred to b: fewer pods, then
// lower highest priority, then fewer pods whose eviction stops their
// workload (an elastic gang's member beyond its minimum only shrinks it),
// then jobs' order (fewer that cannot resume from a checkpoint, less
// GPU-time lost since the last checkpoints, less run time lost).
func (sr *search) better(a, b []*victim) bool {
	ca, cb := sr.cost(a), sr.cost(b)
	if ca.Victims != cb.Victims {
		return ca.Victims < cb.Victims
	}
	if pa, pb := topPrio(a), topPrio(b); pa != pb {
		return pa < pb
	}
	if ea, eb := essential(a), essential(b); ea != eb {
		return ea < eb
	}
	return ca.Less(cb)
}

func topPrio(vs []*victim) int32 {
	p := int32(math.MinInt32)
	for _, v := range vs {
		p = max(p, v.prio)
	}
	return p
}

// essential counts the pods of vs that are not optional members.
func essential(vs []*victim) int {
	n := 0
	for _, v := range vs {
		if !v.optional() {
			n += len(v.pods)
		}
	}
	return n
}

// cost is jobs' cost of evicting vs; a member whose whole gang is in vs
// is counted with the gang.
func (sr *search) cost(vs []*victim) jobs.VictimCost {
	var k jobs.VictimCost
	for _, v := range vs {
		if v.whole != nil && slices.Contains(vs, v.whole) {
			continue
		}
		k.Victims += len(v.pods)
		if !v.ckpt {
			k.NonCheckpointable += len(v.pods)
		}
		k.LostGPUMilliSeconds += v.lost
		k.ElapsedSeconds += int64(sr.c.s.Now.Sub(v.start).Seconds())
	}
	return k
}

// nodeVictims is the cheapest set of cs (in preference order) whose
// eviction lets p fit on node, or nil: one victim and pairs searched
// exhaustively, larger sets greedily in preference order then pruned.
// A set that would take an elastic gang below its minimum (allowed) is
// not considered. A set of more pods than victims (a gang) does not end
// the search early: fewer pods in more victims may do.
func (sr *search) nodeVictims(p *plan.Pod, node string, cs []*victim) []*victim {
	if len(cs) == 0 || sr.spent() || !sr.fitsOn(p, node, cs) {
		return nil
	}
	var best []*victim
	consider := func(set []*victim) {
		if best == nil || sr.better(set, best) {
			best = slices.Clone(set)
		}
	}
	for _, v := range cs {
		if sr.spent() {
			break
		}
		if one := []*victim{v}; sr.allowed(one) && sr.fitsOn(p, node, one) {
			consider(one)
		}
	}
	if best != nil && sr.cost(best).Victims <= 1 {
		return best
	}
	if len(cs) <= 16 {
		for a := range cs {
			for b := a + 1; b < len(cs) && !sr.spent(); b++ {
				if two := []*victim{cs[a], cs[b]}; sr.allowed(two) && sr.fitsOn(p, node, two) {
					consider(two)
				}
			}
		}
		if best != nil && sr.cost(best).Victims <= 2 {
			return best
		}
	}
	greedy, fit := []*victim{}, false
	for _, v := range cs {
		if sr.spent() {
			break
		}
		if !sr.allowed(append(slices.Clone(greedy), v)) {
			continue
		}
		greedy = append(greedy, v)
		if fit = sr.fitsOn(p, node, greedy); fit {
			break
		}
	}
	if !fit {
		return best // the search budget ran out before a set was found
	}
	for k := len(greedy) - 1; k >= 0 && len(greedy) > 1 && !sr.spent(); k-- {
		without := append(slices.Clone(greedy[:k]), greedy[k+1:]...)
		if sr.allowed(without) && sr.fitsOn(p, node, without) {
			greedy = without
		}
	}
	consider(greedy)
	return best
}

// bestFor finds the node and cheapest victim set of cands (not in
// skip) that lets p fit there.
func (sr *search) bestFor(p *plan.Pod, cands []*victim, skip map[*victim]bool) []*victim {
	var nodes []string
	for _, v := range cands {
		if !skip[v] {
			for _, n := range v.nodes {
				if !slices.Contains(nodes, n) {
					nodes = append(nodes, n)
				}
			}
		}
	}
	slices.Sort(nodes)
	var best []*victim
	for _, n := range nodes {
		var cs []*victim
		for _, v := range cands {
			if !skip[v] && slices.Contains(v.nodes, n) {
				cs = append(cs, v)
			}
		}
		if set := sr.nodeVictims(p, n, cs); set != nil && (best == nil || sr.better(set, best)) {
			best = set
		}
	}
	return best
}

// find returns the victims among cands that let all of u fit, or nil. It
// places u's pods one by one; a pod that does not fit evicts the cheapest
// set on one node; gang sets are then pruned. The view is unchanged.
func (sr *search) find(cands []*victim) []*victim {
	c, u := sr.c, sr.u
	var removed []*victim
	taken := map[*victim]bool{}
	var pls []*placed
	ok, misses := true, 0
	for _, p := range u.pods {
		if pl, _ := c.placePod(u, p, nil); pl != nil {
			pls = append(pls, pl)
			continue
		}
		set := sr.bestFor(p, cands, taken)
		if set == nil {
			if misses++; misses > len(u.pods)-u.need {
				ok = false
				break
			}
			continue
		}
		sr.free(set)
		removed = append(removed, set...)
		sr.taken = removed
		for _, v := range set {
			taken[v] = true
		}
		pl, _ := c.placePod(u, p, nil)
		if pl == nil {
			ok = false
			break
		}
		pls = append(pls, pl)
	}
	c.undo(pls)
	sr.hold(removed)
	sr.taken = nil
	if !ok || len(removed) == 0 {
		return nil
	}
	if len(removed) > 1 && u.group != nil {
		for k := len(removed) - 1; k >= 0 && !sr.spent(); k-- {
			rest := append(slices.Clone(removed[:k]), removed[k+1:]...)
			if !sr.allowed(rest) {
				continue
			}
			sr.tests++
			sr.free(rest)
			_, fits := c.tryUnit(u, true)
			sr.hold(rest)
			if fits {
				removed = rest
			}
		}
	}
	return removed
}

// preempt frees room for u by evicting the cheapest eligible victim set.
// done: evictions are emitted and u waits nominated. Otherwise f, if not
// nil, is a better reason than u's own (victims exist but a
// PodDisruptionBudget protects them). Nothing is evicted unless a what-if
// with the victims gone places all of u within its queue's limits.
func (c *cycle) preempt(u *unit) (done bool, f *failure) {
	if !c.pre.start() {
		return false, nil
	}
	uUse := c.unitUse(u)
	var cands, free []*victim
	for _, v := range c.victimList() {
		if v.gone || c.pre.held(v.nodes) {
			continue // one preemptor per node a cycle: plans made side by side could collide
		}
		if v.why = c.eligible(u, v, uUse); v.why != "" {
			cands = append(cands, v)
		}
	}
	if len(cands) == 0 {
		return false, nil
	}
	// Most preferred first: lower priority, an elastic gang's optional
	// members, checkpointable, least GPU-time lost since the last
	// checkpoint, most recently started.
	slices.SortStableFunc(cands, func(a, b *victim) int {
		return cmp.Or(cmp.Compare(a.prio, b.prio), cmp.Compare(flag(b.optional()), flag(a.optional())), cmp.Compare(flag(b.ckpt), flag(a.ckpt)),
			cmp.Compare(a.lost, b.lost), b.start.Compare(a.start), cmp.Compare(a.key, b.key))
	})
	if len(cands) > c.cfg.MaxVictimCandidates {
		cands = cands[:c.cfg.MaxVictimCandidates]
	}
	for _, v := range cands {
		if v.pdb = c.pre.pdbBlocking(c.s.PDBs, v.pods); v.pdb == "" {
			free = append(free, v)
		}
	}
	sr := &search{c: c, u: u}
	vs := sr.find(free)
	if vs == nil {
		if len(free) == len(cands) {
			return false, nil
		}
		sr.tests = 0
		all := sr.find(cands)
		if all == nil {
			return false, nil
		}
		var pdbs []string
		for _, v := range all {
			if v.pdb != "" && !slices.Contains(pdbs, v.pdb) {
				pdbs = append(pdbs, v.pdb)
			}
		}
		return false, fail(CodePDB, "%s fits only by preempting pods whose PodDisruptionBudget %s allows no disruption now",
			u.name(), strings.Join(pdbs, ", "))
	}
	// Verify: with the victims gone, u places whole, within its limits.
	sr.free(vs)
	pls, _ := c.placeUnit(u, true)
	// The placement stays held for the rest of the cycle, and the victims
	// too (they run until evicted): the room is u's, not a later pod's.
	sr.hold(vs)
	if pls == nil {
		return false, nil
	}
	at := c.holdNominated(u, pls)
	var names, nodes []string
	n := 0
	forPod := u.pods[0]
	for _, p := range u.pods {
		if at[p] != "" {
			forPod = p
			break
		}
	}
	evicted := map[*plan.Pod]bool{}
	for _, v := range vs {
		v.gone = true
		for _, m := range v.members {
			m.gone = true
		}
		if w := v.whole; w != nil {
			// The rest of the gang runs on; it goes whole in a later
			// cycle, if at all, and its members alone while spare lasts.
			w.gone = true
			w.spare--
		}
		for _, p := range v.pods {
			if evicted[p] {
				continue
			}
			evicted[p] = true
			n++
			names = append(names, p.Key())
			c.out.Evictions = append(c.out.Evictions, plan.Eviction{Victim: p, For: forPod, Why: v.why})
			c.pre.evicted(c.s.PDBs, p)
			if node := p.Pod.Spec.NodeName; !slices.Contains(nodes, node) {
				nodes = append(nodes, node)
			}
		}
	}
	slices.Sort(nodes)
	why := vs[0].why
	c.nominate(u, at, fmt.Sprintf("preempting %d %s on %s (%s): %s",
		n, plural(n, "pod", "pods"), strings.Join(nodes, ", "), why, strings.Join(names, ", ")))
	return true, nil
}

func flag(b bool) int {
	if b {
		return 1
	}
	return 0
}
