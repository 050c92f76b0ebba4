package allocator

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Allocator decides placements on a [Cluster] with one [Policy]. It is not
// safe for concurrent use.
type Allocator struct {
	c     *Cluster
	p     Policy
	rng   *rand.Rand
	types map[reqKey]int
	cache [][]cached // [type][node]
	// fails counts the nodes that failed the filter, by [reasons] index.
	fails [len(reasons)]int
	// rank, if set, breaks ties toward the lowest rank instead of at random.
	rank []int
	// narrow is [Allocator.variant]'s mask buffer.
	narrow classSet
	// candidates, if set, are the nodes Decide may choose
	// ([Allocator.SetCandidates]).
	candidates []bool
}

// SetTieOrder makes ties go to the node of lowest rank[i] instead of a
// uniformly random one. The FGD artifact's scheduler (a kube-scheduler fork)
// behaves this way over nodes whose names carry a per-seed random prefix,
// which is what its published baselines reflect; pass a random permutation
// to reproduce it. nil restores random tie-breaking.
func (a *Allocator) SetTieOrder(rank []int) error {
	if rank != nil && len(rank) != a.c.Len() {
		return fmt.Errorf("tie order: %d ranks for %d nodes: %w", len(rank), a.c.Len(), ErrInvalid)
	}
	a.rank = rank
	return nil
}

// A cached verdict is computed with the request's memory left out, so
// that requests differing only in memory share it; the scan checks memory
// against [Cluster] memFree, in the filter's order.
type cached struct {
	version uint32
	// fail is 0 when the node fits (score is its score), else 1 + the
	// [reasons] index of why it does not.
	fail uint8
	// beforeMem: fail is decided before memory is checked (CPU, or a
	// memory-sized fraction on a node with no known GPU memory).
	beforeMem bool
	score     float64
}

// New returns an allocator over c. rng breaks ties and drives random
// policies; the same seed gives the same decisions.
func New(c *Cluster, p Policy, rng *rand.Rand) *Allocator {
	return &Allocator{c: c, p: p, rng: rng, types: map[reqKey]int{}}
}

// SetRand makes rng break ties and drive random policies from now on, so
// that one allocator, and the verdicts it caches per node version, can
// serve calls that each bring their own generator.
func (a *Allocator) SetRand(rng *rand.Rand) { a.rng = rng }

// SetCandidates limits the nodes [Allocator.Decide] considers to those i
// with candidates[i] (nil: every node), as a cluster of those nodes alone
// would, except that the policy's workload was measured on the whole
// cluster. Nodes left out are neither scored nor counted in a
// [*NoFitError]; their cached verdicts stay. One allocator can so serve
// pods whose node filters differ.
func (a *Allocator) SetCandidates(candidates []bool) error {
	if candidates != nil && len(candidates) != a.c.Len() {
		return fmt.Errorf("candidates: %d for %d nodes: %w", len(candidates), a.c.Len(), ErrInvalid)
	}
	a.candidates = candidates
	return nil
}

// Cluster returns the cluster the allocator places on.
func (a *Allocator) Cluster() *Cluster { return a.c }

// Policy returns the allocator's policy.
func (a *Allocator) Policy() Policy { return a.p }

// Decide chooses a node and GPUs for q without changing the cluster. It
// returns a [*NoFitError] if no node passes the filter, and an error
// matching [ErrInvalid] for a malformed request.
func (a *Allocator) Decide(q Request) (Decision, error) {
	r, err := a.c.normalize(q)
	if err != nil {
		return Decision{}, fmt.Errorf("decide: %w", err)
	}
	var cache []cached
	if a.p.stable() {
		t, ok := a.types[r.key]
		if !ok {
			t = len(a.cache)
			a.types[r.key] = t
			a.cache = append(a.cache, make([]cached, len(a.c.state)))
		}
		cache = a.cache[t]
	}
	_, random := a.p.(randomPolicy)
	best, n, pick := math.Inf(-1), 0, -1
	clear(a.fails[:])
	vers, memFree, cand := a.c.versions, a.c.memFree, a.candidates
	for i := range a.c.state {
		if cand != nil && !cand[i] {
			continue
		}
		e := cachedAt(cache, i)
		if e == nil || e.version != vers[i] {
			// Changed since this request type last saw it, or no cache.
			v := a.evaluate(&a.c.state[i], &r)
			if e == nil {
				e = &v
			} else {
				*e = v
				e.version = vers[i]
			}
		}
		switch {
		case e.fail != 0 && e.beforeMem:
			a.fails[e.fail-1]++
			continue
		case memFree[i] < r.mem:
			a.fails[reasonIndex(ReasonMemory)]++
			continue
		case e.fail != 0:
			a.fails[e.fail-1]++
			continue
		}
		sc := e.score
		switch {
		case sc > best:
			best, n, pick = sc, 1, i
		case sc == best && a.rank != nil && !random:
			if a.rank[i] < a.rank[pick] {
				pick = i
			}
		case sc == best:
			n++
			if a.rng.IntN(n) == 0 {
				pick = i
			}
		}
	}
	if pick < 0 {
		return Decision{}, a.noFit()
	}
	s := &a.c.state[pick]
	if r.gmem > 0 && !s.memUniform {
		_, k, _ := a.bestVariant(s, &r)
		r = a.variant(s, &r, k)
	} else {
		r, _ = atNode(s, &r)
	}
	d := Decision{Node: pick, MilliPerGPU: r.milli}
	switch {
	case r.mig != 0:
		g, start := migChoice(s, &r)
		d.GPUs, d.MIGStart = []int{g}, start
	case r.num > 0:
		d.GPUs = a.p.selectGPUs(s, &r, a.rng, make([]int, 0, r.num))
	}
	return d, nil
}

