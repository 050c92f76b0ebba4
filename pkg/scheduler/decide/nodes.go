package decide

import (
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	"github.com/gpud/gpud/pkg/scheduler/plan"
	"github.com/gpud/gpud/pkg/scheduler/view"
)

// nodeUse is the CPU and memory that bound pods and this cycle's binds
// take per node, and, with the snapshot's rules, every pod each node
// holds as kube-scheduler's plugins count them.
type nodeUse struct {
	cpu map[string]int64 // milli
	mem map[string]int64 // bytes
	// rules, if set, are told every take and give, so pods placed (or
	// released by what-ifs) this cycle count for the next pods' ports,
	// affinity and spread.
	rules plan.Rules
}

func newNodeUse(s *plan.Snapshot) *nodeUse {
	u := &nodeUse{cpu: map[string]int64{}, mem: map[string]int64{}}
	for _, p := range s.Bound {
		u.take(p.Pod.Spec.NodeName, p) // the rules hold the bound pods already
	}
	u.rules = s.Rules
	return u
}

func (u *nodeUse) take(node string, p *plan.Pod) {
	cpu, mem := requests(p.Pod)
	u.cpu[node] += cpu
	u.mem[node] += mem
	if u.rules != nil {
		_ = u.rules.Add(p.Pod, node) // fails only for a pod without a key: it then does not count
	}
}

// used returns what pods take on n, in view.Options.NodeUsed's units.
func (u *nodeUse) used(n *view.Node) (cpuMilli, memoryMiB int64) {
	return u.cpu[n.Name], u.mem[n.Name] >> 20
}

func (u *nodeUse) give(node string, p *plan.Pod) {
	cpu, mem := requests(p.Pod)
	u.cpu[node] -= cpu
	u.mem[node] -= mem
	if u.rules != nil {
		_ = u.rules.Remove(p.Pod, node)
	}
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

// refuse says why node n cannot take pod p ("" if it can). With rules,
// kube-scheduler's filters say it; without, gpud's own checks: cordoned,
// node selector or required affinity, an untolerated NoSchedule taint,
// CPU or memory.
func (u *nodeUse) refuse(n *view.Node, p *plan.Pod) string {
	if u.rules != nil {
		return u.rules.Filter(p.Pod, n.Name)
	}
	if n.Unschedulable {
		return "cordoned"
	}
	kn := &corev1.Node{}
	kn.Name, kn.Labels = n.Name, n.Labels
	if ok, _ := nodeaffinity.GetRequiredNodeAffinity(p.Pod).Match(kn); !ok {
		return "node affinity or selector"
	}
	if _, bad := corev1helpers.FindMatchingUntoleratedTaint(logr.Discard(), n.Taints, p.Pod.Spec.Tolerations, func(t *corev1.Taint) bool {
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
