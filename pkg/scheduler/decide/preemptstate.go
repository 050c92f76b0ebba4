package decide

import (
	"slices"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/gpud/gpud/pkg/scheduler/plan"
)

// preemptState is what preemption carries from one preemptor to the next
// within a cycle: the victims (built once), the searches started against
// their cap, each PodDisruptionBudget's disruptions spent by this cycle's
// evictions, and the nodes a preemptor holds room on (one preemptor per
// node a cycle: plans made side by side could collide).
type preemptState struct {
	// victims are the running pods (gangs as one) preemption may pick,
	// built on first use (victimsOK).
	victims   []*victim
	victimsOK bool
	// searches counts the preemptions tried; limit caps them.
	searches, limit int
	// pdbUsed counts this cycle's evictions per budget (namespace/name).
	pdbUsed map[string]int
	// nominated are the nodes a preemptor holds room on this cycle.
	nominated map[string]bool
}

// newPreemptState allows limit preemption searches a cycle.
func newPreemptState(limit int) preemptState {
	return preemptState{limit: limit, pdbUsed: map[string]int{}, nominated: map[string]bool{}}
}

// open reports whether a preemption search may still start.
func (s *preemptState) open() bool { return s.searches < s.limit }

// start counts a search, false (and nothing counted) when none is left.
func (s *preemptState) start() bool {
	if !s.open() {
		return false
	}
	s.searches++
	return true
}

// victimList is the victims, built by build on first use.
func (s *preemptState) victimList(build func() []*victim) []*victim {
	if !s.victimsOK {
		s.victimsOK = true
		s.victims = build()
	}
	return s.victims
}

// nominate marks node as held by a preemptor for the rest of the cycle.
func (s *preemptState) nominate(node string) { s.nominated[node] = true }

// held reports whether a preemptor holds any of nodes.
func (s *preemptState) held(nodes []string) bool {
	return slices.ContainsFunc(nodes, func(n string) bool { return s.nominated[n] })
}

// pdbBlocking names the budget of pdbs that forbids evicting pods now
// (its remaining disruptions, less this cycle's evictions, are fewer than
// the pods it covers), or "".
func (s *preemptState) pdbBlocking(pdbs []*policyv1.PodDisruptionBudget, pods []*plan.Pod) string {
	for _, b := range pdbs {
		sel := pdbSelector(b)
		if sel == nil {
			continue
		}
		n := pdbCovers(b, sel, pods)
		if n > 0 && int(b.Status.DisruptionsAllowed)-s.pdbUsed[b.Namespace+"/"+b.Name] < n {
			return b.Namespace + "/" + b.Name
		}
	}
	return ""
}

// evicted charges p's eviction to every budget of pdbs that covers it.
func (s *preemptState) evicted(pdbs []*policyv1.PodDisruptionBudget, p *plan.Pod) {
	for _, b := range pdbs {
		if sel := pdbSelector(b); sel != nil && pdbCovers(b, sel, []*plan.Pod{p}) > 0 {
			s.pdbUsed[b.Namespace+"/"+b.Name]++
		}
	}
}

// pdbSelector is b's pod selector; nil for no budget, no selector, a
// malformed one, or one that selects nothing (an empty selector).
func pdbSelector(b *policyv1.PodDisruptionBudget) labels.Selector {
	if b == nil || b.Spec.Selector == nil {
		return nil
	}
	sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
	if err != nil || sel.Empty() {
		return nil
	}
	return sel
}

// pdbCovers counts the pods b's selector sel covers (in b's namespace).
func pdbCovers(b *policyv1.PodDisruptionBudget, sel labels.Selector, pods []*plan.Pod) int {
	n := 0
	for _, p := range pods {
		if p.Pod.Namespace == b.Namespace && sel.Matches(labels.Set(p.Pod.Labels)) {
			n++
		}
	}
	return n
}
