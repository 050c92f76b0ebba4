package topology

import (
	"errors"
	"fmt"
	"slices"
	"sort"
)

// ErrInsufficient is returned when fewer devices are free than requested.
var ErrInsufficient = errors.New("topology: not enough free devices")

// ErrUnknownDevice is returned for a device ID the matrix does not have.
var ErrUnknownDevice = errors.New("topology: unknown device")

// exactBudget bounds the number of subsets scored exhaustively; above it
// the chooser grows sets greedily from every seed.
const exactBudget = 20000

// Choose picks n of the free GPUs with the best interconnect (lowest sum of
// pairwise link costs), always including mustInclude. Among equally good
// sets it picks the one that leaves the remaining free GPUs best connected
// to each other, so later requests find good sets too. The result is in
// matrix order and deterministic.
func (m *Matrix) Choose(free []string, n int, mustInclude []string) ([]string, error) {
	freeIdx, err := m.indices(free)
	if err != nil {
		return nil, err
	}
	mustIdx, err := m.indices(mustInclude)
	if err != nil {
		return nil, err
	}
	freeIdx = dedupSorted(freeIdx)
	mustIdx = dedupSorted(mustIdx)
	for _, i := range mustIdx {
		if !slices.Contains(freeIdx, i) {
			return nil, fmt.Errorf("topology: must-include device %s is not free", m.ids[i])
		}
	}
	if n < len(mustIdx) {
		return nil, fmt.Errorf("topology: %d must-include devices exceed the requested %d", len(mustIdx), n)
	}
	if n > len(freeIdx) {
		return nil, fmt.Errorf("%w: %d requested, %d free", ErrInsufficient, n, len(freeIdx))
	}
	if n <= 0 {
		return []string{}, nil
	}
	cands := make([]int, 0, len(freeIdx))
	for _, i := range freeIdx {
		if !slices.Contains(mustIdx, i) {
			cands = append(cands, i)
		}
	}
	k := n - len(mustIdx)
	var best []int
	if binomialAtMost(len(cands), k, exactBudget) {
		best = m.chooseExact(freeIdx, mustIdx, cands, k)
	} else {
		best = m.chooseGreedy(freeIdx, mustIdx, cands, k)
	}
	out := make([]string, len(best))
	for i, idx := range best {
		out[i] = m.ids[idx]
	}
	return out, nil
}

// score orders candidate sets: own cost first, then the cost left among the
// remaining free GPUs (fragmentation), then matrix order.
type score struct{ cost, rest int }

func (a score) less(b score) bool {
	if a.cost != b.cost {
		return a.cost < b.cost
	}
	return a.rest < b.rest
}

func (m *Matrix) score(free, set []int) score {
	rest := make([]int, 0, len(free))
	for _, i := range free {
		if !slices.Contains(set, i) {
			rest = append(rest, i)
		}
	}
	return score{cost: m.setCost(set), rest: m.setCost(rest)}
}

func (m *Matrix) chooseExact(free, must, cands []int, k int) []int {
	var best []int
	var bestScore score
	set := append([]int(nil), must...)
	var rec func(start int)
	rec = func(start int) {
		if len(set) == len(must)+k {
			sorted := sortedCopy(set)
			s := m.score(free, sorted)
			if best == nil || s.less(bestScore) {
				best, bestScore = sorted, s
			}
			return
		}
		need := len(must) + k - len(set)
		for i := start; i <= len(cands)-need; i++ {
			set = append(set, cands[i])
			rec(i + 1)
			set = set[:len(set)-1]
		}
	}
	rec(0)
	return best
}

// chooseGreedy grows a set from every seed (or from the must-include set),
// adding the GPU that adds the least cost, and keeps the best result.
func (m *Matrix) chooseGreedy(free, must, cands []int, k int) []int {
	seeds := [][]int{must}
	if len(must) == 0 {
		seeds = seeds[:0]
		for _, c := range cands {
			seeds = append(seeds, []int{c})
		}
	}
	var best []int
	var bestScore score
	for _, seed := range seeds {
		set := append([]int(nil), seed...)
		added := make([]int, len(m.ids)) // cost of joining each GPU to set
		for _, c := range cands {
			for _, s := range set {
				added[c] += m.cost[c][s]
			}
		}
		for len(set) < len(must)+k {
			pick := -1
			for _, c := range cands {
				if slices.Contains(set, c) {
					continue
				}
				if pick < 0 || added[c] < added[pick] {
					pick = c
				}
			}
			set = append(set, pick)
			for _, c := range cands {
				added[c] += m.cost[c][pick]
			}
		}
		sorted := sortedCopy(set)
		s := m.score(free, sorted)
		if best == nil || s.less(bestScore) {
			best, bestScore = sorted, s
		}
	}
	return best
}

func (m *Matrix) indices(ids []string) ([]int, error) {
	out := make([]int, 0, len(ids))
	for _, id := range ids {
		i, ok := m.index[id]
		if !ok {
			return nil, fmt.Errorf("%w: %s", ErrUnknownDevice, id)
		}
		out = append(out, i)
	}
	return out, nil
}

func sortedCopy(s []int) []int {
	out := append([]int(nil), s...)
	sort.Ints(out)
	return out
}

func dedupSorted(s []int) []int {
	s = sortedCopy(s)
	return slices.Compact(s)
}

// binomialAtMost reports whether C(n, k) <= limit without overflowing.
func binomialAtMost(n, k, limit int) bool {
	if k < 0 || k > n {
		return true
	}
	k = min(k, n-k)
	c := 1
	for i := 1; i <= k; i++ {
		c = c * (n - k + i) / i
		if c > limit {
			return false
		}
	}
	return true
}
