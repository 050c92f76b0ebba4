package mig

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Busy maps a device UUID (a MIG device, or a whole GPU) to who holds it:
// pods as "namespace/pod" and processes as "pid 1234".
type Busy map[string][]string

// holders returns who holds any of the UUIDs, sorted and deduplicated.
func (b Busy) holders(uuids ...string) []string {
	seen := map[string]bool{}
	var out []string
	for _, u := range uuids {
		for _, h := range b[u] {
			if !seen[h] {
				seen[h] = true
				out = append(out, h)
			}
		}
	}
	sort.Strings(out)
	return out
}

// Options change what the planner allows.
type Options struct {
	// Force allows destroying slices that are in use.
	Force bool `json:"force"`
}

// StepKind is what a step does.
type StepKind string

// Step kinds, in the order the applier runs them on a GPU.
const (
	StepDestroy    StepKind = "destroy"     // destroy a GPU instance and its compute instances
	StepDisableMIG StepKind = "disable-mig" // turn MIG mode off
	StepEnableMIG  StepKind = "enable-mig"  // turn MIG mode on
	StepCreateCI   StepKind = "create-ci"   // add the missing compute instance to a kept GPU instance
	StepCreate     StepKind = "create"      // create a GPU instance at a placement, and its compute instance
)

// Step is one change to one GPU.
type Step struct {
	Kind      StepKind  `json:"kind"`
	GPU       int       `json:"gpu"`
	Profile   string    `json:"profile,omitempty"`
	Placement Placement `json:"placement"`
	// GIID is the GPU instance a destroy or create-ci step acts on.
	GIID int `json:"giID,omitempty"`
	// UUIDs are the MIG devices a destroy removes.
	UUIDs []string `json:"uuids,omitempty"`
	// Holders is who held a slice destroyed with Force.
	Holders []string `json:"holders,omitempty"`
}

func (s Step) String() string {
	switch s.Kind {
	case StepDestroy:
		msg := fmt.Sprintf("gpu %d: destroy %s at %s (gi %d)", s.GPU, s.Profile, s.Placement, s.GIID)
		if len(s.Holders) > 0 {
			msg += " FORCED, held by " + strings.Join(s.Holders, ", ")
		}
		return msg
	case StepCreate:
		return fmt.Sprintf("gpu %d: create %s at %s", s.GPU, s.Profile, s.Placement)
	case StepCreateCI:
		return fmt.Sprintf("gpu %d: complete %s at %s (gi %d): create its compute instance", s.GPU, s.Profile, s.Placement, s.GIID)
	case StepEnableMIG:
		return fmt.Sprintf("gpu %d: enable MIG mode", s.GPU)
	case StepDisableMIG:
		return fmt.Sprintf("gpu %d: disable MIG mode", s.GPU)
	}
	return fmt.Sprintf("gpu %d: %s", s.GPU, s.Kind)
}

// GPUPlan is the plan for one GPU whose layout differs from the desired one.
type GPUPlan struct {
	GPU  int    `json:"gpu"`
	UUID string `json:"uuid"`
	// Keep lists the instances that stay as they are.
	Keep  []Instance `json:"keep,omitempty"`
	Steps []Step     `json:"steps,omitempty"`
	// Pending is set when the GPU waits for a reset before its MIG mode
	// changes; no steps run on it until then.
	Pending string `json:"pending,omitempty"`
}

// Plan is what it takes to go from the current layout to the desired one.
type Plan struct {
	Config string    `json:"config"`
	GPUs   []GPUPlan `json:"gpus"`
	// Unchanged lists the GPUs the layout names that already match it.
	Unchanged []int `json:"unchanged"`
}

// Steps lists all steps, GPU by GPU.
func (p Plan) Steps() []Step {
	var out []Step
	for _, g := range p.GPUs {
		out = append(out, g.Steps...)
	}
	return out
}

func (p Plan) hasPending() bool {
	for _, g := range p.GPUs {
		if g.Pending != "" {
			return true
		}
	}
	return false
}

// Empty reports whether the plan changes nothing.
func (p Plan) Empty() bool { return len(p.Steps()) == 0 }

