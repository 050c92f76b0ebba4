package decide

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gpud/gpud/pkg/allocator"
	"github.com/gpud/gpud/pkg/allocator/jobs"
	"github.com/gpud/gpud/pkg/scheduler/plan"
	"github.com/gpud/gpud/pkg/scheduler/view"
)

// placed is one pod placed on the view in this cycle.
type placed struct {
	pod *plan.Pod
	// as is pod as placed on node: pod itself, or the entry of
	// pod.PerNode that holds there (its claims, its device-plugin use).
	as   *plan.Pod
	node string
	// allocs are the new allocations, assumed on the view.
	allocs []view.Allocation
	// reserve are the pod's already allocated claims (reservedFor only).
	reserve []view.Allocation
}

// failure is why a pod or unit did not place.
type failure struct {
	code, msg string
	// room: the unit could place with more free room (capacity, topology,
	// reserved nodes), so preemption and backfill apply.
	room bool
}

func fail(code, format string, args ...any) *failure {
	return &failure{code: code, msg: fmt.Sprintf(format, args...)}
}

// undo takes placements back off the view.
func (c *cycle) undo(pls []*placed) {
	for i := len(pls) - 1; i >= 0; i-- {
		c.release(pls[i].allocs...)
		c.nodes.give(pls[i].node, pls[i].pod)
	}
}

// placeUnit places every pod of u (a gang: at least u.need of them inside
// the narrowest topology domain that holds them) and checks u's queue
// limits. On failure the view is as before.
func (c *cycle) placeUnit(u *unit, quota bool) ([]*placed, *failure) {
	var pls []*placed
	var f *failure
	if u.group == nil {
		var pl *placed
		if nom := u.pods[0].Pod.Status.NominatedNodeName; nom != "" {
			// Victims were evicted there for it: take that room first.
			pl, _ = c.placePod(u, u.pods[0], map[string]bool{nom: true})
		}
		if pl == nil {
			pl, f = c.placePod(u, u.pods[0], nil)
		}
		if pl != nil {
			pls = []*placed{pl}
		}
	} else {
		pls, f = c.placeGang(u)
	}
	if pls == nil {
		return nil, f
	}
	if quota {
		var use jobs.Resources
		var models []jobs.ModelMilli
		for _, pl := range pls {
			r, m := c.usageOf(pl.as, pl.node, resultsOf(pl.allocs))
			use = use.Add(r)
			models = mergeModels(models, m)
		}
		if e, over := c.fair.tree.Over(u.queue, use, models); over {
			c.undo(pls)
			code := jobs.CodeQuota
			if e.Model != "" {
				code = jobs.CodeModelQuota
			}
			return nil, &failure{code: code, msg: excessMessage(e, u)}
		}
	}
	return pls, nil
}

func mergeModels(a, b []jobs.ModelMilli) []jobs.ModelMilli {
	for _, m := range b {
		i := slices.IndexFunc(a, func(x jobs.ModelMilli) bool { return x.Model == m.Model })
		if i < 0 {
			a = append(a, m)
			continue
		}
		a[i].Milli += m.Milli
	}
	return a
}

// nodeGroup is one topology domain: its name and nodes.
type nodeGroup struct {
	name  string
	nodes map[string]bool
}

type level struct {
	name   string
	groups []nodeGroup
}

// levels lists the topology domains a gang tries, narrowest first:
// NVLink domains (the GFD clique label, else each node), racks, zones.
// Nodes without the level's label are left out of it; a level that groups
// nodes as the one before it is skipped. The whole cluster comes last.
func (c *cycle) levels() []level {
	var out []level
	prev := ""
	for _, lv := range []struct{ name, label string }{
		{"NVLink domain", jobs.LabelNVLinkDomain}, {"rack", c.cfg.RackLabel}, {"zone", jobs.LabelZone},
	} {
		byName := map[string]map[string]bool{}
		var names []string
		for _, n := range c.v.Nodes() {
			key := n.Labels[lv.label]
			if key == "" {
				if lv.label != jobs.LabelNVLinkDomain {
					continue
				}
				key = "node " + n.Name
			}
			if byName[key] == nil {
				byName[key] = map[string]bool{}
				names = append(names, key)
			}
			byName[key][n.Name] = true
		}
		slices.Sort(names)
		l := level{name: lv.name}
		var sig strings.Builder
		for _, k := range names {
			l.groups = append(l.groups, nodeGroup{name: k, nodes: byName[k]})
			fmt.Fprintf(&sig, "%d,", len(byName[k]))
			for _, n := range slices.Sorted(mapKeys(byName[k])) {
				sig.WriteString(n + ",")
			}
			sig.WriteByte(';')
		}
		if len(l.groups) == 0 || sig.String() == prev || (len(l.groups) == 1 && len(l.groups[0].nodes) == len(c.v.Nodes())) {
			continue
		}
		prev = sig.String()
		out = append(out, l)
	}
	return append(out, level{name: "cluster", groups: []nodeGroup{{name: "cluster"}}})
}

