package rules

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	schedcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// frameworkSnapshot is the upstream snapshot the plugins list nodes and
// pods from.
type frameworkSnapshot = *schedcache.Snapshot

// Cycle is the rules over one decision cycle's cluster: nodes, the pods
// bound to them, and the pods the cycle adds or takes away.
type Cycle struct {
	ctx  context.Context
	fw   framework.Framework
	snap frameworkSnapshot
	log  klog.Logger
	// gen counts Add and Remove calls: a pod's PreFilter state is valid
	// for one generation.
	gen  uint64
	last *podCheck
	r    *Rules
	// l is the snapshot kept across cycles, epoch the cycle's number in
	// it: a later Cycle ends this one.
	l     *live
	epoch uint64
	// rejected is what Filter said of each pod, by UID ([Cycle.Rejected]),
	// while no bound pod was released (what-ifs do not count).
	rejected map[string]*rejection
	// released are the pods bound at the start that a what-if has taken
	// away now.
	released map[types.UID]bool
}

// podCheck is one pod's PreFilter outcome at one generation.
type podCheck struct {
	uid    types.UID
	gen    uint64
	state  *framework.CycleState
	result *fwk.PreFilterResult
	// status is the PreFilter status; restricting are the plugins whose
	// results narrowed the nodes.
	status      *fwk.Status
	restricting sets.Set[string]
}

// Cycle starts the rules of one cycle over nodes and the pods bound to
// them (spec.nodeName set, not finished: every scheduler's). Pods without
// a node, or on a node not listed (deleted), are ignored, as
// kube-scheduler's snapshot leaves nodes without a Node object out.
//
// Cycles run one at a time: starting one ends the last (its Adds and
// Removes are undone), which must not be used after. The NodeInfos are
// kept from the last cycle and brought up to date with what changed
// (see live); a change of the node set builds them again.
func (r *Rules) Cycle(ctx context.Context, nodes []*corev1.Node, bound []*corev1.Pod) (*Cycle, error) {
	r.liveMu.Lock()
	defer r.liveMu.Unlock()
	l := r.live
	if l != nil {
		if err := l.rollback(r.cfg.Logger); err != nil {
			r.cfg.Logger.Error(err, "rules snapshot rebuilt")
			l = nil
		}
	}
	if l != nil && l.sameNodes(nodes) {
		if err := l.update(r.cfg.Logger, nodes, bound); err != nil {
			r.cfg.Logger.Error(err, "rules snapshot rebuilt")
			l = nil
		}
	} else {
		l = nil
	}
	if l == nil {
		var err error
		if l, err = r.newLive(ctx, nodes, bound, r.live); err != nil {
			r.live = nil
			return nil, err
		}
	}
	r.live = l
	l.epoch++
	return &Cycle{ctx: klog.NewContext(ctx, r.cfg.Logger), fw: l.fw, snap: l.snap, log: r.cfg.Logger, r: r, l: l,
		epoch: l.epoch, released: map[types.UID]bool{}}, nil
}

// over says why the cycle may no longer change the snapshot: a later one
// started.
func (c *Cycle) over() error {
	if c.l.epoch != c.epoch {
		return fmt.Errorf("rules: %w", ErrCycleOver)
	}
	return nil
}

// check runs the pod's PreFilter plugins, or returns the result of the
// last run when nothing changed since.
func (c *Cycle) check(pod *corev1.Pod) *podCheck {
	if c.last != nil && c.last.uid == pod.UID && c.last.gen == c.gen && pod.UID != "" {
		return c.last
	}
	pc := &podCheck{uid: pod.UID, gen: c.gen, state: framework.NewCycleState()}
	pc.result, pc.status, pc.restricting = c.fw.RunPreFilterPlugins(c.ctx, pc.state, pod)
	c.last = pc
	return pc
}

// Filter says why the rules refuse pod on node, "" when they allow it.
// The reasons are kube-scheduler's own ("node(s) didn't match pod
// anti-affinity rules", "Insufficient cpu", "persistentvolumeclaim
// \"data\" not found").
func (c *Cycle) Filter(pod *corev1.Pod, node string) string {
	pc := c.check(pod)
	if !pc.status.IsSuccess() {
		c.record(pod, node, pc.status.Plugin())
		return reason(pc.status)
	}
	if !pc.result.AllNodes() && !pc.result.NodeNames.Has(node) {
		c.record(pod, node, sets.List(pc.restricting)...)
		return fmt.Sprintf("node(s) didn't satisfy plugin(s) %v", sets.List(pc.restricting))
	}
	v := c.filterNode(pc, pod, node)
	c.recordVerdict(pod, node, v)
	return v.reason
}

// verdict is the filter plugins' outcome for a pod on one node.
type verdict struct {
	// reason is why they refuse it, "" when they allow it; plugin is
	// the refusing plugin; found is false for a node not in the snapshot.
	reason, plugin string
	found          bool
}

// filterNode runs the filter plugins for pod (past PreFilter: pc) on node.
// It only reads the snapshot and pc's state, so it may run on several
// goroutines at once (kube-scheduler's parallel filter does the same).
func (c *Cycle) filterNode(pc *podCheck, pod *corev1.Pod, node string) verdict {
	ni, err := c.snap.NodeInfos().Get(node)
	if err != nil {
		return verdict{reason: "node not found"}
	}
	st := c.fw.RunFilterPlugins(c.ctx, pc.state, pod, ni)
	if st.IsSuccess() {
		return verdict{found: true}
	}
	return verdict{reason: reason(st), plugin: st.Plugin(), found: true}
}

