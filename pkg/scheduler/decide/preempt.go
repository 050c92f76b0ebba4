package decide

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/gpud/gpud/pkg/allocator"
	"github.com/gpud/gpud/pkg/allocator/jobs"
	"github.com/gpud/gpud/pkg/scheduler/plan"
	"github.com/gpud/gpud/pkg/scheduler/view"
)

// victim is a running pod, or a gang's running pods, that preemption
// evicts as one. The running members of an elastic gang (more running
// than its minMember) are each a victim too, at the gang's priority: up
// to spare of them may go alone, the gang keeping its minimum; beyond
// that only the whole gang goes.
type victim struct {
	key   string
	pods  []*plan.Pod
	holds []relPod
	// uses are what each pod (holds' order) counts against the queue.
	uses  []podUse
	prio  int32
	queue string
	ckpt  bool
	start time.Time
	// lost is the work eviction throws away: per pod the milli-GPUs it
	// holds times the seconds since its last checkpoint (a checkpointable
	// pod's), else since its start.
	lost  int64
	nodes []string
	// pdb names a PodDisruptionBudget that forbids evicting it, "" none.
	pdb string
	// gone: evicted earlier in this cycle (for a gang: it or a member).
	gone bool
	// why it may go for the current preemptor.
	why string
	// whole, on a member of an elastic gang, is the gang's victim.
	whole *victim
	// members, on an elastic gang's victim, are its members' victims;
	// spare is how many of them may still go alone (running members less
	// minMember, less those evicted earlier in this cycle).
	members []*victim
	spare   int
}

// podUse is one victim pod's usage, charged back to its queue when a
// what-if releases it.
type podUse struct {
	use   jobs.Resources
	model []jobs.ModelMilli
}

// optional reports whether v is a member of an elastic gang beyond its
// minimum: evicting it shrinks the gang without stopping it.
func (v *victim) optional() bool { return v.whole != nil }

// victimList builds the running pods preemption may pick: not terminating,
// holding gpud devices through claims no pod outside the victim shares; a
// gang's bound members form one victim, and an elastic gang's members are
// each one too (see victim).
func (c *cycle) victimList() []*victim {
	if c.victimsOK {
		return c.victims
	}
	c.victimsOK = true
	refs := map[string]int{}
	for _, pods := range [][]*plan.Pod{c.s.Bound, c.s.Pending} {
		for _, p := range pods {
			for _, cl := range p.Claims {
				if cl != nil {
					refs[view.ClaimID(cl)]++
				}
			}
		}
	}
	byKey := map[string]*victim{}
	var keys []string
	holds := c.boundHolds()
	for i, p := range c.s.Bound {
		if p.Pod.DeletionTimestamp != nil {
			continue
		}
		key := p.Key()
		if p.Group != "" {
			key = p.Group
		}
		v := byKey[key]
		if v == nil {
			q, err := c.queueOf(p)
			if err != nil {
				q = unqueued
			}
			v = &victim{key: key, prio: p.Priority, queue: q, ckpt: true}
			byKey[key] = v
			keys = append(keys, key)
		}
		c.addVictimPod(v, p, holds[i])
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := byKey[k]
		if !c.usableVictim(v, refs) {
			continue
		}
		c.victims = append(c.victims, v)
		g := c.s.Groups[k]
		if v.pods[0].Group == "" || g == nil || g.Invalid != "" || len(v.pods) <= int(max(g.MinMember, 1)) {
			continue
		}
		// An elastic gang: each member may go alone, at the gang's
		// priority, while the gang keeps minMember running.
		v.spare = len(v.pods) - int(max(g.MinMember, 1))
		for i, p := range v.pods {
			m := &victim{key: p.Key(), prio: v.prio, queue: v.queue, ckpt: true, whole: v}
			c.addVictimPod(m, p, v.holds[i])
			if c.usableVictim(m, refs) {
				v.members = append(v.members, m)
				c.victims = append(c.victims, m)
			}
		}
	}
	return c.victims
}

// addVictimPod adds bound pod p, holding h, to victim v.
func (c *cycle) addVictimPod(v *victim, p *plan.Pod, h relPod) {
	v.pods = append(v.pods, p)
	v.holds = append(v.holds, h)
	v.prio = max(v.prio, p.Priority)
	v.ckpt = v.ckpt && p.Checkpointable
	if st := startOf(p); st.After(v.start) {
		v.start = st
	}
	if !slices.Contains(v.nodes, h.node) {
		v.nodes = append(v.nodes, h.node)
		slices.Sort(v.nodes)
	}
	r, m := c.usageOf(p, h.node, resultsOf(h.allocs))
	v.uses = append(v.uses, podUse{use: r, model: m})
	v.lost += c.lostWork(p, m)
}

