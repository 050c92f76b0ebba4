// Package tracefamily derives workload families from an openb pod list,
// deterministically: the same pod list and family give the same pods. It
// builds held-out workloads for the placement policies from the shared
// traces without committing generated data.
//
// A GPU-model-constrained family ("gpuspec…") gives a share of the GPU pods
// a gpu_spec: one model or a set of models ("V100M16|V100M32", the format
// of the openb gpu_spec column), drawn in proportion to the cluster's GPUs
// of each model among the models with a node the pod fits on ("…-uniform":
// every such model alike, so the small models are over-asked). A
// multi-GPU-heavy family ("multigpu…") turns a share of the single
// whole-GPU pods into 2-, 4- or 8-GPU pods, their CPU and memory scaled by
// the GPU count and capped by a typical node of that many GPUs.
//
// The package is pure: it reads no files and draws from its own seeded
// source.
package tracefamily

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"

	"github.com/gpud/gpud/pkg/trace"
)

// Family is one way of deriving a workload from a pod list.
type Family struct {
	// Name is how `gpud sim openb --family` spells it, e.g. "gpuspec15".
	Name string
	// SpecShare is the share of GPU pods (0..1) given a gpu_spec.
	SpecShare float64
	// SetShare is the share of those given a set of 2 or 3 models instead
	// of one.
	SetShare float64
	// Uniform draws every model the pod fits with equal weight instead of
	// in proportion to its GPUs, so the small models are over-asked.
	Uniform bool
	// MultiShare is the share of single whole-GPU pods (0..1) turned into
	// multi-GPU pods of MultiWeights' sizes.
	MultiShare float64
	// MultiWeights weighs 2, 4 and 8 GPUs.
	MultiWeights [3]float64
}

// Families are the named families, constrained first.
var Families = []Family{
	{Name: "gpuspec05", SpecShare: 0.05, SetShare: 0.5},
	{Name: "gpuspec15", SpecShare: 0.15, SetShare: 0.5},
	{Name: "gpuspec33", SpecShare: 0.33, SetShare: 0.5},
	{Name: "gpuspec33-single", SpecShare: 0.33},
	{Name: "gpuspec15-sets", SpecShare: 0.15, SetShare: 1},
	{Name: "gpuspec10-uniform", SpecShare: 0.10, SetShare: 0.5, Uniform: true},
	{Name: "multigpu10", MultiShare: 0.10, MultiWeights: [3]float64{0.5, 0.3, 0.2}},
	{Name: "multigpu20", MultiShare: 0.20, MultiWeights: [3]float64{0.5, 0.3, 0.2}},
	{Name: "multigpu20-8", MultiShare: 0.20, MultiWeights: [3]float64{0.2, 0.2, 0.6}},
	{Name: "multigpu30-2", MultiShare: 0.30, MultiWeights: [3]float64{0.8, 0.2, 0}},
}

// ErrUnknown is matched by the error for a family name not in [Families].
var ErrUnknown = errors.New("tracefamily: unknown family")

// Names lists the families' names, for messages and flags.
func Names() []string {
	out := make([]string, len(Families))
	for i, f := range Families {
		out[i] = f.Name
	}
	return out
}

// ByName returns the named family.
func ByName(name string) (Family, error) {
	for _, f := range Families {
		if f.Name == name {
			return f, nil
		}
	}
	return Family{}, fmt.Errorf("%w %q (want one of %s)", ErrUnknown, name, strings.Join(Names(), ", "))
}

// Validate checks the shares and weights.
func (f Family) Validate() error {
	var errs []error
	for _, v := range []struct {
		name string
		x    float64
	}{{"spec share", f.SpecShare}, {"set share", f.SetShare}, {"multi share", f.MultiShare}} {
		if !(v.x >= 0 && v.x <= 1) {
			errs = append(errs, fmt.Errorf("family %q: %s %v outside 0..1", f.Name, v.name, v.x))
		}
	}
	var sum float64
	for _, w := range f.MultiWeights {
		if !(w >= 0) {
			errs = append(errs, fmt.Errorf("family %q: negative multi-GPU weight %v", f.Name, w))
		}
		sum += w
	}
	if f.MultiShare > 0 && !(sum > 0) {
		errs = append(errs, fmt.Errorf("family %q: multi share %v without multi-GPU weights", f.Name, f.MultiShare))
	}
	return errors.Join(errs...)
}

// seed is the family's own stream: the same family always draws alike.
func (f Family) seed() uint64 {
	h := fnv.New64a()
	h.Write([]byte(f.Name))
	return h.Sum64()
}

