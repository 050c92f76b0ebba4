package allocator

import (
	"math"
	"math/rand/v2"
	"slices"
)

// memoGPUs is the most GPUs a node may have for its fragmentation to be
// memoized; larger nodes are computed directly.
const memoGPUs = 8

// memoLimit bounds the memo; it is cleared when full.
const memoLimit = 1 << 20

// fragKey identifies node states of equal fragmentation: model, how many
// typical CPU requests the free CPU satisfies, and the sorted free GPUs.
type fragKey struct {
	model classID
	n     uint8
	rank  uint16
	free  [memoGPUs]int16
}

// fragMemo computes [Workload.fragMilli] with a memo over node states.
type fragMemo struct {
	w    Workload
	memo map[fragKey]float64
	buf  []int64
}

func newFragMemo(w Workload) *fragMemo {
	return &fragMemo{w: w, memo: make(map[fragKey]float64)}
}

// of returns the fragmentation of node s with the given free CPU and free
// GPUs (milli). Only uniform nodes ([nodeState.uniform]) of up to
// [memoGPUs] GPUs are memoized.
func (m *fragMemo) of(s *nodeState, cpuFree int64, gpuFree []int64) float64 {
	if len(gpuFree) > memoGPUs || !s.uniform {
		return m.w.fragMilli(s, cpuFree, gpuFree)
	}
	k := fragKey{model: s.model, n: uint8(len(gpuFree)), rank: uint16(m.w.cpuRank(cpuFree))}
	for i, f := range gpuFree {
		k.free[i] = int16(f)
	}
	slices.Sort(k.free[:len(gpuFree)])
	if v, ok := m.memo[k]; ok {
		return v
	}
	v := m.w.fragMilli(s, cpuFree, gpuFree)
	if len(m.memo) >= memoLimit {
		clear(m.memo)
	}
	m.memo[k] = v
	return v
}

// node returns the current fragmentation of s.
func (m *fragMemo) node(s *nodeState) float64 { return m.of(s, s.cpuFree, s.gpuFree) }

// after returns the fragmentation of s after r takes the GPUs in gpus.
func (m *fragMemo) after(s *nodeState, r *request, gpus []int) float64 {
	m.buf = append(m.buf[:0], s.gpuFree...)
	for _, g := range gpus {
		m.buf[g] -= r.milli
	}
	return m.of(s, s.cpuFree-r.cpu, m.buf)
}

// NodeFragMilli is the FGD fragmentation of node i against w (milli-GPU).
func (c *Cluster) NodeFragMilli(w *Workload, i int) float64 {
	s := &c.state[i]
	return w.fragMilli(s, s.cpuFree, s.gpuFree)
}

// fgdPolicy is Fragmentation Gradient Descent: place where the expected
// fragmentation grows least, scored as the simulator does,
// int(sigmoid(-Δfrag/1000) × 100), which quantizes small differences into
// ties.
type fgdPolicy struct {
	frag *fragMemo
	gpus []int
}

func (*fgdPolicy) Name() string { return PolicyFGD }
func (*fgdPolicy) stable() bool { return true }

func sigmoidScore(deltaMilli float64) int64 {
	return int64(1 / (1 + math.Exp(-deltaMilli/1000)) * maxNodeScore)
}

func (p *fgdPolicy) score(s *nodeState, r *request) float64 {
	sc, _ := p.choose(s, r)
	return sc
}

// choose returns the score and, for a fraction, the GPU FGD picks: the first
// GPU of highest (quantized) score.
func (p *fgdPolicy) choose(s *nodeState, r *request) (float64, int) {
	before := p.frag.node(s)
	if r.num == 0 || r.milli >= MilliPerGPU {
		p.gpus = exclusiveGPUs(s, r, p.gpus[:0])
		return float64(sigmoidScore(before - p.frag.after(s, r, p.gpus))), -1
	}
	best, bestG := int64(0), -1
	var seen [memoGPUs + 1]int64
	nSeen := 0
	for g, f := range s.gpuFree {
		if f < r.milli || !s.usable[g] || !accessible(r.mask, s.gpuModel[g]) {
			continue
		}
		// GPUs with equal free milli score alike; only the first counts.
		if nSeen < len(seen) && slices.Contains(seen[:nSeen], f) {
			continue
		}
		if nSeen < len(seen) {
			seen[nSeen] = f
			nSeen++
		}
		sc := sigmoidScore(before - p.frag.after(s, r, []int{g}))
		if bestG < 0 || sc > best {
			best, bestG = sc, g
		}
	}
	return float64(best), bestG
}

func (p *fgdPolicy) selectGPUs(s *nodeState, r *request, _ *rand.Rand, dst []int) []int {
	return chosenGPUs(p, s, r, dst)
}