// recordVerdict records v of pod on node for [Cycle.Rejected].
func (c *Cycle) recordVerdict(pod *corev1.Pod, node string, v verdict) {
	switch {
	case !v.found:
		c.record(pod, node, "")
	case v.reason == "":
		c.record(pod, node)
	default:
		c.record(pod, node, v.plugin)
	}
}

// filterWorkers bounds the goroutines of [Cycle.FilterAll]
// (kube-scheduler runs its filters on 16).
const filterWorkers = 16

// FilterAll is [Cycle.Filter] on each of nodes (the reasons in their
// order), the nodes checked in parallel as kube-scheduler checks them, on
// as many goroutines as the process may run at once.
func (c *Cycle) FilterAll(pod *corev1.Pod, nodes []string) []string {
	out := make([]string, len(nodes))
	pc := c.check(pod)
	workers := min(runtime.GOMAXPROCS(0), filterWorkers, len(nodes)/64)
	if !pc.status.IsSuccess() || !pc.result.AllNodes() || workers < 2 {
		for i, n := range nodes {
			out[i] = c.Filter(pod, n)
		}
		return out
	}
	// The plugins run on the workers; what the cycle records of each
	// verdict is written afterwards, on this goroutine.
	verdicts := make([]verdict, len(nodes))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(nodes); i = int(next.Add(1) - 1) {
				verdicts[i] = c.filterNode(pc, pod, nodes[i])
			}
		})
	}
	wg.Wait()
	for i, n := range nodes {
		c.recordVerdict(pod, n, verdicts[i])
		out[i] = verdicts[i].reason
	}
	return out
}

// Unresolvable reports whether pod is refused everywhere for a reason no
// eviction can change (a missing PersistentVolumeClaim, a PreFilter that
// rejects the pod itself), with that reason.
func (c *Cycle) Unresolvable(pod *corev1.Pod) (string, bool) {
	pc := c.check(pod)
	if pc.status.Code() == fwk.UnschedulableAndUnresolvable || pc.status.IsError() {
		for n := range c.l.nodes {
			c.record(pod, n, pc.status.Plugin())
		}
		return reason(pc.status), true
	}
	return "", false
}

// Score ranks nodes (which the rules allow) by the pod's preferences: the
// weighted sum of [Scores], normalized per plugin as kube-scheduler does.
// Nodes the rules do not know are left out.
func (c *Cycle) Score(pod *corev1.Pod, nodes []string) map[string]int64 {
	pc := c.check(pod)
	if !pc.status.IsSuccess() || len(nodes) == 0 {
		return nil
	}
	infos := make([]fwk.NodeInfo, 0, len(nodes))
	for _, n := range nodes {
		if ni, err := c.snap.NodeInfos().Get(n); err == nil {
			infos = append(infos, ni)
		}
	}
	if st := c.fw.RunPreScorePlugins(c.ctx, pc.state, pod, infos); !st.IsSuccess() {
		return nil
	}
	scores, st := c.fw.RunScorePlugins(c.ctx, pc.state, pod, infos)
	if !st.IsSuccess() {
		return nil
	}
	out := make(map[string]int64, len(scores))
	for _, s := range scores {
		out[s.Name] = s.TotalScore
	}
	return out
}

// Add counts pod on node from now on (a pod the cycle placed, or a
// released one put back).
func (c *Cycle) Add(pod *corev1.Pod, node string) error {
	if c.l.nodes[node] == nil {
		return nil // a deleted node's pods count nowhere
	}
	if err := c.over(); err != nil {
		return err
	}
	cp := pod
	if pod.Spec.NodeName != node {
		cp = pod.DeepCopy()
		cp.Spec.NodeName = node
	}
	pi, err := framework.NewPodInfo(cp)
	if err != nil {
		return fmt.Errorf("rules: pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	c.gen++
	delete(c.released, pod.UID)
	if err := c.snap.AddPod(pi, node); err != nil {
		return fmt.Errorf("rules: add pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	c.l.journal = append(c.l.journal, change{added: true, pi: pi, node: node})
	return nil
}

// Remove stops counting pod on node (a what-if that evicts it, or a
// placement undone).
func (c *Cycle) Remove(pod *corev1.Pod, node string) error {
	if c.l.nodes[node] == nil {
		return nil
	}
	if err := c.over(); err != nil {
		return err
	}
	pi, err := c.l.podOn(node, pod.UID)
	if err != nil {
		return fmt.Errorf("rules: remove pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	c.gen++
	if c.l.pods[pod.UID] != nil {
		c.released[pod.UID] = true
	}
	if err := c.snap.RemovePod(c.log, pod, node); err != nil {
		return fmt.Errorf("rules: remove pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	c.l.journal = append(c.l.journal, change{pi: pi, node: node})
	return nil
}

// reason is a status's reasons, "" for success.
func reason(st *fwk.Status) string {
	if st.IsSuccess() {
		return ""
	}
	if rs := st.Reasons(); len(rs) > 0 {
		return strings.Join(rs, ", ")
	}
	if err := st.AsError(); err != nil {
		return err.Error()
	}
	return st.Code().String()
}