func mapKeys(m map[string]bool) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// placeGang places u's members inside one domain, narrowest level first
// (gangLevels; nominated nodes, then a healed gang's old domains, before
// them), keeping the first domain where at least u.need of them fit.
func (c *cycle) placeGang(u *unit) ([]*placed, *failure) {
	lvs := c.gangLevels(u)
	required := u.topo != nil && u.topo.required
	// A healed gang tries the domains it ran in first.
	lvs = append(c.homeLevels(u), lvs...)
	// Nominated members (room was made for them) try their nodes first.
	nominated := map[string]bool{}
	for _, p := range u.pods {
		if n := p.Pod.Status.NominatedNodeName; n != "" {
			nominated[n] = true
		}
	}
	if len(nominated) > 0 && (!required || c.within(u.topo, nominated, u.at)) {
		lvs = append([]level{{name: "nominated", groups: []nodeGroup{{name: "nominated", nodes: nominated}}}}, lvs...)
	}
	// Every member in one domain first; then, for a gang with more
	// members than it needs, as many as minMember asks.
	needs := []int{len(u.pods)}
	if u.need < len(u.pods) {
		needs = append(needs, u.need)
	}
	var last *failure
	for _, need := range needs {
		gpus := c.wholeGPUs(u, need)
		for _, lv := range lvs {
			tried := 0
			for _, g := range lv.groups {
				if tried >= c.cfg.MaxGroupsPerLevel {
					break
				}
				if g.nodes != nil && c.groupGPUs(g) < gpus {
					continue // cannot hold the gang's whole GPUs at all
				}
				tried++
				pls, f := c.fillGang(u, g.nodes, need)
				if pls != nil {
					return pls, nil
				}
				if last == nil || need == u.need {
					last = f
				}
			}
		}
	}
	if required {
		return nil, c.requiredFailure(u, last)
	}
	return nil, last
}

// fillGang places u's members on only (nil: any node) one by one; fewer
// than need placed undoes them all. Members beyond need that do not fit
// are left out (they wait).
func (c *cycle) fillGang(u *unit, only map[string]bool, need int) ([]*placed, *failure) {
	var pls []*placed
	var first *failure
	var firstPod *plan.Pod
	misses := 0
	for _, p := range u.pods {
		var pl *placed
		var f *failure
		if nom := p.Pod.Status.NominatedNodeName; nom != "" && (only == nil || only[nom]) {
			pl, _ = c.placePod(u, p, map[string]bool{nom: true})
		}
		if pl == nil {
			pl, f = c.placePod(u, p, only)
		}
		if pl != nil {
			pls = append(pls, pl)
			continue
		}
		if first == nil {
			first, firstPod = f, p
		}
		if misses++; misses > len(u.pods)-need {
			break
		}
	}
	if len(pls) >= need {
		return pls, nil
	}
	c.undo(pls)
	code := first.code
	if code == jobs.CodeCapacity {
		code = plan.CodeGang
	}
	return nil, &failure{code: code, room: first.room, msg: fmt.Sprintf("gang %s needs %d pods placed together, %d fit; pod %s: %s",
		u.key, need, len(pls), firstPod.Key(), first.msg)}
}