// usableVictim reports whether evicting v frees gpud devices (through
// claims, or a device plugin's GPUs) and takes no claim from a pod
// outside v (refs counts each claim's pods).
func (c *cycle) usableVictim(v *victim, refs map[string]int) bool {
	own := map[string]int{}
	gpu := false
	for _, p := range v.pods {
		for _, cl := range p.Claims {
			if cl == nil {
				continue
			}
			own[view.ClaimID(cl)]++
			if cl.Status.Allocation != nil && slices.ContainsFunc(cl.Status.Allocation.Devices.Results, func(r resourceapi.DeviceRequestAllocationResult) bool { return r.Driver == view.DriverName }) {
				gpu = true
			}
		}
	}
	// A pod holding GPUs through a device plugin (nvidia.com/gpu on a
	// node that advertises it) frees them when evicted too.
	gpu = gpu || slices.ContainsFunc(v.pods, func(p *plan.Pod) bool { return p.PluginDevices > 0 })
	for ck, n := range own {
		if refs[ck] > n {
			return false
		}
	}
	return gpu
}

// lostWork is the GPU-time, in milli-GPU-seconds, that evicting p throws
// away: the milli-GPUs it holds (models: whole GPUs, fractions, MIG slices)
// times the seconds since its last checkpoint if it is checkpointable and
// reported one after its start (a checkpoint in the future counts as now),
// else since its start.
func (c *cycle) lostWork(p *plan.Pod, models []jobs.ModelMilli) int64 {
	held := int64(0)
	for _, m := range models {
		held += m.Milli
	}
	since := startOf(p)
	if p.Checkpointable && p.LastCheckpoint.After(since) {
		since = p.LastCheckpoint
	}
	secs := int64(c.s.Now.Sub(since) / time.Second)
	return held * max(secs, 0)
}

// pdbBlocking names the PodDisruptionBudget that forbids evicting v now
// (its remaining disruptions, less this cycle's evictions, are fewer than
// v's pods it covers), or "".
func (c *cycle) pdbBlocking(v *victim) string {
	for _, b := range c.s.PDBs {
		if b == nil || b.Spec.Selector == nil {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
		if err != nil || sel.Empty() {
			continue
		}
		n := pdbCovers(b, sel, v.pods)
		if n > 0 && int(b.Status.DisruptionsAllowed)-c.pdbUsed[b.Namespace+"/"+b.Name] < n {
			return b.Namespace + "/" + b.Name
		}
	}
	return ""
}

func pdbCovers(b *policyv1.PodDisruptionBudget, sel labels.Selector, pods []*plan.Pod) int {
	n := 0
	for _, p := range pods {
		if p.Pod.Namespace == b.Namespace && sel.Matches(labels.Set(p.Pod.Labels)) {
			n++
		}
	}
	return n
}

// eligible says why v may be preempted for u ("" if it may not):
// "priority" (lower priority, same queue or a queue over its guarantee),
// "reclaim" (u's queue stays within its guarantee, v's is over it) or
// "reservation" (v runs on a node reserved, now, for u's queue).
func (c *cycle) eligible(u *unit, v *victim, uUse jobs.Resources) string {
	if v.prio < u.prio && (v.queue == u.queue || c.q.OverGuarantee(v.queue, jobs.Resources{})) {
		return "priority"
	}
	if v.queue != u.queue && c.q.BelowGuarantee(u.queue, uUse) && c.q.OverGuarantee(v.queue, jobs.Resources{}) {
		return "reclaim"
	}
	now := unixSeconds(c.s.Now)
	for _, r := range c.s.Reservations {
		if now < r.Start || now >= r.End || !c.q.Within(u.queue, r.Queue) || c.q.Within(v.queue, r.Queue) {
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
	sr.c.releasing += len(vs)
	for _, v := range vs {
		for i, h := range v.holds {
			if sr.freed[h.pod]++; sr.freed[h.pod] > 1 {
				continue
			}
			sr.c.release(h.allocs...)
			sr.c.releaseMeasured(h.allocs)
			sr.c.nodes.give(h.node, h.pod)
			sr.c.q.Charge(v.queue, v.uses[i].use, v.uses[i].model, -1)
		}
	}
}

// hold takes back what free released.
func (sr *search) hold(vs []*victim) {
	sr.c.releasing -= len(vs)
	for i := len(vs) - 1; i >= 0; i-- {
		v := vs[i]
		for j := len(v.holds) - 1; j >= 0; j-- {
			h := v.holds[j]
			if sr.freed[h.pod]--; sr.freed[h.pod] > 0 {
				continue
			}
			delete(sr.freed, h.pod)
			_ = sr.c.assume(h.allocs...)
			sr.c.holdMeasured(h.allocs)
			sr.c.nodes.take(h.node, h.pod)
			sr.c.q.Charge(v.queue, v.uses[j].use, v.uses[j].model, 1)
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
	if c.preemptions >= c.cfg.MaxPreemptionsPerCycle {
		return false, nil
	}
	c.preemptions++
	uUse := c.unitUse(u)
	var cands, free []*victim
	for _, v := range c.victimList() {
		if v.gone || slices.ContainsFunc(v.nodes, func(n string) bool { return c.nominated[n] }) {
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
		if v.pdb = c.pdbBlocking(v); v.pdb == "" {
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
			for _, b := range c.s.PDBs {
				if b == nil || b.Spec.Selector == nil {
					continue
				}
				if sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector); err == nil && !sel.Empty() && pdbCovers(b, sel, []*plan.Pod{p}) > 0 {
					c.pdbUsed[b.Namespace+"/"+b.Name]++
				}
			}
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
