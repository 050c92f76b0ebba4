// Package decide is gpud scheduler's policy: it turns a [plan.Snapshot]
// into a [plan.Plan] (which pending pod goes to which node and devices,
// which waits and why).
package decide

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"github.com/gpud/gpud/pkg/allocator/jobs"
	"github.com/gpud/gpud/pkg/scheduler/plan"
	"github.com/gpud/gpud/pkg/scheduler/view"
)

// Greedy places pending pods one at a time, highest priority first, then
// oldest, each where the allocator policy chooses. It is the first
// decider: no gangs, queues or preemption.
type Greedy struct{}

var _ plan.Decider = Greedy{}

// Decide implements plan.Decider.
func (Greedy) Decide(s *plan.Snapshot) plan.Plan {
	var out plan.Plan
	nodes := newNodeUse(s)
	pending := slices.Clone(s.Pending)
	slices.SortStableFunc(pending, func(a, b *plan.Pod) int {
		if c := cmp.Compare(b.Priority, a.Priority); c != 0 {
			return c
		}
		return a.Created.Compare(b.Created)
	})
	for _, p := range pending {
		b, pend := placePod(s, nodes, p)
		if pend != nil {
			out.Pending = append(out.Pending, *pend)
			continue
		}
		out.Binds = append(out.Binds, *b)
	}
	return out
}

// placePod places one pod on the snapshot's view and records what it takes
// (view usage and node CPU/memory), or says why it waits.
func placePod(s *plan.Snapshot, nodes *nodeUse, p *plan.Pod) (*plan.Bind, *plan.Pending) {
	pin, err := view.AllocatedNode(p.Claims)
	if err != nil {
		return nil, &plan.Pending{Pod: p, Code: plan.CodeInvalid, Message: err.Error()}
	}
	items, err := s.View.Demand(p.Claims)
	if err != nil {
		return nil, &plan.Pending{Pod: p, Code: plan.CodeInvalid, Message: err.Error()}
	}
	why := map[string]int{}
	filter := func(n *view.Node) bool {
		if pin != "" && n.Name != pin {
			return false
		}
		if r := nodes.refuse(n, p); r != "" {
			why[r]++
			return false
		}
		return true
	}
	if len(items) == 0 {
		// Nothing left to allocate: the pod's claims are allocated (pinned)
		// or it has no gpud claims; it needs a node with room.
		for _, n := range s.View.Nodes() {
			if filter(n) {
				nodes.take(n.Name, p)
				return &plan.Bind{Pod: p, Node: n.Name, Allocations: reserveOnly(p)}, nil
			}
		}
		return nil, &plan.Pending{Pod: p, Code: jobs.CodeCapacity, Message: noNodeMessage(pin, why)}
	}
	allocs, err := s.View.Place(items, view.Options{Policy: s.Policy, NodeFilter: filter})
	if err != nil {
		code := jobs.CodeCapacity
		if !errors.Is(err, view.ErrNoFit) {
			code = plan.CodeInvalid
		}
		msg := err.Error()
		if len(why) > 0 {
			msg += "; " + noNodeMessage(pin, why)
		}
		return nil, &plan.Pending{Pod: p, Code: code, Message: msg}
	}
	if err := s.View.Assume(allocs...); err != nil {
		return nil, &plan.Pending{Pod: p, Code: plan.CodeInvalid, Message: err.Error()}
	}
	node := allocs[0].Node
	nodes.take(node, p)
	return &plan.Bind{Pod: p, Node: node, Allocations: append(allocs, reserveOnly(p)...)}, nil
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

func noNodeMessage(pin string, why map[string]int) string {
	if pin != "" && len(why) == 0 {
		return fmt.Sprintf("the pod's allocated claims pin it to node %s", pin)
	}
	reasons := slices.Sorted(func(yield func(string) bool) {
		for r := range why {
			if !yield(r) {
				return
			}
		}
	})
	parts := make([]string, len(reasons))
	for i, r := range reasons {
		parts[i] = fmt.Sprintf("%d %s", why[r], r)
	}
	return "nodes refused: " + strings.Join(parts, ", ")
}

// nodeUse is the CPU and memory that bound pods and this cycle's binds
// take per node.
type nodeUse struct {
	kube map[string]*corev1.Node
	cpu  map[string]int64 // milli
	mem  map[string]int64 // bytes
}

func newNodeUse(s *plan.Snapshot) *nodeUse {
	u := &nodeUse{kube: map[string]*corev1.Node{}, cpu: map[string]int64{}, mem: map[string]int64{}}
	for _, p := range s.Bound {
		u.take(p.Pod.Spec.NodeName, p)
	}
	return u
}

func (u *nodeUse) take(node string, p *plan.Pod) {
	cpu, mem := requests(p.Pod)
	u.cpu[node] += cpu
	u.mem[node] += mem
}

// requests sums a pod's container requests (init containers: the max),
// as the kubelet admits it.
func requests(p *corev1.Pod) (cpuMilli, memBytes int64) {
	for _, c := range p.Spec.Containers {
		cpuMilli += c.Resources.Requests.Cpu().MilliValue()
		memBytes += c.Resources.Requests.Memory().Value()
	}
	for _, c := range p.Spec.InitContainers {
		cpuMilli = max(cpuMilli, c.Resources.Requests.Cpu().MilliValue())
		memBytes = max(memBytes, c.Resources.Requests.Memory().Value())
	}
	return cpuMilli, memBytes
}

// refuse says why node n cannot take pod p ("" if it can): cordoned, node
// selector or required affinity, an untolerated NoSchedule taint, CPU or
// memory.
func (u *nodeUse) refuse(n *view.Node, p *plan.Pod) string {
	if n.Unschedulable {
		return "cordoned"
	}
	kn := &corev1.Node{}
	kn.Name, kn.Labels = n.Name, n.Labels
	if ok, _ := nodeaffinity.GetRequiredNodeAffinity(p.Pod).Match(kn); !ok {
		return "node affinity or selector"
	}
	if _, bad := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), n.Taints, p.Pod.Spec.Tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	}, false); bad {
		return "untolerated taint"
	}
	cpu, mem := requests(p.Pod)
	if n.CPUMilli > 0 && u.cpu[n.Name]+cpu > n.CPUMilli {
		return "cpu"
	}
	if n.MemoryMiB > 0 && u.mem[n.Name]+mem > n.MemoryMiB*(1<<20) {
		return "memory"
	}
	return ""
}
