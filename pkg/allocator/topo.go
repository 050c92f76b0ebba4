package allocator

// maxDomains bounds the NVLink domains tracked per node; GPUs beyond it
// share the last one.
const maxDomains = 32

// exclusiveGPUs takes r.num GPUs with at least r.milli free. Without NVLink
// labels on the node it takes the first ones (the FGD simulator's choice).
// With labels, a multi-GPU request goes to the NVLink domain with the fewest
// eligible GPUs that still holds all of it (best fit, keeping bigger domains
// whole), else spans the fewest domains, largest first.
func exclusiveGPUs(s *nodeState, r *request, dst []int) []int {
	if s.topo && r.num > 1 {
		return domainGPUs(s, r, dst)
	}
	need := r.num
	for g, f := range s.gpuFree {
		if need == 0 {
			break
		}
		if f >= r.milli && s.usable[g] && accessible(r.mask, s.gpuModel[g]) {
			dst = append(dst, g)
			need--
		}
	}
	return dst
}

// gpuChooser is a policy that scores a fraction's GPUs one by one (FGD,
// gpud): choose returns the node's score and the GPU picked, or -1.
type gpuChooser interface {
	choose(s *nodeState, r *request) (float64, int)
}

// chosenGPUs is the GPU selection of a [gpuChooser]: whole GPUs as
// [exclusiveGPUs] takes them, a fraction on the GPU it chooses (none if -1).
func chosenGPUs(c gpuChooser, s *nodeState, r *request, dst []int) []int {
	if r.num == 0 || r.milli >= MilliPerGPU {
		return exclusiveGPUs(s, r, dst)
	}
	if _, g := c.choose(s, r); g >= 0 {
		dst = append(dst, g)
	}
	return dst
}

func domainGPUs(s *nodeState, r *request, dst []int) []int {
	var count [maxDomains]int
	for g, f := range s.gpuFree {
		if f >= r.milli && s.usable[g] && accessible(r.mask, s.gpuModel[g]) {
			count[s.domain[g]]++
		}
	}
	best := -1
	for d := range s.nDomains {
		if count[d] >= r.num && (best < 0 || count[d] < count[best]) {
			best = d
		}
	}
	if best >= 0 {
		return takeFromDomain(s, r, best, r.num, dst)
	}
	// Span: largest domains first, until enough.
	need := r.num
	for need > 0 {
		big := -1
		for d := range s.nDomains {
			if count[d] > 0 && (big < 0 || count[d] > count[big]) {
				big = d
			}
		}
		if big < 0 {
			break
		}
		n := min(need, count[big])
		dst = takeFromDomain(s, r, big, n, dst)
		need -= n
		count[big] = 0
	}
	return dst
}

func takeFromDomain(s *nodeState, r *request, d, n int, dst []int) []int {
	for g, f := range s.gpuFree {
		if n == 0 {
			break
		}
		if int(s.domain[g]) == d && f >= r.milli && s.usable[g] && accessible(r.mask, s.gpuModel[g]) {
			dst = append(dst, g)
			n--
		}
	}
	return dst
}

// spanned is the number of distinct NVLink domains among gpus.
func (s *nodeState) spanned(gpus []int) int {
	var seen uint32
	for _, g := range gpus {
		seen |= 1 << s.domain[g]
	}
	n := 0
	for ; seen != 0; seen &= seen - 1 {
		n++
	}
	return n
}

var (
	_ gpuChooser = (*fgdPolicy)(nil)
	_ gpuChooser = (*gpudPolicy)(nil)
)
