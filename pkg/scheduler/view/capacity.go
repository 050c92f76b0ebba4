package view

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// consumed is what a request with capacity requests req (nil: none) takes
// from a shareable device, as kube-scheduler computes it: per capacity of
// the device, the request rounded up by the capacity's request policy, or
// its default (else the whole capacity) when not requested. It fails when
// the result breaks the policy (above max, off the valid values).
func consumed(req map[resourceapi.QualifiedName]resource.Quantity, d *Device) (map[resourceapi.QualifiedName]resource.Quantity, error) {
	out := make(map[resourceapi.QualifiedName]resource.Quantity, len(d.Capacity))
	for name := range req {
		if _, ok := d.Capacity[name]; !ok {
			return nil, fmt.Errorf("device %s has no capacity %q: %w", d.Name, name, ErrInvalid)
		}
	}
	for name, c := range d.Capacity {
		q, asked := req[name]
		p := c.RequestPolicy
		switch {
		case !asked && p != nil && p.Default != nil:
			q = p.Default.DeepCopy()
		case !asked:
			q = c.Value.DeepCopy()
		case p == nil:
		case p.ValidRange != nil && p.ValidRange.Min != nil:
			r, err := roundUp(q, p.ValidRange)
			if err != nil {
				return nil, fmt.Errorf("device %s capacity %s: %w", d.Name, name, err)
			}
			q = r
		case len(p.ValidValues) > 0:
			for _, v := range p.ValidValues {
				if q.Cmp(v) <= 0 {
					q = v.DeepCopy()
					break
				}
			}
		}
		if q.Sign() < 0 {
			return nil, fmt.Errorf("device %s capacity %s: negative: %w", d.Name, name, ErrInvalid)
		}
		if p != nil && !(p.Default != nil && q.Cmp(*p.Default) == 0) {
			if p.ValidRange != nil && p.ValidRange.Max != nil && q.Cmp(*p.ValidRange.Max) > 0 {
				return nil, fmt.Errorf("device %s capacity %s: %s above the maximum %s: %w", d.Name, name, q.String(), p.ValidRange.Max.String(), ErrInvalid)
			}
			if p.ValidRange == nil && len(p.ValidValues) > 0 && q.Cmp(p.ValidValues[len(p.ValidValues)-1]) > 0 {
				return nil, fmt.Errorf("device %s capacity %s: %s not a valid value: %w", d.Name, name, q.String(), ErrInvalid)
			}
		}
		out[name] = q
	}
	return out, nil
}

// roundUp rounds q up to min + k·step in whole units (kube-scheduler's
// integer path; gpud's steps are whole bytes and percents).
func roundUp(q resource.Quantity, r *resourceapi.CapacityRequestPolicyRange) (resource.Quantity, error) {
	if q.Cmp(*r.Min) < 0 {
		return r.Min.DeepCopy(), nil
	}
	if r.Step == nil {
		return q, nil
	}
	if q.CmpInt64(maxMemoryBytes) > 0 {
		return resource.Quantity{}, fmt.Errorf("request %s too large: %w", q.String(), ErrInvalid)
	}
	v, lo, step := q.Value(), r.Min.Value(), r.Step.Value()
	if step <= 0 || lo < 0 {
		return resource.Quantity{}, fmt.Errorf("request policy min %d step %d: %w", lo, step, ErrInvalid)
	}
	n := (v - lo + step - 1) / step
	return *resource.NewQuantity(lo+n*step, r.Step.Format), nil
}
