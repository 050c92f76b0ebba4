package decide

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpud/gpud/pkg/allocator"
	"github.com/gpud/gpud/pkg/allocator/jobs"
	"github.com/gpud/gpud/pkg/scheduler/plan"
	"github.com/gpud/gpud/pkg/scheduler/view"
)

// run decides the cycle: units in policy order, each bound, preempted
// for, backfilled or left pending.
func (c *cycle) run() {
	units := c.units()
	c.fit.typical = c.typicalRequests()
	next := c.order(units)
	considered := 0
	for u := next(); u != nil; u = next() {
		// New pods are always considered: the cap bounds retries only, so
		// that pods which cannot fit never starve newer ones.
		if considered >= c.cfg.MaxPodsPerCycle && !slices.ContainsFunc(u.pods, func(p *plan.Pod) bool { return !p.Retry }) {
			c.pend(u, jobs.CodeBlocked, fmt.Sprintf("not reached this cycle (more than %d pending pods considered); waits in order", c.cfg.MaxPodsPerCycle))
			continue
		}
		considered += len(u.pods)
		c.consider(u)
	}
}

// typicalRequests are the oldest pending pods' allocator requests (up to
// Config.TypicalRequests, repeats kept: the workload weighs requests by
// frequency), the workload gpud's policy measures fragmentation against.
func (c *cycle) typicalRequests() []allocator.Request {
	if c.cfg.TypicalRequests < 0 {
		return nil
	}
	var out []allocator.Request
	for _, p := range c.s.Pending {
		if len(out) >= c.cfg.TypicalRequests {
			break
		}
		if p == nil || p.Pod == nil {
			continue
		}
		items, err := c.demand(c.devicesOf(p))
		if err != nil {
			continue
		}
		for _, it := range items {
			out = append(out, it.Alloc)
		}
	}
	return out
}

// consider binds u, backfills it behind the blocked head, preempts for it,
// or leaves it pending with the reason.
func (c *cycle) consider(u *unit) {
	c.back.ensure()
	// A lone pod shaped as one that failed earlier in the cycle fails
	// alike: binds only fill the view (what-ifs are undone).
	key := c.shapeKey(u)
	f, seen := c.fit.failed(key)
	if !seen {
		var pls []*placed
		pls, f = c.placeUnit(u, true)
		if pls != nil {
			if bf := c.back.admit(u, pls); bf != nil {
				c.undo(pls)
				c.fit.remember(key, bf)
				c.pend(u, bf.code, bf.msg)
				return
			}
			c.commit(u, pls)
			return
		}
		c.fit.remember(key, f)
	}
	if !f.room {
		c.pend(u, f.code, f.msg)
		return
	}
	if !c.back.blocked() && c.pre.open() {
		// Victims evicted earlier still terminating: wait for them rather
		// than preempt again (as kube-scheduler does).
		if at, n, ok := c.waitTerminating(u); ok {
			nodes := slices.Sorted(maps.Values(at))
			nodes = slices.Compact(nodes)
			c.nominate(u, at,
				fmt.Sprintf("waiting for %d terminating %s to free room on %s", n, plural(n, "pod", "pods"), strings.Join(nodes, ", ")))
			return
		}
		if done, pf := c.preempt(u); done {
			return
		} else if pf != nil {
			f = pf
		}
	}
	c.pend(u, f.code, f.msg)
	// The first unit that waits for room becomes the head backfill
	// protects (and preemption stops for the cycle), unless it would not
	// fit even with every running pod gone: such a unit blocks nobody.
	if f.code != CodePDB {
		c.back.tryHead(u, c.newShadow)
	}
}

// commit emits u's binds and charges its queue. Gang members that did not
// place (beyond minMember) wait.
func (c *cycle) commit(u *unit, pls []*placed) {
	got := map[*plan.Pod]bool{}
	first := len(c.out.Binds)
	for _, pl := range pls {
		got[pl.pod] = true
		b := plan.Bind{Pod: pl.pod, Node: pl.node, Allocations: append(slices.Clone(pl.allocs), pl.reserve...), Gang: u.gang(),
			Note: c.tel.borrowNote(pl.allocs)}
		if pl.as != pl.pod {
			b.ExtendedResources = pl.as.ExtendedResources
		}
		c.out.Binds = append(c.out.Binds, b)
		use, models := c.usageOf(pl.as, pl.node, resultsOf(pl.allocs))
		c.fair.tree.Charge(u.queue, use, models, 1)
	}
	if c.s.Decided != nil && len(c.out.Binds) > first {
		c.s.Decided(slices.Clone(c.out.Binds[first:]))
	}
	for _, p := range u.pods {
		if !got[p] {
			c.pendPod(p, jobs.CodeCapacity, fmt.Sprintf("gang %s bound %d members this cycle; this one did not fit with them", u.key, len(pls)))
		}
	}
}

