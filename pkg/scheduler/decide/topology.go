package decide

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpud/gpud/pkg/allocator/jobs"
	"github.com/gpud/gpud/pkg/scheduler/plan"
	"github.com/gpud/gpud/pkg/scheduler/view"
)

// gangTopo is the topology level a gang asks for (plan.GangTopology),
// resolved to the node label whose values name its domains.
type gangTopo struct {
	// name is the level as the gang named it ("rack", "example.com/pod").
	name string
	// label is the node label naming a node's domain; perNode: each node
	// is its own domain; nvlink: a node without label is its own domain.
	label           string
	perNode, nvlink bool
	required        bool
	source          string
}

// topology resolves g's topology level on this scheduler's labels; nil
// when g asks for none. A level that is neither one of nvlink, node, rack
// and zone nor a label the admin lists (Config.GangTopologyLabels, or one
// of the labels those levels read) is refused with the values allowed.
func (c *cycle) topology(g *plan.Group) (*gangTopo, error) {
	t := g.Topology
	if t.Level == "" {
		return nil, nil
	}
	gt := &gangTopo{name: t.Level, required: t.Required, source: t.Source}
	switch t.Level {
	case "nvlink", jobs.LabelNVLinkDomain:
		gt.label, gt.nvlink = jobs.LabelNVLinkDomain, true
	case "node", corev1.LabelHostname:
		gt.perNode = true
	case "rack", c.cfg.RackLabel:
		gt.label = c.cfg.RackLabel
	case "zone", jobs.LabelZone:
		gt.label = jobs.LabelZone
	default:
		// Kubernetes' own PodGroup field may name any node label.
		if !strings.HasPrefix(t.Source, "spec.") && !slices.Contains(c.cfg.GangTopologyLabels, t.Level) {
			listed := "none listed"
			if len(c.cfg.GangTopologyLabels) > 0 {
				listed = strings.Join(c.cfg.GangTopologyLabels, ", ")
			}
			return nil, fmt.Errorf("%s: level %q is not one this scheduler allows; want nvlink, node, rack, zone, or a node label listed in gpud scheduler's --gang-topology-labels (%s)",
				t.Source, t.Level, listed)
		}
		gt.label = t.Level
	}
	return gt, nil
}

// domain is node n's domain of t, and false when n is in none (it lacks
// the level's label).
func (t *gangTopo) domain(n *view.Node) (string, bool) {
	if t.perNode {
		return n.Name, true
	}
	if v := n.Labels[t.label]; v != "" {
		return v, true
	}
	if t.nvlink {
		return "node " + n.Name, true
	}
	return "", false
}

// describe names t for reasons: "rack (label topology.gpud.io/rack)".
func (t *gangTopo) describe() string {
	switch {
	case t.perNode:
		return "node"
	case t.name == t.label:
		return "domain of node label " + t.label
	}
	return fmt.Sprintf("%s (node label %s)", t.name, t.label)
}

// topoLevel is t's level: one group per domain, only those in only (nil:
// every domain).
func (c *cycle) topoLevel(t *gangTopo, only map[string]bool) level {
	byName := map[string]map[string]bool{}
	var names []string
	for _, n := range c.v.Nodes() {
		d, ok := t.domain(n)
		if !ok || (only != nil && !only[d]) {
			continue
		}
		if byName[d] == nil {
			byName[d] = map[string]bool{}
			names = append(names, d)
		}
		byName[d][n.Name] = true
	}
	slices.Sort(names)
	l := level{name: t.name}
	for _, d := range names {
		l.groups = append(l.groups, nodeGroup{name: d, nodes: byName[d]})
	}
	return l
}

// within reports whether nodes all lie in one domain of t (in only, if
// set).
func (c *cycle) within(t *gangTopo, nodes map[string]bool, only map[string]bool) bool {
	dom, first := "", true
	for name := range nodes {
		n := c.v.Node(name)
		if n == nil {
			return false
		}
		d, ok := t.domain(n)
		if !ok || (only != nil && !only[d]) || (!first && d != dom) {
			return false
		}
		dom, first = d, false
	}
	return !first
}

