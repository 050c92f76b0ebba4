package allocator

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// Policy scores nodes for a request and chooses GPUs on the winner. The
// methods are unexported: the set of policies is closed and every policy is
// reproduced or tested here. A Policy holds memo tables and is not safe for
// concurrent use; build one per goroutine.
type Policy interface {
	// Name is the policy's name as `--policy` spells it, e.g. "FGD".
	Name() string
	// score rates a node that passed the filter; higher is better. Equal
	// scores tie and are broken at random.
	score(s *nodeState, r *request) float64
	// selectGPUs chooses r.num GPUs on the chosen node, appending to dst.
	selectGPUs(s *nodeState, r *request, rng *rand.Rand, dst []int) []int
	// stable reports that score depends only on (node state, request key),
	// so the allocator may cache it per node version.
	stable() bool
}

// Policy names.
const (
	PolicyRandom        = "Random"
	PolicyDotProd       = "DotProd"
	PolicyGpuClustering = "GpuClustering"
	PolicyGpuPacking    = "GpuPacking"
	PolicyBestFit       = "BestFit"
	PolicyFGD           = "FGD"
	PolicyGpud          = "gpud"
)

// PolicyNames lists every policy in the published table's order; gpud last.
var PolicyNames = []string{PolicyRandom, PolicyDotProd, PolicyGpuClustering, PolicyGpuPacking, PolicyBestFit, PolicyFGD, PolicyGpud}

// PolicyLabel is the name the FGD artifact's tables use, e.g. "06-FGD", and
// "07-gpud" for gpud.
func PolicyLabel(name string) string {
	for i, n := range PolicyNames {
		if strings.EqualFold(n, name) {
			return fmt.Sprintf("%02d-%s", i+1, n)
		}
	}
	return name
}

// NewPolicy builds a policy by name (case-insensitive; "06-FGD" works too).
// FGD and gpud measure fragmentation against w; the others ignore it.
func NewPolicy(name string, w Workload) (Policy, error) {
	if i := strings.IndexByte(name, '-'); i == 2 {
		name = name[3:]
	}
	switch strings.ToLower(name) {
	case "random":
		return randomPolicy{}, nil
	case "dotprod":
		return dotProdPolicy{}, nil
	case "gpuclustering":
		return gpuClusteringPolicy{}, nil
	case "gpupacking":
		return gpuPackingPolicy{}, nil
	case "bestfit":
		return bestFitPolicy{}, nil
	case "fgd":
		return &fgdPolicy{frag: newFragMemo(w)}, nil
	case "gpud", "":
		return newGpudPolicy(w), nil
	}
	return nil, fmt.Errorf("policy %q (want one of %s): %w", name, strings.Join(PolicyNames, ", "), ErrInvalid)
}

// bestGPUs is the simulator's "best" GPU selection: for a fraction, the
// fitting GPU with the least free milli (first on ties); for whole GPUs, the
// first fully free ones.
func bestGPUs(s *nodeState, r *request, dst []int) []int {
	if r.num == 0 {
		return dst
	}
	if r.milli < MilliPerGPU {
		best := -1
		for g, f := range s.gpuFree {
			if f >= r.milli && s.usable[g] && accessible(r.mask, s.gpuModel[g]) && (best < 0 || f < s.gpuFree[best]) {
				best = g
			}
		}
		if best >= 0 {
			dst = append(dst, best)
		}
		return dst
	}
	return exclusiveGPUs(s, r, dst)
}
