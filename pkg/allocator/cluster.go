package allocator

import (
	"fmt"
	"math/bits"
	"slices"
)

// maxAffinity bounds the GPU-count tags GpuClustering tracks per node; tag 0
// is "share-gpu", tag k is "k-gpu".
const maxAffinity = 17

// nodeState is the mutable free view of one node.
type nodeState struct {
	spec     *Node
	cpuFree  int64
	memFree  int64
	gpuFree  []int64   // milli free per GPU; 0 for unhealthy GPUs
	usable   []bool    // healthy GPUs
	gpuModel []classID // class id per GPU
	model    classID   // class id of the node (its first GPU), noModel if none
	// uniform: every GPU is of class model and not in MIG mode, so
	// fragmentation depends on the free milli alone (memoized).
	uniform   bool
	totalFree int64 // sum of gpuFree
	capMilli  int64 // milli of the healthy GPUs
	gpuMemMin int64 // smallest known memory (MiB) of a non-MIG GPU; 0 if none
	// memKinds are the distinct known memories (MiB) of the non-MIG GPUs,
	// ascending; memUniform: there is one and every non-MIG GPU has it.
	memKinds   []int64
	memUniform bool
	// topo is set when some GPU carries an NVLink domain label; domain is
	// then each GPU's domain index (unlabeled GPUs are their own domain).
	topo     bool
	domain   []uint8
	nDomains int
	// migUsed and migCompute are the taken memory-slice mask and compute
	// slices of MIG GPUs.
	migUsed    []uint8
	migCompute []uint8
	// affinity counts GPU pods on the node by tag (GpuClustering).
	affinity [maxAffinity]int32
	nTags    int
}

// MaxGPUsPerNode bounds a node's GPUs; the largest servers carry 8 to 16.
const MaxGPUsPerNode = 64

// noModel is the class id of a node without GPUs.
const noModel = 0

// Cluster is the free state of a set of nodes. It is not safe for concurrent
// use.
type Cluster struct {
	nodes []Node
	state []nodeState
	// versions[i] is bumped on every change of state[i] (starts at 1), so
	// that an [Allocator] can tell which of its cached verdicts still
	// hold. Kept apart from the large nodeState so that the scan over
	// cached nodes reads one dense slice.
	versions []uint32
	// memFree[i] mirrors state[i].memFree for the same scan: cached
	// verdicts leave memory out (requests that differ only in memory
	// share them), so the scan checks it here.
	memFree  []int64
	classes  []gpuClass // id -> class; id 0 is "no GPU"
	classIDs map[gpuClass]classID
	hasMIG   bool // some class is in MIG mode
	// sets interns request class sets by their bits (setIDs); keyBuf and
	// scratch are reused by [Cluster.intern] and [Cluster.words].
	sets    []classSet
	setIDs  map[string]int32
	keyBuf  []byte
	scratch []uint64
	// memSets[m] is the set of non-MIG classes of memory m (MiB).
	memSets    map[int64]classSet
	typicalMem int64 // most common GPU memory, for memory-sized typical pods
	capMilli   int64
	used       int64
}

