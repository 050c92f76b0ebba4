package allocator

import (
	"fmt"
	"math/bits"
	"slices"
	"strings"
)

// MIG geometry: a MIG GPU has 7 compute slices and 8 memory slices; a
// profile may start only at the memory-slice offsets its table row lists
// (the A100/H100 placement rules).
const (
	MIGComputeSlices = 7
	MIGMemorySlices  = 8
	migMilliPerSlice = MilliPerGPU / MIGMemorySlices
)

// MIGProfile is one GPU-instance shape: Compute slices of 7, Memory slices
// of 8, placeable only at the memory-slice offsets in Starts.
type MIGProfile struct {
	Name    string
	Compute int
	Memory  int
	Starts  []int
}

// Mask is the memory-slice bit set of p placed at start.
func (p *MIGProfile) Mask(start int) uint8 {
	return uint8((1<<p.Memory - 1) << start)
}

// MIGProfiles lists the profiles by their 80 GB names; the 40 GB names
// (1g.5gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb) are accepted as aliases. It
// is the one table of this package and pkg/allocator/jobs; do not modify.
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

// MIGProfileIndex returns the index in [MIGProfiles] of the named profile
// (a "nvidia.com/mig-" prefix and the 40 GB names are accepted), or -1.
func MIGProfileIndex(name string) int {
	name = strings.TrimPrefix(strings.TrimSpace(name), "nvidia.com/mig-")
	if a, ok := migAliases[name]; ok {
		name = a
	}
	return slices.IndexFunc(MIGProfiles, func(p MIGProfile) bool { return p.Name == name })
}

// MIGProfileNames lists the profiles' names, for messages.
func MIGProfileNames() string {
	names := make([]string, len(MIGProfiles))
	for i, p := range MIGProfiles {
		names[i] = p.Name
	}
	return strings.Join(names, ", ")
}

// lookupMIG returns the index+1 of the named profile.
func lookupMIG(name string) (int8, error) {
	i := MIGProfileIndex(name)
	if i < 0 {
		return 0, fmt.Errorf("MIG profile %q (want one of %s): %w", name, MIGProfileNames(), ErrInvalid)
	}
	return int8(i + 1), nil
}

// migStart returns the lowest start at which profile p fits on GPU g of s,
// or -1.
func migStart(s *nodeState, g int, p *MIGProfile) int {
	if int(s.migCompute[g])+p.Compute > MIGComputeSlices {
		return -1
	}
	for _, st := range p.Starts {
		if s.migUsed[g]&p.Mask(st) == 0 {
			return st
		}
	}
	return -1
}

// migChoice returns the best GPU and start for MIG request r on s: the
// eligible GPU with the fewest free memory slices that still takes the
// slice (best fit, so emptier GPUs stay whole for large profiles), or -1.
func migChoice(s *nodeState, r *request) (g, start int) {
	p := &MIGProfiles[r.mig-1]
	g, start = -1, -1
	bestFree := MIGMemorySlices + 1
	for i := range s.gpuFree {
		if !s.usable[i] || !accessible(r.mask, s.gpuModel[i]) {
			continue
		}
		st := migStart(s, i, p)
		if st < 0 {
			continue
		}
		if free := MIGMemorySlices - bits.OnesCount8(s.migUsed[i]); free < bestFree {
			g, start, bestFree = i, st, free
		}
	}
	return g, start
}

// migScore rates s for MIG request r for every policy: fewer free memory
// slices left on the chosen GPU is better.
func migScore(s *nodeState, r *request) float64 {
	g, _ := migChoice(s, r)
	if g < 0 {
		return 0
	}
	return float64(maxNodeScore - (MIGMemorySlices - bits.OnesCount8(s.migUsed[g])))
}
