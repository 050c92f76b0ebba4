package allocator

import (
	"fmt"
	"slices"
)

// maxAffinity bounds the GPU-count tags GpuClustering tracks per node; tag 0
// is "share-gpu", tag k is "k-gpu".
const maxAffinity = 17

// nodeState is the mutable free view of one node.
type nodeState struct {
	spec      *Node
	cpuFree   int64
	memFree   int64
	gpuFree   []int64 // milli free per GPU; 0 for unhealthy GPUs
	usable    []bool  // healthy GPUs
	gpuModel  []uint8 // model id per GPU
	model     uint8   // model id of the node (its first GPU), noModel if none
	totalFree int64   // sum of gpuFree
	version   uint32  // bumped on every change; starts at 1
	// affinity counts GPU pods on the node by tag (GpuClustering).
	affinity [maxAffinity]int32
	nTags    int
}

// noModel is the model id of a node without GPUs.
const noModel = 0

// Cluster is the free state of a set of nodes. It is not safe for concurrent
// use.
type Cluster struct {
	nodes    []Node
	state    []nodeState
	models   []string // id -> name; id 0 is "" (no GPU)
	modelIDs map[string]uint8
	capMilli int64
	used     int64
}

// NewCluster copies nodes into a new, empty cluster. Nodes keep their order:
// [Decision.Node] indexes it.
func NewCluster(nodes []Node) (*Cluster, error) {
	c := &Cluster{
		nodes:    slices.Clone(nodes),
		state:    make([]nodeState, len(nodes)),
		models:   []string{""},
		modelIDs: map[string]uint8{"": noModel},
	}
	for i := range c.nodes {
		n := &c.nodes[i]
		if n.CPUMilli < 0 || n.MemoryMiB < 0 {
			return nil, fmt.Errorf("node %q: negative capacity: %w", n.Name, ErrInvalid)
		}
		s := &c.state[i]
		s.spec = n
		s.cpuFree, s.memFree = n.CPUMilli, n.MemoryMiB
		s.gpuFree = make([]int64, len(n.GPUs))
		s.usable = make([]bool, len(n.GPUs))
		s.gpuModel = make([]uint8, len(n.GPUs))
		s.version = 1
		for g, gpu := range n.GPUs {
			id, err := c.modelID(gpu.Model)
			if err != nil {
				return nil, fmt.Errorf("node %q: %w", n.Name, err)
			}
			s.gpuModel[g] = id
			if g == 0 {
				s.model = id
			}
			if !gpu.Unhealthy {
				s.usable[g] = true
				s.gpuFree[g] = MilliPerGPU
				s.totalFree += MilliPerGPU
				c.capMilli += MilliPerGPU
			}
		}
	}
	return c, nil
}

func (c *Cluster) modelID(name string) (uint8, error) {
	if id, ok := c.modelIDs[name]; ok {
		return id, nil
	}
	if len(c.models) >= 64 {
		return 0, fmt.Errorf("more than 63 GPU models: %w", ErrInvalid)
	}
	id := uint8(len(c.models))
	c.models = append(c.models, name)
	c.modelIDs[name] = id
	return id, nil
}

// modelMask turns a model list into a bit set of known model ids; 0 means any
// model. A list naming only unknown models gives a mask no GPU matches.
func (c *Cluster) modelMask(models []string) uint64 {
	if len(models) == 0 {
		return 0
	}
	var m uint64 = 1 << 63 // sentinel bit: "constrained"
	for _, name := range models {
		if id, ok := c.modelIDs[name]; ok && id != noModel {
			m |= 1 << id
		}
	}
	return m
}

// Len is the number of nodes.
func (c *Cluster) Len() int { return len(c.nodes) }

// Node returns node i's capacity.
func (c *Cluster) Node(i int) Node { return c.nodes[i] }

// FreeCPUMilli, FreeMemoryMiB and FreeGPUMilli report node i's free resources.
func (c *Cluster) FreeCPUMilli(i int) int64 { return c.state[i].cpuFree }

