package rules

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// hints are the cluster events each plugin of [Filters] registers, with
// its queueing hint (kube-scheduler's EnqueueExtensions), by plugin name.
type hints map[string][]fwk.ClusterEventWithHint

// buildHints reads the plugins' registrations from fw.
func buildHints(ctx context.Context, fw framework.Framework) (hints, error) {
	out := hints{}
	for _, ext := range fw.EnqueueExtensions() {
		evs, err := ext.EventsToRegister(ctx)
		if err != nil {
			return nil, fmt.Errorf("rules: events of plugin %s: %w", ext.Name(), err)
		}
		out[ext.Name()] = evs
	}
	return out, nil
}

// MayHelp reports whether a cluster event may make pod schedulable, where
// kube-scheduler's plugins named in rejectedBy (what [Cycle.Rejected]
// says) refused it on every node: one of them registers a matching event
// and its queueing hint says Queue (or it has none, or fails). events are
// what happened (framework.EventAssignedPodDelete, the events of
// framework.NodeSchedulingPropertiesChange, ...), old and new the object
// before and after (nil where there is none). A plugin that registers no
// event, or one this package does not run, is taken to be helped by every
// event.
func (r *Rules) MayHelp(pod *corev1.Pod, rejectedBy []string, events []fwk.ClusterEvent, old, new any) bool {
	for _, name := range rejectedBy {
		regs, ok := r.hints[name]
		if !ok {
			return true
		}
		for _, reg := range regs {
			if !matchAny(reg.Event, events) {
				continue
			}
			if reg.QueueingHintFn == nil {
				return true
			}
			h, err := reg.QueueingHintFn(r.cfg.Logger, pod, old, new)
			if err != nil || h == fwk.Queue {
				return true
			}
		}
	}
	return false
}

func matchAny(registered fwk.ClusterEvent, events []fwk.ClusterEvent) bool {
	for _, e := range events {
		if framework.MatchClusterEvents(registered, e) {
			return true
		}
	}
	return false
}

// rejection is what one cycle's Filter calls said of one pod.
type rejection struct {
	plugins sets.Set[string]
	nodes   sets.Set[string]
	// allowed: some call allowed a node (the pod then failed, if it did,
	// for gpud's reasons: devices, queues, ...).
	allowed bool
}

// record notes that pod was refused on node by plugins, or allowed there
// (no plugins).
func (c *Cycle) record(pod *corev1.Pod, node string, plugins ...string) {
	if pod.UID == "" || len(c.released) > 0 {
		return // a what-if: running pods released
	}
	if c.rejected == nil {
		c.rejected = map[string]*rejection{}
	}
	r := c.rejected[string(pod.UID)]
	if r == nil {
		r = &rejection{plugins: sets.New[string](), nodes: sets.New[string]()}
		c.rejected[string(pod.UID)] = r
	}
	if len(plugins) == 0 {
		r.allowed = true
		return
	}
	r.plugins.Insert(plugins...)
	r.nodes.Insert(node)
}

// Rejected names the plugins that refused pod this cycle, when they
// refused it on every node of the cycle and never allowed it on any (in
// what-ifs too); false otherwise (the pod was not asked about on every
// node, or failed for other reasons): then any event that changes the
// cluster may help it.
func (c *Cycle) Rejected(pod *corev1.Pod) ([]string, bool) {
	r := c.rejected[string(pod.UID)]
	if r == nil || r.allowed || len(c.l.nodes) == 0 || r.nodes.Len() < len(c.l.nodes) {
		return nil, false
	}
	for n := range c.l.nodes {
		if !r.nodes.Has(n) {
			return nil, false
		}
	}
	return sets.List(r.plugins), true
}
