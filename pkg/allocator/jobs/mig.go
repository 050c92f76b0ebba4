package jobs

import (
	"fmt"
	"slices"
	"strings"
)

// MIGSlicesPerGPU is the number of compute slices of a MIG GPU; memory is cut
// in 8 slices.
const (
	MIGSlicesPerGPU   = 7
	migMemorySlices   = 8
	migFullMemoryMask = 1<<migMemorySlices - 1
)

// MIGProfile is a GPU instance shape: Compute slices of 7, Memory slices of
// 8, placeable only at the memory-slice offsets in Starts (the A100/H100
// placement rules).
type MIGProfile struct {
	Name    string
	Compute int
	Memory  int
	Starts  []int
}

// MIGProfiles lists the profiles by their 80 GB names; the 40 GB names
// (1g.5gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb) are accepted as aliases.
var MIGProfiles = []MIGProfile{
	{Name: "1g.10gb", Compute: 1, Memory: 1, Starts: []int{0, 1, 2, 3, 4, 5, 6}},
	{Name: "1g.20gb", Compute: 1, Memory: 2, Starts: []int{0, 2, 4, 6}},
	{Name: "2g.20gb", Compute: 2, Memory: 2, Starts: []int{0, 2, 4}},
	{Name: "3g.40gb", Compute: 3, Memory: 4, Starts: []int{0, 4}},
	{Name: "4g.40gb", Compute: 4, Memory: 4, Starts: []int{0}},
	{Name: "7g.80gb", Compute: 7, Memory: 8, Starts: []int{0}},
}

var migAliases = map[string]string{
	"1g.5gb": "1g.10gb", "2g.10gb": "2g.20gb", "3g.20gb": "3g.40gb", "4g.20gb": "4g.40gb", "7g.40gb": "7g.80gb",
}

// LookupMIG finds a profile by name (a "nvidia.com/mig-" prefix is allowed).
func LookupMIG(name string) (MIGProfile, error) {
	name = strings.TrimPrefix(name, "nvidia.com/mig-")
	if a, ok := migAliases[name]; ok {
		name = a
	}
	for _, p := range MIGProfiles {
		if p.Name == name {
			return p, nil
		}
	}
	names := make([]string, len(MIGProfiles))
	for i, p := range MIGProfiles {
		names[i] = p.Name
	}
	return MIGProfile{}, fmt.Errorf("mig profile %q (want one of %s): %w", name, strings.Join(names, ", "), ErrInvalid)
}

// mask is the memory-slice bit set of p placed at start.
func (p *MIGProfile) mask(start int) uint8 {
	return uint8((1<<p.Memory - 1) << start)
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
		if used&p.mask(s) == 0 {
			return s
		}
	}
	return -1
}

// migProfileIndex returns p's index in MIGProfiles.
func migProfileIndex(name string) int {
	return slices.IndexFunc(MIGProfiles, func(p MIGProfile) bool { return p.Name == name })
}
