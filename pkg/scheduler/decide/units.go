package decide

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/gpud/gpud/pkg/scheduler/plan"
)

// unit is what a cycle places at once: a lone pod, or a gang's pending
// members (all-or-nothing).
type unit struct {
	key string
	// group is the PodGroup of a gang, nil for a lone pod.
	group *plan.Group
	pods  []*plan.Pod
	// need is how many of pods must place for the unit to bind (a gang's
	// minMember less its bound members, at least 1).
	need    int
	prio    int32
	queue   string
	created time.Time
	// est is the longest member runtime estimate; 0 if a member has none.
	est time.Duration
	// suffix is appended to the unit's pending messages.
	suffix string
	// topo is a gang's topology level, nil for none; at, with a required
	// level, are the domains its running members are in (nil: none run).
	topo *gangTopo
	at   map[string]bool
}

func (u *unit) gang() string {
	if u.group == nil {
		return ""
	}
	return u.key
}

func (u *unit) name() string {
	if u.group != nil {
		return "gang " + u.key
	}
	return "pod " + u.key
}

// pend leaves every pod of u waiting.
func (c *cycle) pend(u *unit, code, msg string) {
	for _, p := range u.pods {
		c.out.Pending = append(c.out.Pending, plan.Pending{Pod: p, Code: code, Message: msg + u.suffix})
	}
}

func (c *cycle) pendPod(p *plan.Pod, code, msg string) {
	c.out.Pending = append(c.out.Pending, plan.Pending{Pod: p, Code: code, Message: msg})
}

// units groups the pending pods into units; pods that cannot be
// considered at all (unknown queue, PodGroup missing or short of
// minMember) are left pending here.
func (c *cycle) units() []*unit {
	var out []*unit
	gangs := map[string][]*plan.Pod{}
	var keys []string
	for _, p := range c.s.Pending {
		if p == nil || p.Pod == nil {
			continue
		}
		if p.Group != "" {
			if gangs[p.Group] == nil {
				keys = append(keys, p.Group)
			}
			gangs[p.Group] = append(gangs[p.Group], p)
			continue
		}
		q, err := c.fair.queueOf(p)
		if err != nil {
			c.pendPod(p, plan.CodeInvalid, err.Error())
			continue
		}
		out = append(out, &unit{key: p.Key(), pods: []*plan.Pod{p}, need: 1, prio: p.Priority, queue: q,
			created: p.Created, est: p.RuntimeEstimate})
	}
	slices.Sort(keys)
	bound := map[string]int{}
	boundOn := map[string][]string{}
	for _, p := range c.s.Bound {
		if p.Group != "" && p.Pod.DeletionTimestamp == nil {
			bound[p.Group]++
			boundOn[p.Group] = append(boundOn[p.Group], p.Pod.Spec.NodeName)
		}
	}
	for _, key := range keys {
		pods := gangs[key]
		slices.SortFunc(pods, func(a, b *plan.Pod) int {
			return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.Key(), b.Key()))
		})
		u := &unit{key: key, pods: pods, created: pods[0].Created, prio: math.MinInt32, est: 0}
		g := c.s.Groups[key]
		if g == nil {
			u.group = &plan.Group{}
			c.pend(u, plan.CodeGang, fmt.Sprintf("PodGroup %s not found", key))
			continue
		}
		if g.Invalid != "" {
			u.group = &plan.Group{}
			c.pend(u, plan.CodeInvalid, g.Invalid)
			continue
		}
		u.group = g
		if g.ScheduleTimeout > 0 && c.s.Now.After(g.Created.Add(g.ScheduleTimeout)) {
			u.suffix = fmt.Sprintf(" (PodGroup's scheduleTimeout of %s has passed)", g.ScheduleTimeout)
		}
		if have := len(pods) + bound[key]; have < int(g.MinMember) {
			c.pend(u, plan.CodeGang, fmt.Sprintf("gang %s: %d of minMember %d pods exist (%d bound, %d pending)",
				key, have, g.MinMember, bound[key], len(pods)))
			continue
		}
		u.need = max(int(g.MinMember)-bound[key], 1)
		topo, err := c.topology(g)
		if err != nil {
			c.pend(u, plan.CodeInvalid, fmt.Sprintf("gang %s: %v", key, err))
			continue
		}
		u.topo = topo
		if topo != nil && topo.required {
			for _, name := range boundOn[key] {
				if n := c.v.Node(name); n != nil {
					if d, ok := topo.domain(n); ok {
						if u.at == nil {
							u.at = map[string]bool{}
						}
						u.at[d] = true
					}
				}
			}
		}
		q, err := c.fair.queueOf(pods[0])
		if err != nil {
			c.pend(u, plan.CodeInvalid, err.Error())
			continue
		}
		u.queue = q
		known := true
		for _, p := range pods {
			u.prio = max(u.prio, p.Priority)
			u.est = max(u.est, p.RuntimeEstimate)
			known = known && p.RuntimeEstimate > 0
		}
		if !known {
			u.est = 0
		}
		out = append(out, u)
	}
	return out
}

