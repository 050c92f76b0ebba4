package decide

import (
	"cmp"
	"slices"
	"time"

	"github.com/gpud/gpud/pkg/allocator"
	"github.com/gpud/gpud/pkg/allocator/jobs"
	"github.com/gpud/gpud/pkg/allocator/objective"
	"github.com/gpud/gpud/pkg/scheduler/view"
)

// The operator's objectives (README: Objectives): each queue's weights of
// util, wait, fair, energy and cost (its Queue object's spec.objectives,
// else its nearest ancestor's, else Config.Objective), scored with
// pkg/allocator/jobs' formula ([jobs.Objective.PlacementScore]) so the
// scheduler and `gpud sim jobs --objectives` weigh alike. Without
// objectives (nil, or util=1,fair=1 and nothing else) every decision is
// today's.

// maxObjectiveTiers caps the score tiers placement tries by the objective
// before leaving the choice to the allocator policy.
const maxObjectiveTiers = 4

// objectives resolves each queue's objective (models set) once a cycle.
type objectives struct {
	byQueue map[string]*jobs.Objective
	def     *jobs.Objective
	models  map[string]jobs.ModelPower
	// power and bounds are the nodes' power and price, filled on first use.
	power  map[string]jobs.NodePower
	bounds jobs.ScoreBounds
}

// newObjectives resolves cfg's default and the queues' own objectives
// (a queue without one takes its nearest ancestor's).
func newObjectives(cfg Config, queues []jobs.Queue) *objectives {
	models := cfg.Models
	if models == nil {
		models = objective.DefaultModels()
	}
	with := func(o *jobs.Objective) *jobs.Objective {
		if o == nil {
			return nil
		}
		c := *o
		c.Models = models
		return &c
	}
	obs := &objectives{byQueue: map[string]*jobs.Objective{}, def: with(cfg.Objective), models: models}
	byName := make(map[string]jobs.Queue, len(queues))
	for _, q := range queues {
		byName[q.Name] = q
	}
	for _, q := range queues {
		cur, seen := q, map[string]bool{}
		for cur.Objective == nil && cur.Parent != "" && !seen[cur.Parent] {
			seen[cur.Parent] = true
			cur = byName[cur.Parent]
		}
		if cur.Objective != nil {
			obs.byQueue[q.Name] = with(cur.Objective)
		}
	}
	return obs
}

// of is queue q's objective; nil is today's policy.
func (o *objectives) of(q string) *jobs.Objective {
	if ob, ok := o.byQueue[q]; ok {
		return ob
	}
	return o.def
}

// places reports whether o chooses nodes (an energy or cost weight); util
// alone is what the allocator policy packs by already.
func places(o *jobs.Objective) bool { return o != nil && (o.Energy > 0 || o.Cost > 0) }

// byWait reports whether o orders shortest predicted runtime first.
func byWait(o *jobs.Objective) bool { return o != nil && o.Wait > 0 }

// nodePower is n's power and price; the first call measures every node
// (the bounds normalise over the cluster).
func (c *cycle) nodePower(n *view.Node) jobs.NodePower {
	o := c.obj
	if o.power == nil {
		o.power = make(map[string]jobs.NodePower, len(c.v.Nodes()))
		for _, node := range c.v.Nodes() {
			ps := make([]jobs.ModelPower, 0, len(node.GPUs))
			for _, g := range node.GPUs {
				ps = append(ps, objective.Match(o.models, g.Model))
			}
			p := jobs.PowerOf(ps)
			o.power[node.Name] = p
			o.bounds.Bound(p)
		}
	}
	return o.power[n.Name]
}

