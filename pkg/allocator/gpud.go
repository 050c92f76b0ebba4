package allocator

import (
	"math/rand/v2"
	"slices"
)

// gpudPolicy is gpud's default. It starts from FGD's score, the
// sigmoid-quantized fragmentation gradient against the typical-pod workload,
// and subtracts, in the same units, what FGD does not see:
//
//   - CPU stranding, per GPU model. A node whose free CPU cannot feed its
//     free GPUs at the CPU-per-GPU ratio (kappa) of the typical pods that
//     can use its GPU model strands the difference; growth of
//     that stranded milli-GPU counts like growth of fragmentation (the
//     sigmoid's slope at zero, [fragUnit] per milli-GPU). This is the term
//     that wins: a node out of CPU strands its GPUs, and FGD looks only one
//     typical pod ahead.
//   - CPU-only pods go where GPUs are used up: [cpuOnlyPerGPU] per free GPU
//     on the node, so CPU-only pods do not eat the CPU that idle GPUs (and
//     8-GPU pods, which need 64-120 cores) will need.
//   - Packing: [openNodePenalty] for a GPU pod that opens a node whose GPUs
//     are all free and [openGPUPenalty] for a fraction that opens a fully
//     free GPU, so whole GPUs and whole nodes stay free for whole-GPU and
//     multi-GPU pods (8-GPU pods fail before 90% arrived without it).
//   - Topology: a multi-GPU pod that has to span NVLink domains on a node
//     loses [spanPenalty] per extra domain.
//
// Exact ties are left to the allocator's tie-breaking (random or the fixed
// node order), as for FGD: best-fit tie-breaking, gpud's first version,
// measured worse.
//
// GPU-model constraints enter every term through which typical pods can use
// which GPUs. The fragmentation gradient is FGD's measured only over the
// GPUs each typical pod can use ([Workload.owned]): FGD counts a GPU of a
// model a constrained typical pod cannot use as that pod's fragment, so
// taking a GPU of a scarce model looks like less fragmentation and FGD fills
// the small models first, leaving the pods constrained to them nowhere to
// go. CPU stranding uses each model's own kappa. And a pod that takes a GPU
// kind the model-constrained pods will ask for more than another kind it
// could use pays for the difference ([pressWeight], [pressure]): measured
// over all pods, not only the typical ones, since constraints split pods
// into many rare types. On a workload without model constraints all three
// are FGD's and gpud's terms as before.
type gpudPolicy struct {
	frag *fragMemo
	// kappa is the CPU milli per GPU milli of the typical GPU pods that
	// can use each class of GPU (index: class id; defaultKappa past the
	// end), so CPU stranding is per GPU model.
	kappa []float64
	// press is, per class id, the GPU demand of the pods restricted to
	// some GPU kinds that can use the class, spread over the GPUs each can
	// use, relative to all GPU demand per GPU of the cluster (0 past the
	// end): how much of the class the constrained pods will ask for.
	// pressed: some class has press.
	press   []float64
	pressed bool
	mig     []bool // per class id: in MIG mode
	// floor[maskID] is the least press among the classes a request of
	// that class set may use, +1 (0: not computed yet).
	floor []float64
	gpus  []int
	one   [1]int
}

// Weights of gpud's terms, in FGD score steps.
const (
	// fragUnit is FGD's score change per milli-GPU of fragmentation near
	// zero: d/dx 100·sigmoid(x/1000) at 0.
	fragUnit = maxNodeScore * 0.25 / 1000
	// openNodePenalty is charged to a GPU pod that opens a node whose GPUs
	// are all free.
	openNodePenalty = 2
	// openGPUPenalty is charged to a fraction that opens a fully free GPU.
	openGPUPenalty = 1
	// cpuOnlyPerGPU is charged to a CPU-only pod per free GPU on the node.
	cpuOnlyPerGPU = 20
	// spanPenalty is charged per NVLink domain beyond the first that a
	// multi-GPU pod spans.
	spanPenalty = 10
	// pressWeight is charged per GPU taken, times the press of its class
	// above the least press among the classes the request may use (so a
	// pod constrained to one model, or a cluster where every model is
	// asked alike, pays nothing). Chosen on seeds 60-69 of the
	// constrained workload families (pkg/tracefamily) from 0, 2, 5, 10,
	// 15, 20, 30, 40: below 10 unconstrained pods still fill the small
	// models that gpuspec10-uniform over-asks; above 15 they avoid models
	// more than gpuspec33-single needs.
	pressWeight = 15
)

func newGpudPolicy(w Workload) *gpudPolicy {
	p := &gpudPolicy{frag: newFragMemo(w.owned()), kappa: make([]float64, len(w.classCap))}
	for id := range p.kappa {
		var cpu, gpu float64
		for i := range w.pods {
			t := &w.pods[i]
			if t.milli > 0 && t.mask.has(classID(id)) && (t.mig != 0) == w.classMIG[id] {
				cpu += t.freq * float64(t.cpu)
				gpu += t.freq * float64(t.milli) * float64(max(t.num, 1))
			}
		}
		p.kappa[id] = defaultKappa
		if gpu > 0 && cpu > 0 {
			p.kappa[id] = cpu / gpu
		}
	}
	p.press = pressure(&w)
	p.mig = w.classMIG
	p.pressed = slices.ContainsFunc(p.press, func(v float64) bool { return v > 0 })
	return p
}

