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

// cachedMatch is [View.matches] through the view's MatchCache, if any.
func (v *View) cachedMatch(key string, n *Node, d *Device, sel []resourceapi.DeviceSelector) (bool, error) {
	if v.matches == nil {
		return v.matchDevice(d, sel)
	}
	k := matchKey{sel: key, node: n.Name, device: d.Name, generation: n.Generation}
	if ok, hit := v.matches.m[k]; hit {
		return ok, nil
	}
	ok, err := v.matchDevice(d, sel)
	if err != nil {
		return false, err
	}
	if len(v.matches.m) >= maxMatchCache {
		clear(v.matches.m)
	}
	v.matches.m[k] = ok
	return ok, nil
}