// objectiveTiers are the nodes filter allows that could hold items' GPUs,
// grouped by the objective's placement score of queue q, best first (at
// most maxObjectiveTiers): placement tries each before the allocator
// policy chooses among all. nil when q's objective does not choose nodes,
// or for MIG items (today's rules).
func (c *cycle) objectiveTiers(q string, items []*view.Item, filter func(*view.Node) bool) []map[string]bool {
	o := c.obj.of(q)
	if !places(o) || len(items) == 0 {
		return nil
	}
	whole, frac := 0, []*view.Item(nil)
	for _, it := range items {
		switch it.Kind {
		case view.Whole:
			whole += it.Count
		case view.Fraction:
			frac = append(frac, it)
		default:
			return nil
		}
	}
	type scored struct {
		name  string
		score float64
	}
	var nodes []scored
	for _, n := range c.v.Nodes() {
		if !filter(n) {
			continue
		}
		var used []int64 // of the whole (not MIG) GPUs
		free, idle, empty := int64(0), 0, true
		for g, u := range c.v.GPUUsedMilli(n) {
			if u > 0 {
				empty = false
			}
			if n.GPUs[g].Whole == "" {
				continue
			}
			used = append(used, u)
			free += allocator.MilliPerGPU - u
			if u == 0 {
				idle++
			}
		}
		podMilli, ok := int64(whole)*allocator.MilliPerGPU, idle >= whole
		for _, it := range frac {
			m := fractionMilli(n, it)
			podMilli += m
			ok = ok && slices.ContainsFunc(used, func(u int64) bool { return u+m <= allocator.MilliPerGPU })
		}
		if !ok {
			continue
		}
		p := c.nodePower(n)
		nodes = append(nodes, scored{n.Name, o.PlacementScore(p, float64(free), float64(podMilli), empty, c.obj.bounds)})
	}
	slices.SortStableFunc(nodes, func(a, b scored) int { return cmp.Compare(a.score, b.score) })
	var out []map[string]bool
	for i := 0; i < len(nodes) && len(out) < maxObjectiveTiers; {
		tier := map[string]bool{}
		j := i
		for ; j < len(nodes) && nodes[j].score == nodes[i].score; j++ {
			tier[nodes[j].name] = true
		}
		out = append(out, tier)
		i = j
	}
	return out
}

// fractionMilli is the milli-GPU a fraction item takes of n's GPUs (its
// memory share of n's first GPU, or its cores), at least 1.
func fractionMilli(n *view.Node, it *view.Item) int64 {
	m := it.Alloc.GPUCoresPct * 10
	for _, g := range n.GPUs {
		if g.MemoryBytes > 0 {
			m = max(m, ceilDiv(it.Alloc.GPUMemoryMiB, g.MemoryBytes>>20, allocator.MilliPerGPU))
			break
		}
	}
	return min(max(m, 1), allocator.MilliPerGPU)
}

// unitCmp orders the units of one queue: priority first, then, with the
// queue's wait weight, shortest predicted runtime (unknown last), then age.
func (c *cycle) unitCmp(a, b *unit) int {
	k := cmp.Compare(b.prio, a.prio)
	if k == 0 && byWait(c.obj.of(a.queue)) {
		k = cmp.Compare(estOrder(a.est), estOrder(b.est))
	}
	return cmp.Or(k, a.created.Compare(b.created), cmp.Compare(a.key, b.key))
}

// estOrder sorts unknown estimates last.
func estOrder(d time.Duration) time.Duration {
	if d <= 0 {
		return time.Duration(1<<63 - 1)
	}
	return d
}

// queueScore is what order compares sibling queues by after their
// guarantees (lower first): today the weighted DRF share; with an
// objective Fair·share + Wait·estimate, where estimate is the predicted
// runtime of the queue's next unit over the longest pending one (1 when
// unknown), as pkg/allocator/jobs orders them. An objective that weighs
// neither fair nor wait (energy=1 alone) keeps today's share: weights are
// per queue here, and such a queue would otherwise always go before its
// siblings (the replay, whose weights hold for every queue, takes
// arrival order then).
func (c *cycle) queueScore(q string, share float64, next *unit, maxEst time.Duration) float64 {
	o := c.obj.of(q)
	if o == nil || (o.Fair == 0 && o.Wait == 0) {
		return share
	}
	sc := o.Fair * share
	if o.Wait > 0 {
		e := 1.0
		if next != nil && next.est > 0 && maxEst > 0 {
			e = float64(next.est) / float64(maxEst)
		}
		sc += o.Wait * e
	}
	return sc
}

// needsNext reports whether order must know queue q's next unit: its
// objective weighs wait.
func (c *cycle) needsNext(q string) bool { return byWait(c.obj.of(q)) }