// placePod places one pod on the view (on only's nodes, if set): the
// allocator policy chooses node and devices, the view resolves them; it
// assumes the allocations and the pod's CPU and memory. A pod whose
// extended resources nodes serve in different ways (p.PerNode) is tried
// as each entry on that entry's nodes, in order.
func (c *cycle) placePod(u *unit, p *plan.Pod, only map[string]bool) (*placed, *failure) {
	if len(p.PerNode) == 0 {
		pl, f := c.placeAs(u, p, only)
		if pl != nil {
			pl.as = p
		}
		return pl, f
	}
	// The rules' preferences rank nodes across the entries: the best
	// ranked are tried first under each entry, then all.
	passes := []map[string]bool{nil}
	if best := c.preferredAcross(p, only); best != nil {
		passes = []map[string]bool{best, nil}
	}
	var fails []*failure
	var failedOn []plan.PerNode
	for i, pass := range passes {
		for _, e := range p.PerNode {
			if e.Pod.PluginDevices > 0 && c.s.Rules == nil {
				continue // device plugins' counts are NodeResourcesFit's (the rules)
			}
			sub := map[string]bool{}
			for n := range e.Nodes {
				if (only == nil || only[n]) && (pass == nil || pass[n]) {
					sub[n] = true
				}
			}
			if len(sub) == 0 {
				continue
			}
			if e.NeverFits != "" {
				if i == len(passes)-1 {
					fails, failedOn = append(fails, fail(jobs.CodeNeverFits, "%s", e.NeverFits)), append(failedOn, e)
				}
				continue
			}
			pl, f := c.placeAs(u, e.Pod, sub)
			if pl != nil {
				pl.pod, pl.as = p, e.Pod
				return pl, nil
			}
			if i == len(passes)-1 {
				fails, failedOn = append(fails, f), append(failedOn, e)
			}
		}
	}
	return nil, perNodeFailure(fails, failedOn)
}

// perNodeFailure is why a pod fits under none of its PerNode entries: the
// first failure that more room could mend (else the first), with every
// entry's reason.
func perNodeFailure(fails []*failure, on []plan.PerNode) *failure {
	if len(fails) == 0 {
		return fail(jobs.CodeCapacity, "no node serves the pod's extended resources (through a DeviceClass or a device plugin)")
	}
	best := fails[0]
	for _, f := range fails {
		if f.room && !best.room {
			best = f
		}
	}
	if len(fails) == 1 {
		return best
	}
	// Never fits only when no way could ever serve the pod; then the
	// message says so first, as a single entry's does.
	never := !slices.ContainsFunc(fails, func(f *failure) bool { return f.code != jobs.CodeNeverFits })
	msgs := make([]string, len(fails))
	for i, f := range fails {
		how := "through a device plugin"
		if on[i].Pod.ExtendedResources != nil {
			how = "through the DeviceClass (a claim)"
		}
		why := f.msg
		if never {
			why = strings.TrimPrefix(why, "never fits: ")
		}
		msgs[i] = fmt.Sprintf("on the %d %s serving its extended resources %s: %s", len(on[i].Nodes), plural(len(on[i].Nodes), "node", "nodes"), how, why)
	}
	msg := strings.Join(msgs, "; ")
	if never {
		return &failure{code: jobs.CodeNeverFits, msg: "never fits: " + msg}
	}
	return &failure{code: best.code, room: best.room, msg: msg}
}

// preferredAcross is preferred over every node p's rules allow (among
// only's), whichever entry of p.PerNode holds there.
func (c *cycle) preferredAcross(p *plan.Pod, only map[string]bool) map[string]bool {
	if c.s.Rules == nil || len(p.PerNode) < 2 {
		return nil
	}
	return c.preferred(p, func(n *view.Node) bool {
		return (only == nil || only[n.Name]) && c.nodes.refuse(n, p) == ""
	})
}

