package mig

import (
	"fmt"
	"math/bits"
	"sort"
	"strings"
)

// placed is a new instance the plan creates.
type placed struct {
	profile string
	at      Placement
}

// maxCandidates bounds the keep search (2^n subsets); a GPU holds at most 7
// or 8 instances.
const maxCandidates = 16

// choose picks which current instances to keep and where to put the other
// desired slices. Among the subsets of current instances whose profiles are
// wanted, it takes the one that keeps the most busy instances, then the
// most instances, for which the rest fit.
func choose(g GPUState, current []Instance, wants []Want, busy Busy, opts Options) ([]Instance, []placed, error) {
	cat := g.Catalog
	if err := capacity(g, wants); err != nil {
		return nil, nil, err
	}
	var cands []Instance
	for _, in := range current {
		if _, err := cat.Lookup(in.Profile); err == nil && (in.Complete() || len(in.CIs) == 0) {
			cands = append(cands, in)
		}
	}
	if len(cands) > maxCandidates {
		cands = cands[:maxCandidates]
	}
	isBusy := make([]bool, len(cands))
	for i, in := range cands {
		isBusy[i] = len(busy.holders(in.UUIDs()...)) > 0
	}
	bestMask, bestScore := -1, -1
	var bestPlace []placed
	for mask := 0; mask < 1<<len(cands); mask++ {
		score := 0
		for i := range cands {
			if mask&(1<<i) != 0 {
				score++
				if isBusy[i] {
					score += 100
				}
			}
		}
		if score <= bestScore {
			continue
		}
		rest, ok := unmatched(cands, mask, wants)
		if !ok {
			continue
		}
		pl, ok := fit(cat, cands, mask, rest)
		if !ok {
			continue
		}
		bestMask, bestScore, bestPlace = mask, score, pl
	}
	if bestMask < 0 {
		return nil, nil, &PlacementError{GPU: g.Index, Wanted: wantNames(wants)}
	}
	var keep []Instance
	keptCount := map[string]int{}
	for i, in := range cands {
		if bestMask&(1<<i) != 0 {
			keep = append(keep, in)
			keptCount[in.Profile]++
		}
	}
	if !opts.Force {
		// A busy slice the layout still wants but that could not stay where
		// it is: the rest does not fit around it.
		wanted := map[string]int{}
		for _, w := range wants {
			wanted[w.Profile]++
		}
		var around []string
		for i, in := range cands {
			if isBusy[i] && bestMask&(1<<i) == 0 && keptCount[in.Profile] < wanted[in.Profile] {
				around = append(around, fmt.Sprintf("%s (busy: %s)", in, strings.Join(busy.holders(in.UUIDs()...), ", ")))
			}
		}
		if len(around) > 0 {
			return nil, nil, &PlacementError{GPU: g.Index, Wanted: wantNames(wants), Around: around}
		}
	}
	return keep, bestPlace, nil
}

// capacity checks the counts and compute slices, which no placement fixes.
func capacity(g GPUState, wants []Want) error {
	slices := 0
	count := map[string]int{}
	for _, w := range wants {
		p, err := g.Catalog.Lookup(w.Profile)
		if err != nil {
			return fmt.Errorf("gpu %d: %w", g.Index, err)
		}
		slices += p.Slices
		count[p.Name]++
		if count[p.Name] > p.MaxCount {
			return &PlacementError{GPU: g.Index, Wanted: wantNames(wants), Reason: fmt.Sprintf("at most %d x %s per GPU", p.MaxCount, p.Name)}
		}
	}
	if slices > g.Catalog.ComputeSlices {
		return &PlacementError{GPU: g.Index, Wanted: wantNames(wants), Reason: fmt.Sprintf("%d compute slices asked, the GPU has %d", slices, g.Catalog.ComputeSlices)}
	}
	return nil
}

// unmatched returns the wants the kept instances (mask) do not cover, or
// false when a kept instance matches no want.
func unmatched(cands []Instance, mask int, wants []Want) ([]Want, bool) {
	used := make([]bool, len(wants))
	for i, in := range cands {
		if mask&(1<<i) == 0 {
			continue
		}
		j := matchWant(in, wants, used)
		if j < 0 {
			return nil, false
		}
		used[j] = true
	}
	rest := make([]Want, 0, len(wants)-bits.OnesCount(uint(mask)))
	for j, w := range wants {
		if !used[j] {
			rest = append(rest, w)
		}
	}
	return rest, true
}

// matchWant finds an unused want for a kept instance: a pinned one at its
// start first, else an unpinned one of its profile.
func matchWant(in Instance, wants []Want, used []bool) int {
	for j, w := range wants {
		if !used[j] && w.Profile == in.Profile && w.Start == in.Placement.Start {
			return j
		}
	}
	for j, w := range wants {
		if !used[j] && w.Profile == in.Profile && w.Start < 0 {
			return j
		}
	}
	return -1
}

// fit places rest around the kept instances by backtracking over each
// profile's allowed placements.
func fit(cat Catalog, cands []Instance, mask int, rest []Want) ([]placed, bool) {
	occ := make([]bool, max(cat.MemorySlices, 8))
	for i, in := range cands {
		if mask&(1<<i) != 0 {
			for s := in.Placement.Start; s < in.Placement.Start+in.Placement.Size && s < len(occ); s++ {
				if occ[s] {
					return nil, false
				}
				occ[s] = true
			}
		}
	}
	type item struct {
		w Want
		p Profile
	}
	items := make([]item, len(rest))
	for i, w := range rest {
		p, _ := cat.Lookup(w.Profile)
		items[i] = item{w, p}
	}
	sort.SliceStable(items, func(a, b int) bool {
		x, y := items[a], items[b]
		if (x.w.Start >= 0) != (y.w.Start >= 0) {
			return x.w.Start >= 0
		}
		if x.p.Slices != y.p.Slices {
			return x.p.Slices > y.p.Slices
		}
		return x.p.Name < y.p.Name
	})
	out := make([]placed, len(items))
	var place func(k, minStart int) bool
	place = func(k, minStart int) bool {
		if k == len(items) {
			return true
		}
		it := items[k]
		for _, pl := range it.p.Placements {
			if (it.w.Start >= 0 && pl.Start != it.w.Start) || pl.Start < minStart || !free(occ, pl) {
				continue
			}
			mark(occ, pl, true)
			out[k] = placed{profile: it.p.Name, at: pl}
			next := 0
			if k+1 < len(items) && items[k+1].w == it.w && it.w.Start < 0 {
				next = pl.Start + 1 // identical wants: no permutations
			}
			if place(k+1, next) {
				return true
			}
			mark(occ, pl, false)
		}
		return false
	}
	if !place(0, 0) {
		return nil, false
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].at.Start < out[b].at.Start })
	return out, true
}

func free(occ []bool, pl Placement) bool {
	for s := pl.Start; s < pl.Start+pl.Size; s++ {
		if s >= len(occ) || occ[s] {
			return false
		}
	}
	return true
}

func mark(occ []bool, pl Placement, v bool) {
	for s := pl.Start; s < pl.Start+pl.Size && s < len(occ); s++ {
		occ[s] = v
	}
}

func wantNames(ws []Want) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.String()
	}
	return out
}