// Apply returns a copy of pods transformed by f on the cluster nodes.
// Pods keep their names and order; only num_gpu, cpu_milli, memory_mib
// (multi-GPU families) and gpu_spec (constrained families) change. A pod
// that already has a gpu_spec keeps it.
func (f Family) Apply(nodes []trace.Node, pods []trace.Pod) ([]trace.Pod, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	out := slices.Clone(pods)
	rng := rand.New(rand.NewPCG(f.seed(), 0x15))
	if f.MultiShare > 0 {
		multiply(f, nodes, out, rng)
	}
	if f.SpecShare > 0 {
		m := newModels(nodes)
		if len(m.names) == 0 {
			return nil, fmt.Errorf("family %q: the node list has no GPU model to constrain to", f.Name)
		}
		for i := range out {
			p := &out[i]
			if p.NumGPU == 0 || p.GPUSpec != "" || rng.Float64() >= f.SpecShare {
				continue
			}
			n := 1
			if rng.Float64() < f.SetShare {
				n = 2 + rng.IntN(2)
			}
			p.GPUSpec = m.draw(p, n, f.Uniform, rng)
		}
	}
	return out, nil
}

// models is the cluster's GPU capacity per model, and the nodes of each.
type models struct {
	names []string // sorted
	gpus  []int
	nodes [][]trace.Node
}

func newModels(nodes []trace.Node) *models {
	idx := map[string]int{}
	m := &models{}
	for _, n := range nodes {
		if n.NumGPU == 0 || n.Model == "" {
			continue
		}
		if _, ok := idx[n.Model]; !ok {
			idx[n.Model] = 0
			m.names = append(m.names, n.Model)
		}
	}
	sort.Strings(m.names)
	for i, name := range m.names {
		idx[name] = i
	}
	m.gpus = make([]int, len(m.names))
	m.nodes = make([][]trace.Node, len(m.names))
	for _, n := range nodes {
		if n.NumGPU == 0 || n.Model == "" {
			continue
		}
		i := idx[n.Model]
		m.gpus[i] += n.NumGPU
		m.nodes[i] = append(m.nodes[i], n)
	}
	return m
}

// fits reports whether some node of model i can hold p.
func (m *models) fits(i int, p *trace.Pod) bool {
	return slices.ContainsFunc(m.nodes[i], func(n trace.Node) bool {
		return n.NumGPU >= p.NumGPU && n.CPUMilli >= p.CPUMilli && n.MemoryMiB >= p.MemoryMiB
	})
}

// draw picks up to n distinct models for p, each in proportion to its GPUs
// among the models p fits on, and joins them with "|" in draw order. A pod
// that fits no model's node is left unconstrained ("").
func (m *models) draw(p *trace.Pod, n int, uniform bool, rng *rand.Rand) string {
	w := make([]float64, len(m.names))
	var sum float64
	for i := range m.names {
		if m.fits(i, p) {
			w[i] = float64(m.gpus[i])
			if uniform {
				w[i] = 1
			}
			sum += w[i]
		}
	}
	var picked []string
	for range n {
		if sum <= 0 {
			break
		}
		x := rng.Float64() * sum
		i := 0
		for ; i < len(w)-1; i++ {
			if x < w[i] {
				break
			}
			x -= w[i]
		}
		for w[i] == 0 { // rounding at the end of the range
			i--
		}
		picked = append(picked, m.names[i])
		sum -= w[i]
		w[i] = 0
	}
	return strings.Join(picked, "|")
}

// multiply turns a share of the single whole-GPU pods into 2-, 4- or
// 8-GPU pods.
func multiply(f Family, nodes []trace.Node, pods []trace.Pod, rng *rand.Rand) {
	sizes := [3]int{2, 4, 8}
	var capCPU, capMem [3]int64
	for k, size := range sizes {
		capCPU[k], capMem[k] = typicalNode(nodes, size)
	}
	var sum float64
	for k, w := range f.MultiWeights {
		if capCPU[k] == 0 {
			f.MultiWeights[k] = 0 // no node has that many GPUs
			continue
		}
		sum += w
	}
	if sum <= 0 {
		return
	}
	for i := range pods {
		p := &pods[i]
		if p.NumGPU != 1 || (p.GPUMilli != 0 && p.GPUMilli != 1000) || rng.Float64() >= f.MultiShare {
			continue
		}
		x, k := rng.Float64()*sum, 0
		for ; k < len(sizes)-1; k++ {
			if x < f.MultiWeights[k] {
				break
			}
			x -= f.MultiWeights[k]
		}
		for f.MultiWeights[k] == 0 {
			k--
		}
		size := sizes[k]
		p.NumGPU = size
		p.GPUMilli = 1000
		p.CPUMilli = min(p.CPUMilli*int64(size), capCPU[k])
		p.MemoryMiB = min(p.MemoryMiB*int64(size), capMem[k])
	}
}

// typicalNode is the median CPU and memory of the nodes with at least
// gpus GPUs; zero if none.
func typicalNode(nodes []trace.Node, gpus int) (cpu, mem int64) {
	var cpus, mems []int64
	for _, n := range nodes {
		if n.NumGPU >= gpus {
			cpus = append(cpus, n.CPUMilli)
			mems = append(mems, n.MemoryMiB)
		}
	}
	if len(cpus) == 0 {
		return 0, 0
	}
	slices.Sort(cpus)
	slices.Sort(mems)
	return cpus[len(cpus)/2], mems[len(mems)/2]
}
