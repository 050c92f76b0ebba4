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
	mask  uint64
	freq  float64
}

// Workload is the distribution of typical pods that FGD and gpud measure
// fragmentation against. Build it with [Cluster.Workload] from the pod list
// the cluster will serve. The zero value has no typical pods.
type Workload struct {
	pods []typicalPod
	// cpuCuts are the distinct CPU requests of the typical pods, ascending.
	cpuCuts []int64
}

// Workload builds the typical-pod distribution of reqs as the FGD simulator
// does: count identical (CPU, per-GPU milli, GPU count, model constraint)
// requests, keep the most frequent types until they cover [TypicalShare] of
// all pods, and renormalize their frequencies to sum to 1.
func (c *Cluster) Workload(reqs []Request) Workload {
	type key struct {
		cpu, milli int64
		num        int
		mask       uint64
	}
	counts := map[key]int{}
	for _, q := range reqs {
		r, err := c.normalize(q)
		if err != nil || r.mig != 0 {
			continue // MIG slices do not fragment milli-GPU
		}
		if r.gmem > 0 && c.typicalMem > 0 {
			r.milli = min(max(r.milli, (r.gmem*MilliPerGPU+c.typicalMem-1)/c.typicalMem), MilliPerGPU)
		}
		counts[key{r.cpu, r.milli, r.num, r.mask}]++
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
		return cmp.Compare(b.k.mask, a.k.mask)
	})
	total := float64(len(reqs))
	var w Workload
	var cum float64
	for _, e := range list {
		if cum >= TypicalShare*total {
			break
		}
		cum += float64(e.n)
		w.pods = append(w.pods, typicalPod{cpu: e.k.cpu, milli: e.k.milli, num: e.k.num, mask: e.k.mask, freq: float64(e.n)})
	}
	for i := range w.pods {
		w.pods[i].freq /= cum
		w.cpuCuts = append(w.cpuCuts, w.pods[i].cpu)
	}
	slices.Sort(w.cpuCuts)
	w.cpuCuts = slices.Compact(w.cpuCuts)
	return w
}

// Len is the number of typical pod types.
func (w Workload) Len() int { return len(w.pods) }

// cpuRank maps free CPU to the number of typical CPU requests it satisfies,
// which is all fragmentation depends on.
func (w *Workload) cpuRank(cpuFree int64) int {
	n, _ := slices.BinarySearch(w.cpuCuts, cpuFree+1)
	return n
}

// fragMilli is the FGD fragmentation of a node (milli-GPU): the expected
// amount of its free GPU that the next typical pod could not use.
//
// A typical pod that needs no GPU, cannot use this GPU model, lacks CPU, or
// finds too few GPUs with enough free milli counts all free GPU as fragment;
// one that fits counts only the GPUs too small for it.
func (w *Workload) fragMilli(model uint8, cpuFree int64, gpuFree []int64) float64 {
	var total int64
	for _, f := range gpuFree {
		total += f
	}
	if total == 0 {
		return 0
	}
	var frag float64
	for i := range w.pods {
		t := &w.pods[i]
		if t.milli == 0 || cpuFree < t.cpu || (t.mask != 0 && (model == noModel || t.mask&(1<<model) == 0)) {
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
