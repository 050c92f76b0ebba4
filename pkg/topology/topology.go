// Package topology is the pure model of how a node's GPUs are wired: the
// pairwise link levels `nvidia-smi topo -m` shows, NUMA affinity, and the
// choice of the best-connected subset of free GPUs. It reads no files and
// calls no driver; it imports only pkg/gpu.
package topology

import (
	"github.com/gpud/gpud/pkg/gpu"
)

// Matrix holds pairwise link costs between GPUs, keyed by UUID. It is
// immutable after New and safe for concurrent use.
type Matrix struct {
	ids   []string
	index map[string]int
	links [][]gpu.Link
	cost  [][]int
	numa  []int
}

// Link costs: lower is better. Any NVLink beats any PCIe path, and more
// NVLinks beat fewer.
const (
	maxNVLinks = 36
	costPIX    = 40
	costPXB    = 50
	costPHB    = 60
	costNODE   = 70
	costSYS    = 80
	costNone   = 90
)

// LinkCost is the cost of one link: NVLink 1 to 36 (more links cost less),
// then PIX 40, PXB 50, PHB 60, NODE 70, SYS 80, unknown 90.
func LinkCost(l gpu.Link) int {
	switch l.Level {
	case gpu.LinkNVLink:
		return 1 + maxNVLinks - min(max(l.NVLinks, 1), maxNVLinks)
	case gpu.LinkPIX:
		return costPIX
	case gpu.LinkPXB:
		return costPXB
	case gpu.LinkPHB:
		return costPHB
	case gpu.LinkNODE:
		return costNODE
	case gpu.LinkSYS:
		return costSYS
	}
	return costNone
}

// New builds the matrix of an inventory's GPUs (lost GPUs included, so a
// chooser can be told which are free) and links.
func New(inv gpu.Inventory) *Matrix {
	n := len(inv.GPUs)
	m := &Matrix{ids: make([]string, n), index: make(map[string]int, n), links: make([][]gpu.Link, n), cost: make([][]int, n), numa: make([]int, n)}
	for i, g := range inv.GPUs {
		m.ids[i] = g.UUID
		m.index[g.UUID] = i
		m.numa[i] = g.NUMANode
		m.links[i] = make([]gpu.Link, n)
		m.cost[i] = make([]int, n)
	}
	for i := range n {
		for j := range n {
			if i != j {
				m.links[i][j] = gpu.Link{A: m.ids[i], B: m.ids[j]}
				m.cost[i][j] = costNone
			}
		}
	}
	for _, l := range inv.Links {
		a, okA := m.index[l.A]
		b, okB := m.index[l.B]
		if !okA || !okB || a == b {
			continue
		}
		m.links[a][b], m.links[b][a] = l, gpu.Link{A: l.B, B: l.A, Level: l.Level, NVLinks: l.NVLinks}
		c := LinkCost(l)
		m.cost[a][b], m.cost[b][a] = c, c
	}
	return m
}

// IDs returns the GPU UUIDs in index order.
func (m *Matrix) IDs() []string { return append([]string(nil), m.ids...) }

// Link returns the link between two GPUs, and false if either is unknown or
// they are the same GPU.
func (m *Matrix) Link(a, b string) (gpu.Link, bool) {
	i, okA := m.index[a]
	j, okB := m.index[b]
	if !okA || !okB || i == j {
		return gpu.Link{}, false
	}
	return m.links[i][j], true
}

// NUMANode returns a GPU's NUMA node, -1 when unknown.
func (m *Matrix) NUMANode(id string) int {
	if i, ok := m.index[id]; ok {
		return m.numa[i]
	}
	return -1
}

// SetCost is the sum of pairwise link costs within a set of GPU indices.
func (m *Matrix) setCost(set []int) int {
	c := 0
	for i := range set {
		for j := i + 1; j < len(set); j++ {
			c += m.cost[set[i]][set[j]]
		}
	}
	return c
}
