package podgroup

import (
	"fmt"
	"strings"

	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gpud/gpud/pkg/scheduler/plan"
	"github.com/gpud/gpud/pkg/scheduler/podgroup/autogang"
)

// Topology levels a gang may name by [autogang.TopologyAnnotation]
// besides a node label key, narrowest first.
var TopologyLevels = []string{"nvlink", "node", "rack", "zone"}

// Topology modes of [autogang.TopologyModeAnnotation].
const (
	TopologyRequired  = "required"
	TopologyPreferred = "preferred"
)

// ParseTopology reads a gang's topology annotations (on a PodGroup, or on
// the workload an automatic gang comes from; where names it in reasons):
// [autogang.TopologyAnnotation] is one of [TopologyLevels] or a node label
// key, [autogang.TopologyModeAnnotation] is [TopologyRequired] (the
// default) or [TopologyPreferred]. Neither set is the zero GangTopology.
// A value that is neither is refused (ErrInvalid) naming the annotation
// and the values it takes; whether a label key is one this scheduler
// lets gangs name (--gang-topology-labels) is the decider's to check.
func ParseTopology(ann map[string]string, where string) (plan.GangTopology, error) {
	level, hasLevel := ann[autogang.TopologyAnnotation]
	mode, hasMode := ann[autogang.TopologyModeAnnotation]
	var t plan.GangTopology
	if !hasLevel && !hasMode {
		return t, nil
	}
	if !hasLevel {
		return t, fmt.Errorf("%s: annotation %s is set without %s; name the level (%s, or a node label key) or remove it: %w",
			where, autogang.TopologyModeAnnotation, autogang.TopologyAnnotation, strings.Join(TopologyLevels, ", "), ErrInvalid)
	}
	if !isLevel(level) {
		return t, fmt.Errorf("%s: annotation %s %s is not a topology level; want %s, or a node label key: %w",
			where, autogang.TopologyAnnotation, quote(level), strings.Join(TopologyLevels, ", "), ErrInvalid)
	}
	switch mode {
	case "", TopologyRequired:
		t.Required = true
	case TopologyPreferred:
	default:
		return t, fmt.Errorf("%s: annotation %s %s; want %s (the default) or %s: %w",
			where, autogang.TopologyModeAnnotation, quote(mode), TopologyRequired, TopologyPreferred, ErrInvalid)
	}
	t.Level = level
	t.Source = fmt.Sprintf("annotation %s on %s", autogang.TopologyAnnotation, where)
	return t, nil
}

// inTreeTopology reads a scheduling.k8s.io PodGroup's
// spec.schedulingConstraints.topology (at most one constraint: every pod
// within one domain of the key's node label), required as Kubernetes
// defines it; without it, the PodGroup's topology annotations.
func inTreeTopology(pg *schedulingv1beta1.PodGroup, id string) (plan.GangTopology, error) {
	sc := pg.Spec.SchedulingConstraints
	if sc == nil || len(sc.Topology) == 0 {
		return ParseTopology(pg.Annotations, id)
	}
	if len(sc.Topology) > 1 {
		return plan.GangTopology{}, fmt.Errorf("%s: spec.schedulingConstraints.topology has %d constraints; at most one is supported: %w",
			id, len(sc.Topology), ErrInvalid)
	}
	key := sc.Topology[0].Key
	if msgs := validation.IsQualifiedName(key); len(msgs) > 0 {
		return plan.GangTopology{}, fmt.Errorf("%s: spec.schedulingConstraints.topology[0].key %s is not a node label key: %s: %w",
			id, quote(key), strings.Join(msgs, "; "), ErrInvalid)
	}
	return plan.GangTopology{Level: key, Required: true,
		Source: fmt.Sprintf("spec.schedulingConstraints.topology of %s", id)}, nil
}

// isLevel reports whether s is one of TopologyLevels or a label key.
func isLevel(s string) bool {
	for _, l := range TopologyLevels {
		if s == l {
			return true
		}
	}
	return len(validation.IsQualifiedName(s)) == 0
}

// quote quotes a user's value for a reason, cut to a readable length.
func quote(s string) string {
	const most = 80
	if len(s) > most {
		s = s[:most] + "..."
	}
	return fmt.Sprintf("%q", s)
}