// FreeMemoryMiB reports node i's free memory.
func (c *Cluster) FreeMemoryMiB(i int) int64 { return c.state[i].memFree }

// FreeGPUMilli reports the free milli-GPU of GPU g on node i.
func (c *Cluster) FreeGPUMilli(i, g int) int64 { return c.state[i].gpuFree[g] }

// GPUCapacityMilli is the milli-GPU of all healthy GPUs.
func (c *Cluster) GPUCapacityMilli() int64 { return c.capMilli }

// AllocatedGPUMilli is the milli-GPU currently bound.
func (c *Cluster) AllocatedGPUMilli() int64 { return c.used }

// accessible reports whether GPU g of s may serve a request with mask.
func accessible(mask uint64, model uint8) bool {
	return mask == 0 || mask&(1<<model) != 0
}

// fit checks node s against r and returns "" or the failing reason.
func fit(s *nodeState, r *request) string {
	if s.cpuFree < r.cpu {
		return ReasonCPU
	}
	if s.memFree < r.mem {
		return ReasonMemory
	}
	if r.num == 0 {
		return ""
	}
	if len(s.gpuFree) == 0 {
		return ReasonNoGPU
	}
	n, access := 0, false
	for g, f := range s.gpuFree {
		if !accessible(r.mask, s.gpuModel[g]) {
			continue
		}
		access = true
		if f >= r.milli && s.usable[g] {
			n++
			if n >= r.num {
				return ""
			}
		}
	}
	if !access {
		return ReasonModel
	}
	return ReasonGPU
}

// Bind takes d's resources for req from the cluster.
func (c *Cluster) Bind(d Decision, req Request) error {
	r := c.normalize(req)
	if d.Node < 0 || d.Node >= len(c.state) {
		return fmt.Errorf("bind: node %d: %w", d.Node, ErrInvalid)
	}
	s := &c.state[d.Node]
	if s.cpuFree < r.cpu || s.memFree < r.mem || len(d.GPUs) != r.num {
		return fmt.Errorf("bind %v on %q: %w", req, s.spec.Name, ErrNoFit)
	}
	for i, g := range d.GPUs {
		if g < 0 || g >= len(s.gpuFree) || !s.usable[g] || s.gpuFree[g] < r.milli || slices.Contains(d.GPUs[:i], g) {
			return fmt.Errorf("bind %v on %q gpu %d: %w", req, s.spec.Name, g, ErrNoFit)
		}
	}
	s.cpuFree -= r.cpu
	s.memFree -= r.mem
	for _, g := range d.GPUs {
		s.gpuFree[g] -= r.milli
	}
	s.totalFree -= r.total
	c.used += r.total
	if r.num > 0 {
		if s.affinity[r.tag] == 0 {
			s.nTags++
		}
		s.affinity[r.tag]++
	}
	s.version++
	return nil
}

// Unbind returns what [Cluster.Bind] took for the same d and req.
func (c *Cluster) Unbind(d Decision, req Request) error {
	r := c.normalize(req)
	if d.Node < 0 || d.Node >= len(c.state) {
		return fmt.Errorf("unbind: node %d: %w", d.Node, ErrInvalid)
	}
	s := &c.state[d.Node]
	for _, g := range d.GPUs {
		if g < 0 || g >= len(s.gpuFree) || s.gpuFree[g]+r.milli > MilliPerGPU {
			return fmt.Errorf("unbind %v on %q gpu %d: %w", req, s.spec.Name, g, ErrInvalid)
		}
	}
	s.cpuFree += r.cpu
	s.memFree += r.mem
	for _, g := range d.GPUs {
		s.gpuFree[g] += r.milli
	}
	s.totalFree += r.total
	c.used -= r.total
	if r.num > 0 && s.affinity[r.tag] > 0 {
		s.affinity[r.tag]--
		if s.affinity[r.tag] == 0 {
			s.nTags--
		}
	}
	s.version++
	return nil
}
