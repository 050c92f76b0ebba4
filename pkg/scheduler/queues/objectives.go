package queues

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpud/gpud/pkg/allocator/jobs"
)

// Objectives are a queue's weights of the scheduler's terms (the terms
// of gpud sim jobs --objectives and gpud scheduler --objectives). Each is
// an integer (2) or a decimal string ("0.5", at most 3 decimals), 0 to
// MaxWeight, as spec.weight; a term left out weighs 0, and at least one
// must be positive. util=1,fair=1 (the others 0) is the scheduler's
// policy without objectives.
type Objectives struct {
	// Util weighs the GPUs a placement leaves unallocated on its node
	// (packing).
	Util intstr.IntOrString `json:"util,omitempty"`
	// Wait orders the queue's pending pods shortest predicted runtime
	// first, and weighs the queue's next pod's predicted runtime against
	// its siblings'.
	Wait intstr.IntOrString `json:"wait,omitempty"`
	// Fair weighs the queue's weighted DRF share against its siblings'.
	Fair intstr.IntOrString `json:"fair,omitempty"`
	// Energy weighs the watts a placement adds (waking an empty node
	// included).
	Energy intstr.IntOrString `json:"energy,omitempty"`
	// Cost weighs the node's price per GPU-hour (--gpu-models).
	Cost intstr.IntOrString `json:"cost,omitempty"`
}

// objectivesHelp says what a weight of spec.objectives accepts.
var objectivesHelp = fmt.Sprintf(`want 0 to %d: an integer, or a decimal string of at most 3 decimals such as "0.5"`, MaxWeight)

func (o *Objectives) terms() []struct {
	name string
	w    intstr.IntOrString
} {
	return []struct {
		name string
		w    intstr.IntOrString
	}{{"util", o.Util}, {"wait", o.Wait}, {"fair", o.Fair}, {"energy", o.Energy}, {"cost", o.Cost}}
}

// validateObjectives checks spec.objectives (nil is fine).
func validateObjectives(p *field.Path, o *Objectives) field.ErrorList {
	if o == nil {
		return nil
	}
	var errs field.ErrorList
	positive := false
	for _, t := range o.terms() {
		v, err := weightValue(t.w)
		if err != nil {
			errs = append(errs, field.Invalid(p.Child(t.name), t.w.String(), objectivesHelp))
			continue
		}
		positive = positive || v > 0
	}
	if len(errs) == 0 && !positive {
		errs = append(errs, field.Invalid(p, "", "every weight is 0: give at least one of util, wait, fair, energy, cost a positive weight, or leave spec.objectives out for the scheduler's --objectives"))
	}
	return errs
}

// objective is spec.objectives as the allocator's (nil for nil); o was
// validated.
func (o *Objectives) objective() *jobs.Objective {
	if o == nil {
		return nil
	}
	out := &jobs.Objective{}
	for _, t := range o.terms() {
		v, _ := weightValue(t.w)
		switch t.name {
		case "util":
			out.Util = v
		case "wait":
			out.Wait = v
		case "fair":
			out.Fair = v
		case "energy":
			out.Energy = v
		case "cost":
			out.Cost = v
		}
	}
	return out
}

// String is the objectives as gpud scheduler's --objectives writes them:
// the positive weights as written, in the terms' order
// ("util=0.5,energy=1"); "" for nil.
func (o *Objectives) String() string {
	if o == nil {
		return ""
	}
	var parts []string
	for _, t := range o.terms() {
		if v, err := weightValue(t.w); err != nil || v > 0 {
			parts = append(parts, t.name+"="+t.w.String())
		}
	}
	return strings.Join(parts, ",")
}
