package view

import (
	"context"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"
)

// compileSelectors compiles every CEL selector, so a bad one is reported
// once, where it is written.
func (v *View) compileSelectors(sel []resourceapi.DeviceSelector) error {
	for _, s := range sel {
		if s.CEL == nil {
			return fmt.Errorf("selector without CEL expression: %w", ErrUnsupported)
		}
		if r := v.cel.GetOrCompile(s.CEL.Expression); r.Error != nil {
			return fmt.Errorf("CEL %q: %v: %w", s.CEL.Expression, r.Error, ErrInvalid)
		}
	}
	return nil
}

// matchDevice evaluates selectors against d with kube-scheduler's CEL
// environment; all must hold.
func (v *View) matchDevice(d *Device, sel []resourceapi.DeviceSelector) (bool, error) {
	in := cel.Device{Driver: DriverName, AllowMultipleAllocations: &d.Shareable, Attributes: d.Attributes, Capacity: d.Capacity}
	for _, s := range sel {
		if s.CEL == nil {
			return false, fmt.Errorf("selector without CEL expression: %w", ErrUnsupported)
		}
		r := v.cel.GetOrCompile(s.CEL.Expression)
		if r.Error != nil {
			return false, fmt.Errorf("CEL %q: %v: %w", s.CEL.Expression, r.Error, ErrInvalid)
		}
		ok, _, err := r.DeviceMatches(context.Background(), in)
		if err != nil {
			return false, fmt.Errorf("CEL %q on device %s: %w", s.CEL.Expression, d.Name, err)
		}
		if !ok {
			return false, nil
		}
	}
	return true, nil
}

// selection is what the selectors accept on the view, evaluated once per
// view and selector list: per node from the view's MatchCache while the
// pool keeps its generation, else with CEL.
func (v *View) selection(sel []resourceapi.DeviceSelector) (*selection, error) {
	key := selectorKey(sel)
	if s := v.matched[key]; s != nil {
		return s, nil
	}
	s := &selection{key: key, eligible: make([]bool, len(v.devs))}
	seen := map[[2]int]bool{}
	for _, n := range v.nodes {
		nm, err := v.nodeMatch(key, n, sel)
		if err != nil {
			return nil, err
		}
		if len(n.devs) > 0 {
			copy(s.eligible[n.devs[0].id:], nm.eligible)
		}
		s.gpus += nm.gpus
		s.migs += nm.migs
		for _, sh := range nm.shapes {
			if !seen[sh.shape] {
				seen[sh.shape] = true
				s.shapes = append(s.shapes, sh)
			}
		}
	}
	v.matched[key] = s
	return s, nil
}

// nodeMatch is what the selectors (key) accept on n, through the view's
// MatchCache if it has one.
func (v *View) nodeMatch(key string, n *Node, sel []resourceapi.DeviceSelector) (*nodeMatch, error) {
	k := matchKey{sel: key, node: n.Name, generation: n.Generation}
	if v.matches != nil {
		// A pool of one generation publishes the same devices; the length
		// check guards against a pool republished without a new one.
		if nm := v.matches.m[k]; nm != nil && len(nm.eligible) == len(n.devs) {
			return nm, nil
		}
	}
	nm := &nodeMatch{eligible: make([]bool, len(n.devs))}
	seen := map[[2]int]bool{}
	for i, d := range n.devs {
		ok, err := v.matchDevice(d, sel)
		if err != nil {
			return nil, err
		}
		nm.eligible[i] = ok
		switch {
		case !ok:
		case d.MIG:
			nm.migs++
			if sh := [2]int{d.ComputeSlices, d.Size}; !seen[sh] {
				seen[sh] = true
				nm.shapes = append(nm.shapes, migShape{shape: sh, profile: d.Profile})
			}
		default:
			nm.gpus++
		}
	}
	if v.matches != nil {
		if v.matches.size+len(nm.eligible) > maxMatchCache {
			clear(v.matches.m)
			v.matches.size = 0
		}
		if old := v.matches.m[k]; old != nil {
			v.matches.size -= len(old.eligible)
		}
		v.matches.m[k] = nm
		v.matches.size += len(nm.eligible)
	}
	return nm, nil
}
