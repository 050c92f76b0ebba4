package allocator

import (
	"fmt"
	"math/bits"
	"strings"
)

// MIG geometry: a MIG GPU has 7 compute slices and 8 memory slices; a
// profile may start only at the memory-slice offsets its table row lists
// (the A100/H100 placement rules).
const (
	migComputeSlices = 7
	migMemorySlices  = 8
	migMilliPerSlice = MilliPerGPU / migMemorySlices
)

// migProfile is one GPU-instance shape.
type migProfile struct {
	name    string
	compute int
	memory  int
	starts  []int
}

// migProfiles are named by their 80 GB sizes; migAliases maps the 40 GB
// names.
var migProfiles = []migProfile{
	{name: "1g.10gb", compute: 1, memory: 1, starts: []int{0, 1, 2, 3, 4, 5, 6}},
	{name: "1g.20gb", compute: 1, memory: 2, starts: []int{0, 2, 4, 6}},
	{name: "2g.20gb", compute: 2, memory: 2, starts: []int{0, 2, 4}},
	{name: "3g.40gb", compute: 3, memory: 4, starts: []int{0, 4}},
	{name: "4g.40gb", compute: 4, memory: 4, starts: []int{0}},
	{name: "7g.80gb", compute: 7, memory: 8, starts: []int{0}},
}

var migAliases = map[string]string{
	"1g.5gb": "1g.10gb", "2g.10gb": "2g.20gb", "3g.20gb": "3g.40gb", "4g.20gb": "4g.40gb", "7g.40gb": "7g.80gb",
}

// lookupMIG returns the index+1 of the named profile.
func lookupMIG(name string) (int8, error) {
	name = strings.TrimPrefix(strings.TrimSpace(name), "nvidia.com/mig-")
	if a, ok := migAliases[name]; ok {
		name = a
	}
	for i, p := range migProfiles {
		if p.name == name {
			return int8(i + 1), nil
		}
	}
	return 0, fmt.Errorf("MIG profile %q (want 1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb or 7g.80gb): %w", name, ErrInvalid)
}

// migBits is the memory-slice mask of p at start.
func migBits(p *migProfile, start int) uint8 {
	return uint8((1<<p.memory - 1) << start)
}

// migStart returns the lowest start at which profile p fits on GPU g of s,
// or -1.
func migStart(s *nodeState, g int, p *migProfile) int {
	if int(s.migCompute[g])+p.compute > migComputeSlices {
		return -1
	}
	for _, st := range p.starts {
		if s.migUsed[g]&migBits(p, st) == 0 {
			return st
		}
	}
	return -1
}

// migChoice returns the best GPU and start for MIG request r on s: the
// eligible GPU with the fewest free memory slices that still takes the
// slice (best fit, so emptier GPUs stay whole for large profiles), or -1.
func migChoice(s *nodeState, r *request) (g, start int) {
	p := &migProfiles[r.mig-1]
	g, start = -1, -1
	bestFree := migMemorySlices + 1
	for i := range s.gpuFree {
		if !s.usable[i] || !accessible(r.mask, s.gpuModel[i]) {
			continue
		}
		st := migStart(s, i, p)
		if st < 0 {
			continue
		}
		if free := migMemorySlices - bits.OnesCount8(s.migUsed[i]); free < bestFree {
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
	return float64(maxNodeScore - (migMemorySlices - bits.OnesCount8(s.migUsed[g])))
}