// pressure computes [gpudPolicy.press] for w.
func pressure(w *Workload) []float64 {
	n := len(w.classCap)
	press := make([]float64, n)
	// Capacity per MIG mode tells a model constraint from the MIG
	// exclusion every mask carries on a cluster with MIG GPUs.
	var capMode [2]int64
	var capAll int64
	for id, c := range w.classCap {
		capMode[b2i(w.classMIG[id])] += c
		capAll += c
	}
	for _, d := range w.constrained {
		var capSet int64
		for id, c := range w.classCap {
			if d.set.has(classID(id)) && d.mig == w.classMIG[id] {
				capSet += c
			}
		}
		if capSet == 0 || capSet >= capMode[b2i(d.mig)] {
			continue // no restriction beyond MIG mode, or no GPU takes it
		}
		for id := range n {
			if d.set.has(classID(id)) && d.mig == w.classMIG[id] {
				press[id] += d.milli / float64(capSet)
			}
		}
	}
	demand := w.demand
	if demand > 0 {
		for id := range press {
			press[id] *= float64(capAll) / demand
		}
	}
	return press
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// pressOf is the constrained pressure on class id.
func (p *gpudPolicy) pressOf(id classID) float64 {
	if int(id) < len(p.press) {
		return p.press[id]
	}
	return 0
}

// floorOf is the least press among the classes r may use: taking a class
// costs only its press above the request's best alternative.
func (p *gpudPolicy) floorOf(r *request) float64 {
	id := int(r.maskID)
	if id < len(p.floor) && p.floor[id] != 0 {
		return p.floor[id] - 1
	}
	least := -1.0
	for c := range p.press {
		if c != noModel && r.mask.has(classID(c)) && (least < 0 || p.press[c] < least) && p.pressOK(c, r) {
			least = p.press[c]
		}
	}
	least = max(least, 0)
	if id >= len(p.floor) {
		p.floor = append(p.floor, make([]float64, id+1-len(p.floor))...)
	}
	p.floor[id] = least + 1
	return least
}

// pressOK: class c serves r's kind (MIG slice or not).
func (p *gpudPolicy) pressOK(c int, r *request) bool {
	return c < len(p.mig) && p.mig[c] == (r.mig != 0)
}

// defaultKappa is the CPU-per-GPU ratio (CPU milli per GPU milli) assumed
// for GPUs no typical GPU pod can use: 8 cores per GPU.
const defaultKappa = 8.0

func (*gpudPolicy) Name() string { return PolicyGpud }
func (*gpudPolicy) stable() bool { return true }

func (p *gpudPolicy) score(s *nodeState, r *request) float64 {
	sc, _ := p.choose(s, r)
	return sc
}

// kappaOf is the CPU-per-GPU ratio of the pods that can use class id.
func (p *gpudPolicy) kappaOf(id classID) float64 {
	if int(id) < len(p.kappa) {
		return p.kappa[id]
	}
	return defaultKappa
}

// stranded is the free milli-GPU of a node with gpuFree milli-GPU and
// cpuFree CPU that the CPU cannot feed at the ratio of the pods that can
// use its GPUs (kappa).
func stranded(kappa float64, gpuFree, cpuFree int64) float64 {
	return max(0, float64(gpuFree)-float64(cpuFree)/kappa)
}

// choose returns the node's score for r and, for a fraction, the GPU.
func (p *gpudPolicy) choose(s *nodeState, r *request) (float64, int) {
	before := p.frag.node(s)
	kappa := p.kappaOf(s.model)
	pen := fragUnit * (stranded(kappa, s.totalFree-r.total, s.cpuFree-r.cpu) - stranded(kappa, s.totalFree, s.cpuFree))
	if p.pressed && r.total > 0 {
		pen += pressWeight * (p.pressOf(s.model) - p.floorOf(r)) * float64(r.total) / MilliPerGPU
	}
	if r.num == 0 {
		pen += cpuOnlyPerGPU * float64(s.totalFree) / MilliPerGPU
	} else if s.totalFree == s.capMilli {
		pen += openNodePenalty
	}
	if r.num == 0 || r.milli >= MilliPerGPU {
		p.gpus = exclusiveGPUs(s, r, p.gpus[:0])
		if r.num > 1 && s.topo {
			pen += spanPenalty * float64(s.spanned(p.gpus)-1)
		}
		return float64(sigmoidScore(before-p.frag.after(s, r, p.gpus))) - pen, -1
	}
	best, bestG := 0.0, -1
	for g, f := range s.gpuFree {
		if f < r.milli || !s.usable[g] || !accessible(r.mask, s.gpuModel[g]) {
			continue
		}
		if bestG >= 0 && f == s.gpuFree[bestG] {
			continue // same free milli scores alike; the first wins
		}
		p.one[0] = g
		sc := float64(sigmoidScore(before-p.frag.after(s, r, p.one[:]))) - pen
		if f == MilliPerGPU {
			sc -= openGPUPenalty
		}
		if bestG < 0 || sc > best {
			best, bestG = sc, g
		}
	}
	return best, bestG
}

func (p *gpudPolicy) selectGPUs(s *nodeState, r *request, _ *rand.Rand, dst []int) []int {
	return chosenGPUs(p, s, r, dst)
}
