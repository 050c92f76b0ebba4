package allocator

import (
	"cmp"
	"slices"
)

// TypicalShare is the share of all pods (0..1] the typical pod types must
// cover, as the FGD simulator's default podPopularityThreshold of 95%.
const TypicalShare = 0.95

// typicalPod is one request type of the target workload and its frequency.
type typicalPod struct {
	cpu   int64
	milli int64 // per GPU; 0 for CPU-only
	num   int
	mask  classSet
	mig   int8 // MIG profile index + 1; 0 for none
	freq  float64
}

// Workload is the distribution of typical pods that FGD and gpud measure
// fragmentation against. Build it with [Cluster.Workload] from the pod list
// the cluster will serve. The zero value has no typical pods.
type Workload struct {
	pods []typicalPod
	// cpuCuts are the distinct CPU requests of the typical pods, ascending.
	cpuCuts []int64
	// classCap is the cluster's healthy GPU milli per class id, and
	// classMIG which classes are in MIG mode.
	classCap []int64
	classMIG []bool
	// demand is the GPU milli all pods ask, constrained the part of it
	// asked by pods restricted to some GPU kinds, by their class set; it
	// counts every pod, not only the typical ones, as constraints split
	// pods into many rare types.
	demand      float64
	constrained []setDemand
	// own counts, for each typical pod, only the GPUs it can use: GPUs of
	// a model (or MIG mode) it cannot use are neither its fragment nor
	// its free GPU. FGD's measure (own false) counts them all as
	// fragment, which makes taking a GPU of a model that many constrained
	// pods cannot use look like less fragmentation.
	own bool
}

// setDemand is the GPU milli asked by the pods of one class set.
type setDemand struct {
	set   classSet
	mig   bool
	milli float64
}

// owned returns w measuring only the GPUs each typical pod can use.
func (w Workload) owned() Workload {
	w.own = true
	return w
}

// Workload builds the typical-pod distribution of reqs as the FGD simulator
// does: count identical (CPU, per-GPU milli, GPU count, model constraint,
// MIG profile) requests, keep the most frequent types until they cover
// [TypicalShare] of all pods, and renormalize their frequencies to sum to 1.
func (c *Cluster) Workload(reqs []Request) Workload {
	type key struct {
		cpu, milli int64
		num        int
		mask       int32
		mig        int8
	}
	counts := map[key]int{}
	bySet := map[int32]int{}
	var w Workload
	for _, q := range reqs {
		r, err := c.normalize(q)
		if err != nil {
			continue
		}
		if r.total > 0 {
			w.demand += float64(r.total)
			if r.maskID != 0 {
				i, ok := bySet[r.maskID]
				if !ok {
					i = len(w.constrained)
					bySet[r.maskID] = i
					w.constrained = append(w.constrained, setDemand{set: r.mask, mig: r.mig != 0})
				}
				w.constrained[i].milli += float64(r.total)
			}
		}
		if r.gmem > 0 && c.typicalMem > 0 {
			r.milli = min(max(r.milli, (r.gmem*MilliPerGPU+c.typicalMem-1)/c.typicalMem), MilliPerGPU)
		}
		counts[key{r.cpu, r.milli, r.num, r.maskID, r.mig}]++
	}
	type kc struct {
		k key
		n int
	}
	list := make([]kc, 0, len(counts))
	for k, n := range counts {
		list = append(list, kc{k, n})
	}
	// Most frequent first; ties in the simulator's reverse PodResource order.
	slices.SortFunc(list, func(a, b kc) int {
		if a.n != b.n {
			return cmp.Compare(b.n, a.n)
		}
		if a.k.cpu != b.k.cpu {
			return cmp.Compare(b.k.cpu, a.k.cpu)
		}
		if a.k.milli != b.k.milli {
			return cmp.Compare(b.k.milli, a.k.milli)
		}
		if a.k.num != b.k.num {
			return cmp.Compare(b.k.num, a.k.num)
		}
		if d := compareSets(c.sets, b.k.mask, a.k.mask); d != 0 {
			return d
		}
		return cmp.Compare(b.k.mig, a.k.mig)
	})
	total := float64(len(reqs))
	var cum float64
	for _, e := range list {
		if cum >= TypicalShare*total {
			break
		}
		cum += float64(e.n)
		w.pods = append(w.pods, typicalPod{cpu: e.k.cpu, milli: e.k.milli, num: e.k.num, mask: c.set(e.k.mask), mig: e.k.mig, freq: float64(e.n)})
	}
	for i := range w.pods {
		w.pods[i].freq /= cum
		w.cpuCuts = append(w.cpuCuts, w.pods[i].cpu)
	}
	w.classCap = make([]int64, len(c.classes))
	w.classMIG = make([]bool, len(c.classes))
	for id := range c.classes {
		w.classMIG[id] = c.classes[id].mig
	}
	for i := range c.state {
		s := &c.state[i]
		for g, id := range s.gpuModel {
			if s.usable[g] {
				w.classCap[id] += MilliPerGPU
			}
		}
	}
	slices.Sort(w.cpuCuts)
	w.cpuCuts = slices.Compact(w.cpuCuts)
	return w
}

