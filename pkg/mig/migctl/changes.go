package migctl

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/gpud/gpud/pkg/mig"
)

// ReportChanges tells f each GPU whose MIG layout an apply or recovery
// changed (mig.ServiceConfig.Changed's result), with its layout before and
// after in words ("MIG disabled", "3g.40gb×2, 1g.10gb×1"), for the node's
// Events. GPUs waiting for a reset and GPUs whose layout came back to
// where it was (a rollback) are not told.
func ReportChanges(res mig.Result, f func(gpuUUID, from, to string)) {
	after := map[int]mig.GPUState{}
	for _, g := range res.State.GPUs {
		after[g.Index] = g
	}
	for _, p := range res.Plan.GPUs {
		g, ok := after[p.GPU]
		if _, waits := res.Pending[p.GPU]; !ok || waits {
			continue
		}
		from, to := layoutBefore(p, g.MIGEnabled), layoutOf(g.MIGEnabled, g.Instances)
		if from == to {
			continue
		}
		f(cmp.Or(g.UUID, p.UUID), from, to)
	}
}

// layoutBefore is a GPU's layout before its plan ran: the instances kept
// and those destroyed, MIG off when the plan turns it on. A plan whose
// mode change waited for a reset (that the apply then did) changed the
// mode to enabledAfter.
func layoutBefore(p mig.GPUPlan, enabledAfter bool) string {
	in := slices.Clone(p.Keep)
	enabled := p.Pending == "" || !enabledAfter
	for _, s := range p.Steps {
		switch s.Kind {
		case mig.StepDestroy:
			in = append(in, mig.Instance{Profile: s.Profile})
		case mig.StepEnableMIG:
			enabled = false
		}
	}
	return layoutOf(enabled, in)
}

// layoutOf describes MIG mode and instances by profile count.
func layoutOf(enabled bool, in []mig.Instance) string {
	if !enabled {
		return "MIG disabled"
	}
	if len(in) == 0 {
		return "MIG enabled, no MIG devices"
	}
	n := map[string]int{}
	for _, i := range in {
		n[i.Profile]++
	}
	profiles := make([]string, 0, len(n))
	for p := range n {
		profiles = append(profiles, p)
	}
	slices.Sort(profiles)
	parts := make([]string, len(profiles))
	for i, p := range profiles {
		parts[i] = fmt.Sprintf("%s×%d", p, n[p])
	}
	return strings.Join(parts, ", ")
}