// order returns an iterator over units: highest priority first; among
// equal priority, at every level of the queue tree the child under its
// guarantee, else with the lowest weighted DRF share (re-evaluated after
// every unit, since binds change shares; with objectives, the lowest
// queueScore); within a queue, oldest first (with a wait weight, shortest
// predicted runtime first: unitCmp).
func (c *cycle) order(units []*unit) func() *unit {
	byQueue := map[string][]*unit{}
	for _, u := range units {
		byQueue[u.queue] = append(byQueue[u.queue], u)
	}
	var maxEst time.Duration // the longest pending estimate (the objectives' wait term)
	for _, u := range units {
		maxEst = max(maxEst, u.est)
	}
	for _, l := range byQueue {
		slices.SortFunc(l, c.unitCmp)
	}
	pos := map[string]int{}
	head := func(q string) *unit {
		if l := byQueue[q]; pos[q] < len(l) {
			return l[pos[q]]
		}
		return nil
	}
	// has reports whether q's subtree has a head of priority prio.
	var has func(q string, prio int32) bool
	has = func(q string, prio int32) bool {
		if u := head(q); u != nil && u.prio == prio {
			return true
		}
		for _, ch := range c.fair.tree.Children(q) {
			if has(ch, prio) {
				return true
			}
		}
		return false
	}
	// next is the unit q's subtree gives next at prio, for the objectives'
	// wait term: a leaf's head, else the first of its children's by the
	// queue's own unit order.
	var next func(q string, prio int32) *unit
	next = func(q string, prio int32) *unit {
		if u := head(q); u != nil && u.prio == prio {
			return u
		}
		var best *unit
		for _, ch := range c.fair.tree.Children(q) {
			if u := next(ch, prio); u != nil && (best == nil || c.unitCmp(u, best) < 0) {
				best = u
			}
		}
		return best
	}
	leaves := c.leaves()
	return func() *unit {
		prio, found := int32(0), false
		for _, q := range leaves {
			if u := head(q); u != nil && (!found || u.prio > prio) {
				prio, found = u.prio, true
			}
		}
		if !found {
			return nil
		}
		level := c.fair.tree.Roots()
		for {
			pick, pickUnder, pickShare := "", false, 0.0
			for _, q := range level {
				if !has(q, prio) {
					continue
				}
				var nu *unit
				if c.needsNext(q) {
					nu = next(q, prio)
				}
				under, share := c.fair.tree.UnderGuarantee(q), c.queueScore(q, c.fair.tree.Share(q, c.fair.capacity), nu, maxEst)
				if pick == "" || (under && !pickUnder) || (under == pickUnder && share < pickShare) {
					pick, pickUnder, pickShare = q, under, share
				}
			}
			if pick == "" {
				return nil // unreachable: a head of prio exists
			}
			if u := head(pick); u != nil && u.prio == prio && c.fair.tree.Leaf(pick) {
				pos[pick]++
				return u
			}
			level = c.fair.tree.Children(pick)
		}
	}
}

// leaves lists the tree's leaf queues depth-first in definition order.
func (c *cycle) leaves() []string {
	var out []string
	var walk func(qs []string)
	walk = func(qs []string) {
		for _, q := range qs {
			if c.fair.tree.Leaf(q) {
				out = append(out, q)
				continue
			}
			walk(c.fair.tree.Children(q))
		}
	}
	walk(c.fair.tree.Roots())
	return out
}