// set returns the interned class set of id.
func (c *Cluster) set(id int32) classSet {
	if id == 0 {
		return nil
	}
	return c.sets[id]
}

// compareSets orders interned sets as numbers with a bit per class, the
// unrestricted (nil) set below every restricting one.
func compareSets(sets []classSet, a, b int32) int {
	if a == b {
		return 0
	}
	if a == 0 || b == 0 {
		return cmp.Compare(a, b) // 0 is the lowest
	}
	x, y := sets[a], sets[b]
	for i := max(len(x), len(y)) - 1; i >= 0; i-- {
		var u, v uint64
		if i < len(x) {
			u = x[i]
		}
		if i < len(y) {
			v = y[i]
		}
		if u != v {
			return cmp.Compare(u, v)
		}
	}
	return 0
}

// Len is the number of typical pod types.
func (w Workload) Len() int { return len(w.pods) }

// cpuRank maps free CPU to the number of typical CPU requests it satisfies,
// which is all fragmentation depends on.
func (w *Workload) cpuRank(cpuFree int64) int {
	n, _ := slices.BinarySearch(w.cpuCuts, cpuFree+1)
	return n
}

// fragMilli is the FGD fragmentation of node s (milli-GPU) with cpuFree
// and gpuFree (s's own, or as after a placement): the expected amount of
// its free GPU that the next typical pod could not use.
//
// A typical pod that needs no GPU or lacks CPU counts all free GPU as
// fragment. Else each GPU it cannot use (another model, memory or compute
// capability, MIG mode for a pod that is not a MIG slice and the reverse)
// or that is too small for it (too little free milli; for a MIG slice, no
// placement left for its profile) is fragment if enough others take the
// pod, and all free GPU is if they do not. A MIG GPU's free memory slices
// count as its free milli (125 each), so free MIG slices no typical slice
// can use count as fragment too.
func (w *Workload) fragMilli(s *nodeState, cpuFree int64, gpuFree []int64) float64 {
	var total int64
	for _, f := range gpuFree {
		total += f
	}
	if total == 0 {
		return 0
	}
	if s.uniform {
		return w.fragUniform(s.model, cpuFree, gpuFree, total)
	}
	var frag float64
	for i := range w.pods {
		t := &w.pods[i]
		if t.milli == 0 || cpuFree < t.cpu {
			frag += t.freq * float64(total)
			continue
		}
		n := 0
		var small, usable int64
		for g, f := range gpuFree {
			if w.own && (!s.usable[g] || !t.mask.has(s.gpuModel[g])) {
				continue
			}
			usable += f
			switch {
			case !s.usable[g] || !t.mask.has(s.gpuModel[g]):
				small += f
			case t.mig != 0:
				if migStart(s, g, &MIGProfiles[t.mig-1]) >= 0 {
					n++
				} else {
					small += f
				}
			case f >= t.milli:
				n++
			default:
				small += f
			}
		}
		if n >= max(t.num, 1) {
			frag += t.freq * float64(small)
		} else {
			frag += t.freq * float64(usable)
		}
	}
	return frag
}

// fragUniform is [Workload.fragMilli] for a node whose GPUs are all of
// class model, none in MIG mode: it depends on the free milli alone.
func (w *Workload) fragUniform(model classID, cpuFree int64, gpuFree []int64, total int64) float64 {
	var frag float64
	for i := range w.pods {
		t := &w.pods[i]
		if t.milli != 0 && w.own && (t.mig != 0 || !t.mask.has(model)) {
			continue // a GPU this pod cannot use is not its fragment
		}
		if t.milli == 0 || t.mig != 0 || cpuFree < t.cpu || !t.mask.has(model) {
			frag += t.freq * float64(total)
			continue
		}
		n := 0
		var small int64
		for _, f := range gpuFree {
			if f >= t.milli {
				n++
			} else {
				small += f
			}
		}
		if n >= t.num {
			frag += t.freq * float64(small)
		} else {
			frag += t.freq * float64(total)
		}
	}
	return frag
}