// NewPlan computes the steps from cur to want. It is pure: the same inputs
// give the same plan. It touches only GPUs whose layout differs; on those it
// keeps the instances both layouts share, preferring busy ones, and places
// the rest around them. It fails with a *BusyError when a slice in use
// would be destroyed (unless opts.Force) and with a *PlacementError when
// the desired slices do not fit.
func NewPlan(cur State, want Desired, busy Busy, opts Options) (Plan, error) {
	p := Plan{Config: want.Config, Unchanged: []int{}}
	idx := make([]int, 0, len(want.GPUs))
	for i := range want.GPUs {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	var busyErr BusyError
	var errs []error
	for _, i := range idx {
		g := cur.GPU(i)
		if g == nil {
			errs = append(errs, fmt.Errorf("%w: gpu %d is not on this node", ErrBadLayout, i))
			continue
		}
		gp, refused, err := planGPU(*g, want.GPUs[i], busy, opts)
		busyErr.Slices = append(busyErr.Slices, refused...)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if len(gp.Steps) == 0 && gp.Pending == "" {
			p.Unchanged = append(p.Unchanged, i)
			continue
		}
		p.GPUs = append(p.GPUs, gp)
	}
	if len(busyErr.Slices) > 0 {
		errs = append([]error{&busyErr}, errs...)
	}
	if err := errors.Join(errs...); err != nil {
		return Plan{}, err
	}
	return p, nil
}

func planGPU(g GPUState, w GPUWants, busy Busy, opts Options) (GPUPlan, []BusySlice, error) {
	gp := GPUPlan{GPU: g.Index, UUID: g.UUID}
	if !g.MIGCapable {
		return gp, nil, nil
	}
	if g.Pending() {
		if g.PendingEnabled == w.MIGEnabled {
			gp.Pending = fmt.Sprintf("MIG mode change to %s waits for a GPU reset", onOff(w.MIGEnabled))
			return gp, nil, nil
		}
		gp.Steps = append(gp.Steps, modeStep(g.Index, g.MIGEnabled)) // cancel the pending change
	}
	if g.MIGEnabled != w.MIGEnabled {
		if h := busy.holders(g.UUID); len(h) > 0 {
			if !opts.Force {
				return gp, []BusySlice{{GPU: g.Index, Profile: "whole GPU", UUID: g.UUID, Holders: h}}, nil
			}
		}
	}
	if !w.MIGEnabled {
		if !g.MIGEnabled {
			return gp, nil, nil
		}
		var refused []BusySlice
		for _, in := range g.Instances {
			s, r := destroyStep(g.Index, in, busy, opts)
			refused = append(refused, r...)
			gp.Steps = append(gp.Steps, s)
		}
		if len(refused) > 0 {
			return gp, refused, nil
		}
		gp.Steps = append(gp.Steps, modeStep(g.Index, false))
		return gp, nil, nil
	}
	var current []Instance
	if g.MIGEnabled {
		current = g.Instances
	}
	keep, place, err := choose(g, current, w.Slices, busy, opts)
	if err != nil {
		return gp, nil, err
	}
	var refused []BusySlice
	kept := map[int]bool{}
	for _, in := range keep {
		kept[in.GIID] = true
	}
	for _, in := range current {
		if !kept[in.GIID] {
			s, r := destroyStep(g.Index, in, busy, opts)
			refused = append(refused, r...)
			gp.Steps = append(gp.Steps, s)
		}
	}
	if len(refused) > 0 {
		return gp, refused, nil
	}
	if !g.MIGEnabled {
		gp.Steps = append(gp.Steps, modeStep(g.Index, true))
	}
	for _, in := range keep {
		if !in.Complete() {
			gp.Steps = append(gp.Steps, Step{Kind: StepCreateCI, GPU: g.Index, Profile: in.Profile, Placement: in.Placement, GIID: in.GIID})
		}
		gp.Keep = append(gp.Keep, in)
	}
	for _, s := range place {
		gp.Steps = append(gp.Steps, Step{Kind: StepCreate, GPU: g.Index, Profile: s.profile, Placement: s.at})
	}
	if len(gp.Steps) == 0 {
		gp.Keep = nil
	}
	return gp, nil, nil
}

func destroyStep(gpu int, in Instance, busy Busy, opts Options) (Step, []BusySlice) {
	s := Step{Kind: StepDestroy, GPU: gpu, Profile: in.Profile, Placement: in.Placement, GIID: in.GIID, UUIDs: in.UUIDs()}
	h := busy.holders(in.UUIDs()...)
	if len(h) == 0 {
		return s, nil
	}
	if opts.Force {
		s.Holders = h
		return s, nil
	}
	return s, []BusySlice{{GPU: gpu, Profile: in.Profile, UUID: strings.Join(in.UUIDs(), ","), Holders: h}}
}

func modeStep(gpu int, enabled bool) Step {
	if enabled {
		return Step{Kind: StepEnableMIG, GPU: gpu}
	}
	return Step{Kind: StepDisableMIG, GPU: gpu}
}

func onOff(b bool) string {
	if b {
		return "enabled"
	}
	return "disabled"
}
