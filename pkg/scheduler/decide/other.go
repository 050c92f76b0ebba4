package decide

import (
	"errors"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpud/gpud/pkg/scheduler/anydevice"
	"github.com/gpud/gpud/pkg/scheduler/view"
)

// maxOtherTries bounds the nodes gpud's policy proposes for a pod whose
// other claims then do not fit there next to the devices it chose.
const maxOtherTries = 8

// otherFit places one pod's claims that gpud does not model (view.Other)
// with kube-scheduler's structured allocator, on the node gpud's policy
// chooses for the pod.
type otherFit struct {
	c      *cycle
	others []view.Other
	// alone caches, per node, the other claims' allocation with only what
	// the cycle holds so far (before the pod's own gpud devices).
	alone map[string]otherResult
	// banned are nodes where they did not fit next to the pod's gpud
	// devices.
	banned map[string]bool
	// invalid is set when a claim cannot be allocated as written.
	invalid error
}

type otherResult struct {
	res []resourceapi.AllocationResult
	why string
}

func (o *otherFit) claims() []*resourceapi.ResourceClaim {
	out := make([]*resourceapi.ResourceClaim, len(o.others))
	for i, x := range o.others {
		out[i] = x.Claim
	}
	return out
}

// refuse says why the other claims rule node out ("" when they fit).
func (o *otherFit) refuse(node string) string {
	if len(o.others) == 0 {
		return ""
	}
	if o.banned[node] {
		return "the claims' other devices do not fit next to the GPUs"
	}
	if r, ok := o.alone[node]; ok {
		return r.why
	}
	res, err := o.c.devices.Allocate(node, o.claims())
	r := otherResult{res: res}
	if err != nil {
		r.why = err.Error()
		if errors.Is(err, anydevice.ErrInvalid) {
			o.invalid = err
		}
	}
	if o.alone == nil {
		o.alone = map[string]otherResult{}
	}
	o.alone[node] = r
	return r.why
}

// allocations are the other claims' allocations on node, which refuse
// allowed, as the view's Allocations.
func (o *otherFit) allocations(node string) []view.Allocation {
	return o.toAllocations(node, o.alone[node].res)
}

func (o *otherFit) toAllocations(node string, res []resourceapi.AllocationResult) []view.Allocation {
	out := make([]view.Allocation, 0, len(res))
	for i := range res {
		out = append(out, view.Allocation{Claim: o.others[i].Claim, Node: node, Result: &res[i]})
	}
	return out
}

// place places the pod's gpud items with gpud's policy and then its other
// claims on the node chosen, next to the items' devices; a node where the
// other claims do not fit is banned and the policy asked again. The
// allocations (items' first) are assumed on the cycle.
func (o *otherFit) place(items []*view.Item, opt view.Options) ([]view.Allocation, error) {
	for range maxOtherTries {
		allocs, err := o.c.v.Place(items, opt)
		if err != nil {
			return nil, err
		}
		if err := o.c.assume(allocs...); err != nil {
			o.c.release(allocs...)
			return nil, err // wraps view.ErrInvalid
		}
		if len(o.others) == 0 {
			return allocs, nil
		}
		node := allocs[0].Node
		res, err := o.c.devices.Allocate(node, o.claims())
		if err == nil {
			more := o.toAllocations(node, res)
			if err := o.c.assume(more...); err != nil {
				o.c.release(append(allocs, more...)...)
				return nil, err
			}
			return append(allocs, more...), nil
		}
		o.c.release(allocs...)
		if errors.Is(err, anydevice.ErrInvalid) {
			o.invalid = err
			return nil, err
		}
		if o.banned == nil {
			o.banned = map[string]bool{}
		}
		o.banned[node] = true
	}
	return nil, fmt.Errorf("the claims' other devices fit on none of the %d nodes the policy chose: %w", maxOtherTries, view.ErrNoFit)
}
