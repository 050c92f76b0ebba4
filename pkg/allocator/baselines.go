package allocator

import (
	"math/rand/v2"
	"sort"
)

// Normalizers of the FGD simulator (MaxSpecCpu, MaxSpecGpu).
const (
	maxSpecCPUMilli = 128000
	maxSpecGPUMilli = 8000
	maxNodeScore    = 100
)

// randomPolicy picks a feasible node uniformly and a fitting GPU uniformly.
type randomPolicy struct{}

func (randomPolicy) Name() string                       { return PolicyRandom }
func (randomPolicy) score(*nodeState, *request) float64 { return 0 }
func (randomPolicy) stable() bool                       { return true }
func (randomPolicy) selectGPUs(s *nodeState, r *request, rng *rand.Rand, dst []int) []int {
	if r.num == 0 || r.milli >= MilliPerGPU {
		return exclusiveGPUs(s, r, dst)
	}
	pick, n := -1, 0
	for g, f := range s.gpuFree {
		if f >= r.milli && s.usable[g] && accessible(r.mask, s.gpuModel[g]) {
			n++
			if rng.IntN(n) == 0 {
				pick = g
			}
		}
	}
	if pick >= 0 {
		dst = append(dst, pick)
	}
	return dst
}

// bestGPUsPolicy gives the deterministic baselines what they share: stable
// scores and the simulator's "best" GPU selection ([bestGPUs]).
type bestGPUsPolicy struct{}

func (bestGPUsPolicy) stable() bool { return true }
func (bestGPUsPolicy) selectGPUs(s *nodeState, r *request, _ *rand.Rand, dst []int) []int {
	return bestGPUs(s, r, dst)
}

// dotProdPolicy is Tetris' alignment score with the simulator's "merge" GPU
// dimension and "max" normalization: prefer the node whose free (CPU, GPU)
// vector is least aligned with the request.
type dotProdPolicy struct{ bestGPUsPolicy }

func (dotProdPolicy) Name() string { return PolicyDotProd }
func (dotProdPolicy) score(s *nodeState, r *request) float64 {
	dot := float64(s.cpuFree)/maxSpecCPUMilli*float64(r.cpu)/maxSpecCPUMilli +
		float64(s.totalFree)/maxSpecGPUMilli*float64(r.total)/maxSpecGPUMilli
	return float64(int64(maxNodeScore * (1 - dot/2)))
}

// bestFitPolicy prefers the node with the least free CPU and GPU after
// placement, each weighted 0.5 and normalized by the largest node.
type bestFitPolicy struct{ bestGPUsPolicy }

func (bestFitPolicy) Name() string { return PolicyBestFit }
func (bestFitPolicy) score(s *nodeState, r *request) float64 {
	left := float64(s.cpuFree-r.cpu)/maxSpecCPUMilli*0.5 + float64(s.totalFree-r.total)/maxSpecGPUMilli*0.5
	return float64(int64((1 - left) * maxNodeScore))
}

// gpuClusteringPolicy groups pods of the same GPU shape (share, 1-GPU,
// 2-GPU, ...) on the same nodes, then prefers fuller nodes.
type gpuClusteringPolicy struct{ bestGPUsPolicy }

func (gpuClusteringPolicy) Name() string { return PolicyGpuClustering }
func (gpuClusteringPolicy) score(s *nodeState, r *request) float64 {
	if r.num == 0 {
		return 0
	}
	fill := int64(maxNodeScore/4) * (maxSpecGPUMilli - s.totalFree) / maxSpecGPUMilli
	switch {
	case s.affinity[r.tag] > 0 && s.nTags == 1:
		return float64(fill + maxNodeScore*3/4)
	case s.affinity[r.tag] > 0:
		return float64(fill + maxNodeScore*2/4)
	case s.nTags == 0:
		return float64(fill + maxNodeScore/4)
	}
	return float64(fill)
}

// gpuPackingPolicy prefers, in order: GPUs already shared, free GPUs on a
// used node, free GPUs on an idle node.
type gpuPackingPolicy struct{ bestGPUsPolicy }

func (gpuPackingPolicy) Name() string { return PolicyGpuPacking }
func (gpuPackingPolicy) score(s *nodeState, r *request) float64 {
	if r.total <= 0 {
		return 0
	}
	fullyFree := 0
	for g, f := range s.gpuFree {
		if f == MilliPerGPU && s.usable[g] {
			fullyFree++
		}
	}
	if fullyFree == len(s.gpuFree) {
		return float64(max(int64(maxNodeScore/3-fullyFree), int64(fullyFree)))
	}
	idx := make([]int, len(s.gpuFree))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return s.gpuFree[idx[a]] < s.gpuFree[idx[b]] })
	need, useFree := r.num, 0
	var ratio int64
	for _, g := range idx {
		if need == 0 {
			break
		}
		if f := s.gpuFree[g]; r.milli <= f && s.usable[g] && accessible(r.mask, s.gpuModel[g]) {
			need--
			if f == MilliPerGPU {
				useFree++
			}
			ratio += f * 100 / MilliPerGPU
		}
	}
	if need != 0 {
		return 0
	}
	if useFree > 0 {
		return float64(max(int64(maxNodeScore/2-useFree), maxNodeScore/3))
	}
	return float64(max(maxNodeScore-ratio/10, maxNodeScore/2))
}
