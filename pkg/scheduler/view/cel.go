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

// matches evaluates selectors against d with kube-scheduler's CEL
// environment; all must hold.
func (v *View) matches(d *Device, sel []resourceapi.DeviceSelector) (bool, error) {
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