// placeAs is placePod for a pod whose claims hold on every node it may
// take (p, or an entry of a pod's PerNode).
func (c *cycle) placeAs(u *unit, p *plan.Pod, only map[string]bool) (*placed, *failure) {
	pin, err := view.AllocatedNode(p.Claims)
	if err != nil {
		return nil, fail(plan.CodeInvalid, "%v", err)
	}
	items, err := c.demand(p)
	if err != nil {
		if errors.Is(err, view.ErrNoFit) {
			return nil, fail(jobs.CodeNeverFits, "%v", err)
		}
		return nil, fail(plan.CodeInvalid, "%v", err)
	}
	if msg := c.neverFits(p, items); msg != "" {
		return nil, fail(jobs.CodeNeverFits, "%s", msg)
	}
	others := c.others[p]
	if len(others) > 0 && c.s.Devices == nil {
		o := others[0]
		return nil, fail(plan.CodeInvalid, "claim %s/%s: %s", o.Claim.Namespace, o.Claim.Name, o.Why)
	}
	of := &otherFit{c: c, others: others}
	if c.s.Rules != nil {
		if why, ok := c.s.Rules.Unresolvable(p.Pod); ok {
			return nil, fail(plan.CodeUnschedulable, "%s", why)
		}
	}
	blocked := c.fair.blockedModels(u.queue, items)
	if len(blocked) > 0 && len(blocked) == len(c.fair.models) {
		return nil, &failure{code: jobs.CodeModelQuota, msg: excessMessage(blocked[c.fair.models[0]], u)}
	}
	why := map[string]int{}
	refused := map[string]bool{} // nodes counted in why (the view asks again on retries)
	refuse := func(n *view.Node, r string) bool {
		if !refused[n.Name] {
			refused[n.Name] = true
			why[r]++
		}
		return false
	}
	var prefer map[string]bool // with preferences: the best-ranked allowed nodes, tried first
	var tier map[string]bool   // with an objective: the nodes of one score tier, tried first
	// The rules' verdict on a node (kube-scheduler's filter plugins, the
	// costliest check) holds for the whole placement: the cycle's node use
	// changes only when the pod is taken, at the end. The preference
	// ranking, the objective's tiers and each try ask for it; it is run
	// once per node.
	nodeWhy := make(map[string]string, len(c.v.Nodes()))
	filter := func(n *view.Node) bool {
		if (pin != "" && n.Name != pin) || (only != nil && !only[n.Name]) || (prefer != nil && !prefer[n.Name]) || (tier != nil && !tier[n.Name]) {
			return false
		}
		r, ok := nodeWhy[n.Name]
		if !ok {
			r = c.nodes.refuse(n, p)
			nodeWhy[n.Name] = r
		}
		if r != "" {
			return refuse(n, r)
		}
		if r := c.devices.AllocatedFits(n.Name, p.Claims); r != "" {
			return refuse(n, r)
		}
		if r := of.refuse(n.Name); r != "" {
			return refuse(n, r)
		}
		if r := c.reservedFor(u, n.Name); r != "" {
			return refuse(n, r)
		}
		if len(blocked) > 0 && len(items) > 0 && !slices.ContainsFunc(n.GPUs, func(g view.GPU) bool { _, b := blocked[g.Model]; return !b }) {
			return refuse(n, "queue "+u.queue+"'s model limits")
		}
		return true
	}
	reserve := reserveOnly(p)
	opt := view.Options{Policy: c.s.Policy, Typical: c.fit.typical, NodeFilter: filter, NewShareID: c.cfg.NewShareID, NodeUsed: c.nodes.used,
		Measured: c.tel.now()}
	cpu, mem := requests(p.Pod)
	if c.s.Rules != nil {
		// The preference ranking asks the rules about every node the pod
		// may take: ask them all at once (in parallel where there are
		// cores, as kube-scheduler filters).
		var names []string
		for _, n := range c.v.Nodes() {
			if (pin == "" || n.Name == pin) && (only == nil || only[n.Name]) {
				names = append(names, n.Name)
			}
		}
		for i, r := range c.s.Rules.FilterAll(p.Pod, names) {
			nodeWhy[names[i]] = r
		}
	}
	prefer = c.preferred(p, filter)
	if len(items) == 0 {
		node, err := c.v.PlaceNode(allocator.Request{CPUMilli: cpu, MemoryMiB: mem >> 20}, opt)
		if err != nil && prefer != nil {
			prefer = nil
			node, err = c.v.PlaceNode(allocator.Request{CPUMilli: cpu, MemoryMiB: mem >> 20}, opt)
		}
		if err != nil {
			if of.invalid != nil {
				return nil, fail(plan.CodeInvalid, "%v", of.invalid)
			}
			f := fail(jobs.CodeCapacity, "%s", noNodeMessage(pin, why))
			f.room = true
			return nil, f
		}
		allocs := of.allocations(node)
		if err := c.assume(allocs...); err != nil {
			c.release(allocs...)
			return nil, fail(plan.CodeInvalid, "%v", err)
		}
		c.nodes.take(node, p)
		return &placed{pod: p, node: node, allocs: allocs, reserve: reserve}, nil
	}
	// The first item carries the pod's CPU and memory, so the policy
	// weighs what the pod leaves to feed each node's GPUs.
	items[0].Alloc.CPUMilli, items[0].Alloc.MemoryMiB = cpu, mem>>20
	var allocs []view.Allocation
	err = view.ErrNoFit
	// The queue's objective (energy, cost) ranks the nodes first; the
	// allocator policy chooses devices, and nodes when no tier holds it.
	for _, t := range c.objectiveTiers(u.queue, items, filter) {
		tier = t
		if allocs, err = of.place(items, opt); err == nil {
			break
		}
	}
	tier = nil
	if err != nil {
		allocs, err = of.place(items, opt)
	}
	if err != nil && prefer != nil {
		prefer = nil
		allocs, err = of.place(items, opt)
	}
	if err != nil {
		code := jobs.CodeCapacity
		if of.invalid != nil {
			return nil, fail(plan.CodeInvalid, "%v", of.invalid)
		}
		if !errors.Is(err, view.ErrNoFit) {
			code = plan.CodeInvalid
		} else if onlyReserved(why) {
			code = CodeReserved
		}
		msg := c.noFitMessage(u, items, err, pin, why, blocked)
		if c.tel.on() && code != plan.CodeInvalid {
			msg += c.telemetryNotes(items, func(n *view.Node) bool {
				return !n.Unschedulable && !refused[n.Name] && (pin == "" || n.Name == pin) && (only == nil || only[n.Name])
			})
		}
		return nil, &failure{code: code, msg: msg, room: code != plan.CodeInvalid}
	}
	c.nodes.take(allocs[0].Node, p)
	return &placed{pod: p, node: allocs[0].Node, allocs: allocs, reserve: reserve}, nil
}