// NewCluster copies nodes into a new, empty cluster. Nodes keep their order:
// [Decision.Node] indexes it. A node has at most [MaxGPUsPerNode] GPUs; the
// kinds of GPU in a cluster (distinct model, memory, compute capability and
// MIG mode) are not bounded.
func NewCluster(nodes []Node) (*Cluster, error) {
	c := &Cluster{
		nodes:    slices.Clone(nodes),
		state:    make([]nodeState, len(nodes)),
		versions: make([]uint32, len(nodes)),
		memFree:  make([]int64, len(nodes)),
		classes:  []gpuClass{{}},
		classIDs: map[gpuClass]classID{{}: noModel},
	}
	memCount := map[int64]int{}
	for i := range c.nodes {
		n := &c.nodes[i]
		if n.CPUMilli < 0 || n.MemoryMiB < 0 {
			return nil, fmt.Errorf("node %q: negative capacity: %w", n.Name, ErrInvalid)
		}
		if len(n.GPUs) > MaxGPUsPerNode {
			return nil, fmt.Errorf("node %q: %d GPUs, more than %d: %w", n.Name, len(n.GPUs), MaxGPUsPerNode, ErrInvalid)
		}
		s := &c.state[i]
		s.spec = n
		s.cpuFree, s.memFree = n.CPUMilli, n.MemoryMiB
		k := len(n.GPUs)
		s.gpuFree, s.usable, s.gpuModel = make([]int64, k), make([]bool, k), make([]classID, k)
		s.domain, s.migUsed, s.migCompute = make([]uint8, k), make([]uint8, k), make([]uint8, k)
		c.versions[i], c.memFree[i] = 1, n.MemoryMiB
		domains := map[string]int{}
		for g, gpu := range n.GPUs {
			cls := gpuClass{model: gpu.Model, memMiB: gpu.MemoryMiB, mig: gpu.Labels[LabelMIG] == "true"}
			if gpu.ComputeCapability != "" {
				cc, err := parseCC(gpu.ComputeCapability)
				if err != nil {
					return nil, fmt.Errorf("node %q gpu %d: %w", n.Name, g, err)
				}
				cls.cc = cc
			}
			id := c.classID(cls)
			s.gpuModel[g] = id
			if g == 0 {
				s.model = id
			}
			if d, ok := gpu.Labels[LabelNVLinkDomain]; ok {
				s.topo = true
				if _, seen := domains[d]; !seen {
					domains[d] = len(domains)
				}
				s.domain[g] = uint8(min(domains[d], maxDomains-1))
			} else {
				domains[fmt.Sprint("\x00", g)] = len(domains)
				s.domain[g] = uint8(min(len(domains)-1, maxDomains-1))
			}
			if !cls.mig && gpu.MemoryMiB > 0 {
				memCount[gpu.MemoryMiB]++
				if s.gpuMemMin == 0 || gpu.MemoryMiB < s.gpuMemMin {
					s.gpuMemMin = gpu.MemoryMiB
				}
				if !slices.Contains(s.memKinds, gpu.MemoryMiB) {
					s.memKinds = append(s.memKinds, gpu.MemoryMiB)
				}
			}
			if !gpu.Unhealthy {
				s.usable[g] = true
				s.gpuFree[g] = MilliPerGPU
				s.totalFree += MilliPerGPU
				s.capMilli += MilliPerGPU
				c.capMilli += MilliPerGPU
			}
		}
		s.nDomains = min(len(domains), maxDomains)
		slices.Sort(s.memKinds)
		s.memUniform = len(s.memKinds) == 1
		for g, gpu := range n.GPUs {
			if !c.classes[s.gpuModel[g]].mig && gpu.MemoryMiB != s.gpuMemMin {
				s.memUniform = false
			}
		}
		s.uniform = k > 0 && !c.classes[s.model].mig
		for _, id := range s.gpuModel {
			s.uniform = s.uniform && id == s.model
		}
	}
	c.memSets = map[int64]classSet{}
	for id := 1; id < len(c.classes); id++ {
		k := &c.classes[id]
		if k.mig || k.memMiB <= 0 {
			continue
		}
		set := c.memSets[k.memMiB]
		if set == nil {
			set = make(classSet, (len(c.classes)+63)/64)
			c.memSets[k.memMiB] = set
		}
		set[id>>6] |= 1 << (id & 63)
	}
	for m, n := range memCount {
		if n > memCount[c.typicalMem] || (n == memCount[c.typicalMem] && m < c.typicalMem) {
			c.typicalMem = m
		}
	}
	return c, nil
}

// Len is the number of nodes.
func (c *Cluster) Len() int { return len(c.nodes) }

// Node returns node i's capacity.
func (c *Cluster) Node(i int) Node { return c.nodes[i] }

// FreeCPUMilli reports node i's free CPU.
func (c *Cluster) FreeCPUMilli(i int) int64 { return c.state[i].cpuFree }

// FreeMemoryMiB reports node i's free memory.
func (c *Cluster) FreeMemoryMiB(i int) int64 { return c.state[i].memFree }

// FreeGPUMilli reports the free milli-GPU of GPU g on node i.
func (c *Cluster) FreeGPUMilli(i, g int) int64 { return c.state[i].gpuFree[g] }

// FreeMIGSlices reports the free memory slices (of 8) of MIG GPU g on node
// i; 0 for a GPU not in MIG mode.
func (c *Cluster) FreeMIGSlices(i, g int) int {
	s := &c.state[i]
	if !c.classes[s.gpuModel[g]].mig || !s.usable[g] {
		return 0
	}
	return MIGMemorySlices - bits.OnesCount8(s.migUsed[g])
}

// GPUCapacityMilli is the milli-GPU of all healthy GPUs.
func (c *Cluster) GPUCapacityMilli() int64 { return c.capMilli }

// AllocatedGPUMilli is the milli-GPU currently bound.
func (c *Cluster) AllocatedGPUMilli() int64 { return c.used }

// accessible reports whether a GPU of class model may serve a request with
// mask.
func accessible(mask classSet, model classID) bool { return mask.has(model) }
