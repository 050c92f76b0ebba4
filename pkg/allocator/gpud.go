package allocator

import "math/rand/v2"

// gpudPolicy is gpud's default. It descends FGD's fragmentation measure
// (same typical-pod workload, same sigmoid-quantized Δfrag score) and then
// breaks the ties that quantization creates toward the node and GPU that
// keep the least free GPU after placement (best fit, so whole free GPUs and
// nodes stay whole for multi-GPU pods) before any random or ordered tie-break.
//
// GPU-model constraints enter through the typical-pod distribution: a GPU
// that constrained typical pods need counts as fragment when taken by a pod
// that leaves it unusable to them, so scarce models are kept for the pods
// that need them.
type gpudPolicy struct {
	frag *fragMemo
	gpus []int
	one  [1]int
}

func newGpudPolicy(w Workload) *gpudPolicy { return &gpudPolicy{frag: newFragMemo(w)} }

// packWeight turns free milli-GPU left on the node into a tie-breaker below
// one step of the quantized fragmentation score.
const packWeight = 1e-4

func (*gpudPolicy) Name() string { return PolicyGpud }
func (*gpudPolicy) stable() bool { return true }

func (p *gpudPolicy) score(s *nodeState, r *request) float64 {
	sc, _ := p.choose(s, r)
	return sc
}

func (p *gpudPolicy) choose(s *nodeState, r *request) (float64, int) {
	before := p.frag.node(s)
	left := float64(s.totalFree - r.total)
	if r.num == 0 || r.milli >= MilliPerGPU {
		p.gpus = exclusiveGPUs(s, r, p.gpus[:0])
		return float64(sigmoidScore(before-p.frag.after(s, r, p.gpus))) - packWeight*left, -1
	}
	best, bestG := 0.0, -1
	for g, f := range s.gpuFree {
		if f < r.milli || !s.usable[g] || !accessible(r.mask, s.gpuModel[g]) {
			continue
		}
		if bestG >= 0 && f == s.gpuFree[bestG] {
			continue
		}
		p.one[0] = g
		// Within the node prefer the tighter GPU on equal score.
		sc := float64(sigmoidScore(before-p.frag.after(s, r, p.one[:]))) - packWeight*left - packWeight*1e-3*float64(f)
		if bestG < 0 || sc > best {
			best, bestG = sc, g
		}
	}
	return best, bestG
}

func (p *gpudPolicy) selectGPUs(s *nodeState, r *request, _ *rand.Rand, dst []int) []int {
	if r.num == 0 || r.milli >= MilliPerGPU {
		return exclusiveGPUs(s, r, dst)
	}
	if _, g := p.choose(s, r); g >= 0 {
		dst = append(dst, g)
	}
	return dst
}