// nominate leaves u's pods pending on their nominated nodes (at); gang
// members beyond minMember that did not place wait without a node.
func (c *cycle) nominate(u *unit, at map[*plan.Pod]string, msg string) {
	for _, p := range u.pods {
		node := at[p]
		if node == "" {
			c.pendPod(p, jobs.CodeCapacity, fmt.Sprintf("gang %s: room is being made for %d members; this one did not fit with them", u.key, len(at)))
			continue
		}
		c.out.Pending = append(c.out.Pending, plan.Pending{Pod: p, Code: CodePreempting, Message: msg + u.suffix, NominatedNode: node})
	}
}

// relPod is a bound pod's hold on the view, for what-ifs that release it.
type relPod struct {
	pod    *plan.Pod
	node   string
	allocs []view.Allocation
	// end is the estimated end in Unix seconds (now for terminating pods,
	// never without an estimate).
	end int64
}

// boundHolds lists every bound pod with the claims it alone is charged
// for (a claim shared by several counts once, with the first).
func (c *cycle) boundHolds() []relPod {
	now := unixSeconds(c.s.Now)
	seen := map[string]bool{}
	var out []relPod
	for _, p := range c.s.Bound {
		r := relPod{pod: p, node: p.Pod.Spec.NodeName, end: never}
		for _, cl := range p.Claims {
			if cl == nil || cl.Status.Allocation == nil || seen[view.ClaimID(cl)] {
				continue
			}
			seen[view.ClaimID(cl)] = true
			r.allocs = append(r.allocs, view.Allocation{Claim: cl, Result: cl.Status.Allocation})
		}
		switch {
		case p.Pod.DeletionTimestamp != nil:
			r.end = now
		case p.RuntimeEstimate > 0:
			r.end = max(now, unixSeconds(startOf(p))+int64(p.RuntimeEstimate.Seconds()))
		}
		out = append(out, r)
	}
	return out
}

// never is an unknown end or start.
const never = int64(1) << 62

// without runs f with the holds released (their CPU and memory too) and
// puts them back.
func (c *cycle) without(holds []relPod, f func()) {
	c.tel.enter(1)
	defer c.tel.leave(1)
	for _, h := range holds {
		c.release(h.allocs...)
		c.tel.release(h.allocs)
		c.nodes.give(h.node, h.pod)
	}
	f()
	for i := len(holds) - 1; i >= 0; i-- {
		_ = c.assume(holds[i].allocs...)
		c.tel.hold(holds[i].allocs)
		c.nodes.take(holds[i].node, holds[i].pod)
	}
}

// tryUnit reports whether u places now, and where, changing nothing. A
// gang is tried across the whole cluster only (whether it fits, not which
// domain it prefers).
func (c *cycle) tryUnit(u *unit, quota bool) ([]string, bool) {
	c.anyDomain = true
	pls, _ := c.placeUnit(u, quota)
	c.anyDomain = false
	if pls == nil {
		return nil, false
	}
	nodes := make([]string, len(pls))
	for i, pl := range pls {
		nodes[i] = pl.node
	}
	c.undo(pls)
	return nodes, true
}

// waitTerminating reports whether u fits once the terminating pods are
// gone (victims of an earlier cycle): then it waits for them, nominated,
// rather than preempting again.
func (c *cycle) waitTerminating(u *unit) (map[*plan.Pod]string, int, bool) {
	var term []relPod
	for _, h := range c.boundHolds() {
		if h.pod.Pod.DeletionTimestamp != nil && (len(h.allocs) > 0 || h.pod.PluginDevices > 0) {
			term = append(term, h)
		}
	}
	if len(term) == 0 {
		return nil, 0, false
	}
	var pls []*placed
	c.without(term, func() { pls, _ = c.placeUnit(u, true) })
	if pls == nil {
		return nil, 0, false
	}
	at := c.holdNominated(u, pls)
	n := 0
	for _, h := range term {
		if slices.ContainsFunc(pls, func(pl *placed) bool { return pl.node == h.node }) {
			n++
		}
	}
	return at, max(n, 1), true
}