// cachedAt is the cache entry of node i, nil without a cache.
func cachedAt(cache []cached, i int) *cached {
	if cache == nil {
		return nil
	}
	return &cache[i]
}

// evaluate filters and scores node s for r with r's memory left out (see
// [cached]). It depends on s and r alone, so stable policies cache it per
// node version.
func (a *Allocator) evaluate(s *nodeState, r *request) cached {
	r0 := *r
	r0.mem = 0
	verdict := func(score float64, why string, beforeMem bool) cached {
		if why == "" {
			return cached{score: score}
		}
		return cached{fail: uint8(reasonIndex(why)) + 1, beforeMem: beforeMem}
	}
	if r0.gmem > 0 && !s.memUniform {
		// GPUs of different memory: the best of sizing r for each.
		sc, _, why := a.bestVariant(s, &r0)
		return verdict(sc, why, why == ReasonCPU || len(s.memKinds) == 0)
	}
	rn := &r0
	if r0.gmem > 0 {
		adj, _ := atNode(s, &r0)
		rn = &adj
	}
	if why := fit(s, rn); why != "" {
		return verdict(0, why, why == ReasonCPU)
	}
	if r0.mig != 0 {
		return verdict(migScore(s, rn), "", false)
	}
	return verdict(a.p.score(s, rn), "", false)
}

// variant is memory-sized fraction r on node s restricted to the node's
// GPUs of its k-th memory (s.memKinds[k]) and sized against that memory.
// The mask lives in a buffer of a, valid until the next call.
func (a *Allocator) variant(s *nodeState, r *request, k int) request {
	mem := s.memKinds[k]
	out := atMem(r, mem)
	set := a.c.memSets[mem]
	a.narrow = append(a.narrow[:0], set...)
	if r.mask != nil {
		for w := range a.narrow {
			if w < len(r.mask) {
				a.narrow[w] &= r.mask[w]
			} else {
				a.narrow[w] = 0
			}
		}
	}
	out.mask = a.narrow
	return out
}

// bestVariant scores memory-sized fraction r on node s whose GPUs differ
// in memory: the best score over [Allocator.variant]s that fit, and which;
// or the reason none fits.
func (a *Allocator) bestVariant(s *nodeState, r *request) (float64, int, string) {
	if len(s.memKinds) == 0 {
		return 0, -1, ReasonGPUMemory
	}
	best, bestK, why := math.Inf(-1), -1, ""
	for k := range s.memKinds {
		v := a.variant(s, r, k)
		if w := fit(s, &v); w != "" {
			if why == "" || w == ReasonGPU {
				why = w
			}
			continue
		}
		if sc := a.p.score(s, &v); sc > best {
			best, bestK = sc, k
		}
	}
	if bestK < 0 {
		return 0, -1, why
	}
	return best, bestK, ""
}

// Place decides and binds q.
func (a *Allocator) Place(q Request) (Decision, error) {
	d, err := a.Decide(q)
	if err != nil {
		return d, err
	}
	if err := a.c.Bind(d, q); err != nil {
		return Decision{}, err
	}
	return d, nil
}

// reasons are the filter's failure reasons, indexed by [Allocator.fail].
var reasons = [...]string{ReasonCPU, ReasonMemory, ReasonModel, ReasonGPU, ReasonNoGPU, ReasonMIG, ReasonGPUMemory}

// reasonIndex is why's index in [reasons]: a switch on the constants,
// not a map lookup, as most nodes may fail.
func reasonIndex(why string) int {
	switch why {
	case ReasonCPU:
		return 0
	case ReasonMemory:
		return 1
	case ReasonModel:
		return 2
	case ReasonGPU:
		return 3
	case ReasonNoGPU:
		return 4
	case ReasonMIG:
		return 5
	default:
		return 6
	}
}

func (a *Allocator) noFit() error {
	e := &NoFitError{Reason: "no nodes", Counts: map[string]int{}}
	most := 0
	for i, v := range a.fails {
		if v == 0 {
			continue
		}
		k := reasons[i]
		e.Counts[k] = v
		if v > most || (v == most && k < e.Reason) {
			e.Reason, most = k, v
		}
	}
	return e
}
