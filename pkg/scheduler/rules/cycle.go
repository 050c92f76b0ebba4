package rules

import (
	"context"
	"fmt"
	"strings"
	"sync"

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

// newSnapshot is the upstream snapshot of nodes and the pods bound to
// them, open for [Cycle.Add] and [Cycle.Remove]: the nodes alone, then each
// pod added with its PodInfo from infos, kept from earlier cycles
// (computing a pod's requests is most of building a snapshot, and a bound
// pod's do not change while its object does not).
func newSnapshot(nodes []*corev1.Node, pods []*corev1.Pod, infos *podInfos) (frameworkSnapshot, error) {
	s := schedcache.NewSnapshot(nil, nodes)
	_ = s.StartMutations() // a fresh snapshot has no session open
	for _, p := range pods {
		pi, err := infos.get(p)
		if err != nil {
			return nil, err
		}
		if err := s.AddPod(pi, p.Spec.NodeName); err != nil {
			return nil, fmt.Errorf("rules: add pod %s/%s: %w", p.Namespace, p.Name, err)
		}
	}
	return s, nil
}

// podInfos keeps the upstream PodInfo of each bound pod across cycles, by
// the pod object (informer objects are replaced, never changed, on
// update), with its requests computed, so that cycles only read it.
type podInfos struct {
	mu   sync.Mutex
	byID map[types.UID]podInfo
	seen map[types.UID]bool // in the current generation
}

type podInfo struct {
	pod *corev1.Pod
	pi  *framework.PodInfo
}

// get returns pod's PodInfo, made once per pod object.
func (c *podInfos) get(pod *corev1.Pod) (*framework.PodInfo, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byID == nil {
		c.byID, c.seen = map[types.UID]podInfo{}, map[types.UID]bool{}
	}
	c.seen[pod.UID] = true
	if e, ok := c.byID[pod.UID]; ok && e.pod == pod {
		return e.pi, nil
	}
	pi, err := framework.NewPodInfo(pod)
	if err != nil {
		return nil, fmt.Errorf("rules: pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	pi.CalculateResource() // cached in pi now: later cycles only read it
	c.byID[pod.UID] = podInfo{pod: pod, pi: pi}
	return pi, nil
}

// prune drops the pods no cycle asked for since the last prune.
func (c *podInfos) prune() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for uid := range c.byID {
		if !c.seen[uid] {
			delete(c.byID, uid)
		}
	}
	clear(c.seen)
}

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
	// nodes are the cycle's nodes by name; pods elsewhere do not count.
	nodes map[string]bool
	// rejected is what Filter said of each pod, by UID ([Cycle.Rejected]),
	// while no bound pod was released (what-ifs do not count).
	rejected map[string]*rejection
	// bound are the pods bound at the start, released those of them a
	// what-if has taken away now.
	bound, released map[types.UID]bool
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
func (r *Rules) Cycle(ctx context.Context, nodes []*corev1.Node, bound []*corev1.Pod) (*Cycle, error) {
	known := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		if n != nil {
			known[n.Name] = true
		}
	}
	pods := make([]*corev1.Pod, 0, len(bound))
	for _, p := range bound {
		if known[p.Spec.NodeName] {
			pods = append(pods, p)
		}
	}
	snap, err := newSnapshot(nodes, pods, &r.infos)
	if err != nil {
		return nil, err
	}
	r.infos.prune()
	fw, err := r.framework(ctx, snap)
	if err != nil {
		return nil, err
	}
	c := &Cycle{ctx: klog.NewContext(ctx, r.cfg.Logger), fw: fw, snap: snap, log: r.cfg.Logger, r: r, nodes: known,
		bound: make(map[types.UID]bool, len(pods)), released: map[types.UID]bool{}}
	for _, p := range pods {
		c.bound[p.UID] = true
	}
	return c, nil
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
	ni, err := c.snap.NodeInfos().Get(node)
	if err != nil {
		c.record(pod, node, "")
		return "node not found"
	}
	st := c.fw.RunFilterPlugins(c.ctx, pc.state, pod, ni)
	if st.IsSuccess() {
		c.record(pod, node)
	} else {
		c.record(pod, node, st.Plugin())
	}
	return reason(st)
}

// Unresolvable reports whether pod is refused everywhere for a reason no
// eviction can change (a missing PersistentVolumeClaim, a PreFilter that
// rejects the pod itself), with that reason.
func (c *Cycle) Unresolvable(pod *corev1.Pod) (string, bool) {
	pc := c.check(pod)
	if pc.status.Code() == fwk.UnschedulableAndUnresolvable || pc.status.IsError() {
		for n := range c.nodes {
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
	if !c.nodes[node] {
		return nil // a deleted node's pods count nowhere
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
	return nil
}

// Remove stops counting pod on node (a what-if that evicts it, or a
// placement undone).
func (c *Cycle) Remove(pod *corev1.Pod, node string) error {
	if !c.nodes[node] {
		return nil
	}
	c.gen++
	if c.bound[pod.UID] {
		c.released[pod.UID] = true
	}
	if err := c.snap.RemovePod(c.log, pod, node); err != nil {
		return fmt.Errorf("rules: remove pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
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