// holdNominated keeps u's placement pls on the view for the rest of the
// cycle (over the pods it waits for, so later pods cannot take that room;
// a node held twice takes no new pod this cycle), charges u's queue, and
// returns each pod's nominated node.
func (c *cycle) holdNominated(u *unit, pls []*placed) map[*plan.Pod]string {
	at := map[*plan.Pod]string{}
	for _, pl := range pls {
		at[pl.pod] = pl.node
		c.pre.nominate(pl.node)
		use, models := c.usageOf(pl.as, pl.node, resultsOf(pl.allocs))
		c.fair.tree.Charge(u.queue, use, models, 1)
	}
	return at
}

// shapeKey identifies a lone pod by what decides where it fits: its
// claims' requests (or allocated node), scheduling constraints, CPU and
// memory, queue and estimate. "" for gangs, which are not memoized.
func (c *cycle) shapeKey(u *unit) string {
	if u.group != nil {
		return ""
	}
	p := u.pods[0]
	cpu, mem := requests(p.Pod)
	pin, _ := view.AllocatedNode(p.Claims)
	var devs []resourceapi.DeviceClaim
	for _, cl := range p.Claims {
		if cl != nil && cl.Status.Allocation == nil {
			devs = append(devs, cl.Spec.Devices)
		}
		if cl != nil && cl.Status.Allocation != nil && cl.Status.Allocation.NodeSelector != nil && pin == "" {
			return "" // allocated by another driver: its node selector counts
		}
	}
	// Extended resources served per node: each entry's claim and nodes.
	var perNode []any
	for _, e := range p.PerNode {
		var devs *resourceapi.DeviceClaim
		if n := len(e.Pod.Claims); n > len(p.Claims) {
			devs = &e.Pod.Claims[n-1].Spec.Devices
		}
		perNode = append(perNode, struct {
			Nodes   []string
			Devices *resourceapi.DeviceClaim
			Plugin  int64
		}{slices.Sorted(maps.Keys(e.Nodes)), devs, e.Pod.PluginDevices})
	}
	// With kube-scheduler's rules, what they read counts too: labels and
	// namespace (others' affinity and spread select the pod), spread,
	// volumes, ports and every resource request.
	var rules any
	if c.s.Rules != nil {
		var res []corev1.ResourceRequirements
		var ports [][]corev1.ContainerPort
		for _, ct := range append(slices.Clone(p.Pod.Spec.InitContainers), p.Pod.Spec.Containers...) {
			res = append(res, ct.Resources)
			ports = append(ports, ct.Ports)
		}
		rules = struct {
			Namespace string
			Labels    map[string]string
			Spread    []corev1.TopologySpreadConstraint
			Volumes   []corev1.Volume
			Resources []corev1.ResourceRequirements
			Ports     [][]corev1.ContainerPort
			Overhead  corev1.ResourceList
			NodeName  string
			Priority  int32
		}{p.Pod.Namespace, p.Pod.Labels, p.Pod.Spec.TopologySpreadConstraints, p.Pod.Spec.Volumes, res, ports,
			p.Pod.Spec.Overhead, p.Pod.Spec.NodeName, p.Priority}
	}
	raw, err := json.Marshal(struct {
		Devices     []resourceapi.DeviceClaim
		Selector    map[string]string
		Affinity    *corev1.Affinity
		Tolerations []corev1.Toleration
		CPU, Mem    int64
		Pin, Queue  string
		Nominated   string
		Est         int64
		Claims      int
		PerNode     []any
		Rules       any
	}{devs, p.Pod.Spec.NodeSelector, p.Pod.Spec.Affinity, p.Pod.Spec.Tolerations, cpu, mem, pin, u.queue,
		p.Pod.Status.NominatedNodeName, int64(u.est), len(p.Claims), perNode, rules})
	if err != nil {
		return ""
	}
	return string(raw)
}