// preferred returns the nodes filter allows that rank highest by the
// pod's preferences under the snapshot's rules (preferred node and pod
// affinity, PreferNoSchedule taints, ScheduleAnyway spread), or nil when
// there are no rules or every allowed node ranks alike. gpud's policy
// chooses among them first and among all allowed nodes only when none of
// them has room: kube-scheduler adds these scores to its resource scores,
// gpud lets them pick the candidates its own policy ranks.
func (c *cycle) preferred(p *plan.Pod, filter func(*view.Node) bool) map[string]bool {
	if c.s.Rules == nil {
		return nil
	}
	var names []string
	for _, n := range c.v.Nodes() {
		if filter(n) {
			names = append(names, n.Name)
		}
	}
	if len(names) < 2 {
		return nil
	}
	scores := c.s.Rules.Score(p.Pod, names)
	best, worst := int64(math.MinInt64), int64(math.MaxInt64)
	for _, n := range names {
		best, worst = max(best, scores[n]), min(worst, scores[n])
	}
	if best == worst {
		return nil
	}
	out := map[string]bool{}
	for _, n := range names {
		if scores[n] == best {
			out[n] = true
		}
	}
	return out
}

func onlyReserved(why map[string]int) bool {
	if len(why) == 0 {
		return false
	}
	for r := range why {
		if !strings.HasPrefix(r, "reserved") {
			return false
		}
	}
	return true
}

// reserveOnly returns the pod's already allocated claims, which get only
// the pod added to reservedFor.
func reserveOnly(p *plan.Pod) []view.Allocation {
	var out []view.Allocation
	for _, c := range p.Claims {
		if c != nil && c.Status.Allocation != nil {
			out = append(out, view.Allocation{Claim: c, Result: c.Status.Allocation})
		}
	}
	return out
}

// reservedFor says why node is closed to u now ("" if it is not): a
// reservation for another queue that is on, or that starts before u's
// estimated end. Reservations for undefined queues are ignored.
func (c *cycle) reservedFor(u *unit, node string) string {
	now := unixSeconds(c.s.Now)
	for _, r := range c.s.Reservations {
		if !c.fair.tree.Has(r.Queue) || !slices.Contains(r.Nodes, node) || now >= r.End || c.fair.tree.Within(u.queue, r.Queue) {
			continue
		}
		if now < r.Start && u.est > 0 && now+int64(u.est.Seconds()) <= r.Start {
			continue
		}
		return fmt.Sprintf("reserved for queue %s (%s)", r.Queue, r.Name)
	}
	return ""
}
