package rules

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	schedcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// live is kube-scheduler's snapshot of nodes and bound pods kept from one
// cycle to the next, with the framework built over it. A cycle brings it
// up to date from what changed since the last (pod and node objects
// compared by pointer: informers replace an object on every update, never
// change it) instead of building every NodeInfo again, which at thousands
// of nodes was most of a one-pod cycle's rules.
//
// The snapshot stays in one mutation session for its whole life (opened
// on the bare nodes, never ended), so that kube-scheduler's own AddPod and
// RemovePod keep its NodeInfos and its affinity and PVC indexes right. A
// cycle's what-ifs and placements are journalled and undone before the
// next cycle applies the cluster's changes.
type live struct {
	snap frameworkSnapshot
	fw   framework.Framework
	// nodes are the Node objects the snapshot holds, by name.
	nodes map[string]*corev1.Node
	// pods are the bound pods the snapshot counts (on a node of nodes),
	// by UID, with the PodInfo it holds for each.
	pods map[types.UID]*framework.PodInfo
	// journal is what the open cycle added and removed, in order.
	journal []change
	// epoch counts cycles: a Cycle of an earlier epoch is over.
	epoch uint64
}

// change is one Add or Remove of a cycle, with what undoes it.
type change struct {
	added bool
	pi    fwk.PodInfo
	node  string
}

// newLive builds the snapshot from nothing: the nodes, then every bound
// pod on them (PodInfos reused from old, by pod object, when it has them).
func (r *Rules) newLive(ctx context.Context, nodes []*corev1.Node, bound []*corev1.Pod, old *live) (*live, error) {
	l := &live{nodes: make(map[string]*corev1.Node, len(nodes)), pods: make(map[types.UID]*framework.PodInfo, len(bound))}
	for _, n := range nodes {
		if n != nil {
			l.nodes[n.Name] = n
		}
	}
	l.snap = schedcache.NewSnapshot(nil, nodes)
	_ = l.snap.StartMutations() // a fresh snapshot has no session open
	for _, p := range bound {
		if l.nodes[p.Spec.NodeName] == nil {
			continue
		}
		var reuse *framework.PodInfo
		if old != nil {
			reuse = old.pods[p.UID]
		}
		if err := l.addBound(p, reuse); err != nil {
			return nil, err
		}
	}
	fw, err := r.framework(ctx, l.snap)
	if err != nil {
		return nil, err
	}
	l.fw = fw
	if old != nil {
		l.epoch = old.epoch
	}
	return l, nil
}

// addBound counts bound pod p on its node, with reuse as its PodInfo when
// reuse was made for this very object.
func (l *live) addBound(p *corev1.Pod, reuse *framework.PodInfo) error {
	pi := reuse
	if pi == nil || pi.Pod != p {
		var err error
		if pi, err = newPodInfo(p); err != nil {
			return err
		}
	}
	if err := l.snap.AddPod(pi, p.Spec.NodeName); err != nil {
		return fmt.Errorf("rules: add pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	l.pods[p.UID] = pi
	return nil
}

// newPodInfo is pod's PodInfo with its requests computed (cached in it:
// later cycles only read them).
func newPodInfo(pod *corev1.Pod) (*framework.PodInfo, error) {
	pi, err := framework.NewPodInfo(pod)
	if err != nil {
		return nil, fmt.Errorf("rules: pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	pi.CalculateResource()
	return pi, nil
}

// sameNodes reports whether nodes are the snapshot's node set, with no
// change the snapshot cannot take in place (a node's images: the image
// states are worked out over all nodes at once).
func (l *live) sameNodes(nodes []*corev1.Node) bool {
	count := 0
	for _, n := range nodes {
		if n == nil {
			continue
		}
		count++
		old, ok := l.nodes[n.Name]
		if !ok {
			return false
		}
		if old != n && !equality.Semantic.DeepEqual(old.Status.Images, n.Status.Images) {
			return false
		}
	}
	return count == len(l.nodes)
}

// update brings the snapshot to nodes (the same set: [live.sameNodes])
// and bound: changed Node objects set in place, pods added, replaced and
// removed by what changed since the last cycle.
func (l *live) update(log klog.Logger, nodes []*corev1.Node, bound []*corev1.Pod) error {
	for _, n := range nodes {
		if n == nil || l.nodes[n.Name] == n {
			continue
		}
		ni, err := l.snap.Get(n.Name)
		if err != nil {
			return fmt.Errorf("rules: node %s: %w", n.Name, err)
		}
		ni.(*framework.NodeInfo).SetNode(n)
		l.nodes[n.Name] = n
	}
	counted := 0
	for _, p := range bound {
		if l.nodes[p.Spec.NodeName] == nil {
			continue
		}
		counted++
		old := l.pods[p.UID]
		if old != nil && old.Pod == p {
			continue
		}
		if old != nil {
			if err := l.removeBound(log, old); err != nil {
				return err
			}
		}
		if err := l.addBound(p, nil); err != nil {
			return err
		}
	}
	if counted == len(l.pods) {
		return nil // every pod counted is still bound (UIDs are unique)
	}
	still := make(map[types.UID]bool, counted)
	for _, p := range bound {
		if l.nodes[p.Spec.NodeName] != nil {
			still[p.UID] = true
		}
	}
	for uid, pi := range l.pods {
		if still[uid] {
			continue
		}
		if err := l.removeBound(log, pi); err != nil {
			return err
		}
		delete(l.pods, uid)
	}
	return nil
}

// removeBound stops counting the bound pod of pi (as the snapshot holds
// it) on its node.
func (l *live) removeBound(log klog.Logger, pi *framework.PodInfo) error {
	if err := l.snap.RemovePod(log, pi.Pod, pi.Pod.Spec.NodeName); err != nil {
		return fmt.Errorf("rules: remove pod %s/%s: %w", pi.Pod.Namespace, pi.Pod.Name, err)
	}
	return nil
}

// rollback undoes the open cycle's Adds and Removes, last first.
func (l *live) rollback(log klog.Logger) error {
	for i := len(l.journal) - 1; i >= 0; i-- {
		ch := l.journal[i]
		var err error
		if ch.added {
			err = l.snap.RemovePod(log, ch.pi.GetPod(), ch.node)
		} else {
			err = l.snap.AddPod(ch.pi, ch.node)
		}
		if err != nil {
			l.journal = nil
			return fmt.Errorf("rules: undo cycle: %w", err)
		}
	}
	l.journal = l.journal[:0]
	return nil
}

// podOn is the PodInfo the snapshot holds for the pod with uid on node.
func (l *live) podOn(node string, uid types.UID) (fwk.PodInfo, error) {
	ni, err := l.snap.Get(node)
	if err != nil {
		return nil, err
	}
	for _, pi := range ni.GetPods() {
		if pi.GetPod().UID == uid {
			return pi, nil
		}
	}
	return nil, fmt.Errorf("pod %s not on node %s", uid, node)
}
