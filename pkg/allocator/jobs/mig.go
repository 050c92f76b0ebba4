package jobs

import (
	"fmt"

	"github.com/gpud/gpud/pkg/allocator"
)

// MIGSlicesPerGPU is the number of compute slices of a MIG GPU; memory is cut
// in 8 slices.
const (
	MIGSlicesPerGPU   = allocator.MIGComputeSlices
	migMemorySlices   = allocator.MIGMemorySlices
	migFullMemoryMask = 1<<migMemorySlices - 1
)

// MIGProfile is a GPU instance shape: Compute slices of 7, Memory slices of
// 8, placeable only at the memory-slice offsets in Starts (the A100/H100
// placement rules). It is pkg/allocator's.
type MIGProfile = allocator.MIGProfile

// MIGProfiles lists the profiles by their 80 GB names; the 40 GB names
// (1g.5gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb) are accepted as aliases. It
// is pkg/allocator's table.
var MIGProfiles = allocator.MIGProfiles

// LookupMIG finds a profile by name (a "nvidia.com/mig-" prefix is allowed).
func LookupMIG(name string) (MIGProfile, error) {
	i, err := migIndex(name)
	if err != nil {
		return MIGProfile{}, err
	}
	return MIGProfiles[i], nil
}

// migIndex is the index in [MIGProfiles] of the named profile.
func migIndex(name string) (int, error) {
	i := allocator.MIGProfileIndex(name)
	if i < 0 {
		return 0, fmt.Errorf("mig profile %q (want one of %s): %w", name, allocator.MIGProfileNames(), ErrInvalid)
	}
	return i, nil
}

// migMilli is the milli-GPU a MIG instance of compute slices counts as in
// per-model quotas: compute/7 of a GPU, rounded up.
func migMilli(compute int) int64 {
	return (int64(compute)*1000 + MIGSlicesPerGPU - 1) / MIGSlicesPerGPU
}

// migFit returns the first start at which p fits into used memory slices
// with usedCompute compute slices busy, or -1.
func migFit(p *MIGProfile, used uint8, usedCompute int) int {
	if usedCompute+p.Compute > MIGSlicesPerGPU {
		return -1
	}
	for _, s := range p.Starts {
		if used&p.Mask(s) == 0 {
			return s
		}
	}
	return -1
}