// gangLevels lists the domains u tries, in order. Without a topology of
// its own: gpud's order (levels), or the cluster alone for a single
// member or a what-if (anyDomain). With one: the narrower levels' domains
// that lie within one of its domains, then its own domains; preferred
// adds gpud's order after them, required nothing (a what-if tries its
// own domains alone). A required gang with members running keeps to
// their domain (u.at).
func (c *cycle) gangLevels(u *unit) []level {
	cluster := level{name: "cluster", groups: []nodeGroup{{name: "cluster"}}}
	t := u.topo
	if t == nil {
		if len(u.pods) > 1 && !c.anyDomain {
			return c.levels()
		}
		return []level{cluster}
	}
	var only map[string]bool
	if t.required {
		only = u.at
	}
	own := c.topoLevel(t, only)
	if c.anyDomain {
		if t.required {
			return []level{own}
		}
		return []level{cluster}
	}
	var out []level
	if len(u.pods) > 1 {
		for _, l := range c.levels() {
			var in []nodeGroup
			for _, g := range l.groups {
				if g.nodes != nil && c.within(t, g.nodes, only) {
					in = append(in, g)
				}
			}
			if len(in) > 0 {
				out = append(out, level{name: l.name, groups: in})
			}
		}
	}
	out = append(out, own)
	if !t.required {
		if len(u.pods) > 1 {
			out = append(out, c.levels()...)
		} else {
			out = append(out, cluster)
		}
	}
	return out
}

// homeLevels are the domains a gang that self-healing evicted ran in
// (Snapshot.Healed), tried before any other so that it goes back where
// it was when there is room: per level of gpud's order narrower than the
// cluster (NVLink domain, rack, zone), the domains holding its old nodes,
// the most of them first. With a required topology, only those within
// one of the gang's domains (of its running members', if any). None for
// a what-if or a gang not healed recently.
func (c *cycle) homeLevels(u *unit) []level {
	old := c.s.Healed[u.key]
	if len(old) == 0 || u.group == nil || c.anyDomain {
		return nil
	}
	required := u.topo != nil && u.topo.required
	var out []level
	for _, l := range c.levels() {
		type ranked struct {
			g nodeGroup
			n int
		}
		var in []ranked
		for _, g := range l.groups {
			if g.nodes == nil {
				continue // the cluster: gpud's own order tries it
			}
			n := 0
			for _, name := range old {
				if g.nodes[name] {
					n++
				}
			}
			if n == 0 || (required && !c.within(u.topo, g.nodes, u.at)) {
				continue
			}
			in = append(in, ranked{g, n})
		}
		if len(in) == 0 {
			continue
		}
		slices.SortStableFunc(in, func(a, b ranked) int { return b.n - a.n })
		lv := level{name: "previous " + l.name}
		for _, r := range in {
			lv.groups = append(lv.groups, r.g)
		}
		out = append(out, lv)
	}
	return out
}

// requiredFailure is why a gang with a required level did not place: no
// node in any of its domains, no domain with enough GPUs, or the last
// domain's reason, each naming the level and where it was set.
func (c *cycle) requiredFailure(u *unit, last *failure) *failure {
	t := u.topo
	where := fmt.Sprintf("required topology: all members within one %s, set by %s", t.describe(), t.source)
	if len(c.topoLevel(t, u.at).groups) == 0 {
		msg := fmt.Sprintf("gang %s: no node is in a %s (%s)", u.key, t.describe(), where)
		if u.at != nil {
			msg = fmt.Sprintf("gang %s: its running members' %s has no node left (%s)", u.key, t.name, where)
		}
		return &failure{code: plan.CodeGang, msg: msg}
	}
	if last == nil {
		return &failure{code: plan.CodeGang, msg: fmt.Sprintf("gang %s: no single %s has the %d GPUs its members ask (%s)",
			u.key, t.name, c.wholeGPUs(u, u.need), where)}
	}
	f := *last
	f.msg = fmt.Sprintf("%s (%s)", last.msg, where)
	return &f
}

// wholeGPUs is the whole GPUs the need smallest members of u ask.
func (c *cycle) wholeGPUs(u *unit, need int) int {
	var per []int
	for _, p := range u.pods {
		n := 0
		items, _ := c.demand(p)
		for _, it := range items {
			if it.Kind == view.Whole {
				n += it.Count
			}
		}
		per = append(per, n)
	}
	slices.Sort(per)
	total := 0
	for _, n := range per[:min(need, len(per))] {
		total += n
	}
	return total
}

// groupGPUs counts the whole-GPU devices on g's nodes.
func (c *cycle) groupGPUs(g nodeGroup) int {
	n := 0
	for name := range g.nodes {
		if node := c.v.Node(name); node != nil {
			for _, gp := range node.GPUs {
				if gp.Whole != "" {
					n++
				}
			}
		}
	}
	return n
}
