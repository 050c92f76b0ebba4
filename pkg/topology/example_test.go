package topology_test

import (
	"errors"
	"fmt"

	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/simnode"
	"github.com/gpud/gpud/pkg/topology"
)

// Example shows where a Matrix comes from and what it is for. The agent
// reads the inventory (GPUs, NUMA nodes, pairwise links) with pkg/discovery
// from NVML (here a simulated 4 x L40S PCIe node: two GPUs per PCIe switch,
// one switch per NUMA node), builds the Matrix once, and asks it for the
// best-connected free GPUs of each request. The package itself reads
// nothing.
func Example() {
	node := simnode.NewBuiltin("pcie-l40s") // stands in for nvml.New()
	inv, err := discovery.New(node, "node-a", nil).Inventory()
	if err != nil {
		fmt.Println(err)
		return
	}
	m := topology.New(inv)

	// UUIDs differ per node; print GPU indices instead.
	index := map[string]int{}
	for _, g := range inv.GPUs {
		index[g.UUID] = g.Index
	}
	ids := m.IDs()
	for i, a := range ids {
		for _, b := range ids[i+1:] {
			l, _ := m.Link(a, b)
			fmt.Printf("GPU%d-GPU%d %s (NUMA %d/%d)\n", index[a], index[b], l.Label(), m.NUMANode(a), m.NUMANode(b))
		}
	}

	pick := func(free []string, n int, mustInclude ...string) {
		got, err := m.Choose(free, n, mustInclude)
		if err != nil {
			fmt.Println(err)
			return
		}
		out := make([]int, len(got))
		for i, id := range got {
			out[i] = index[id]
		}
		fmt.Printf("%d of %d free GPUs: %v\n", n, len(free), out)
	}
	pick(ids, 2)             // the pair behind one PCIe switch
	pick(ids[1:], 2)         // GPU0 busy: the other switch's pair, not GPU1+GPU2 across NUMA
	pick(ids[1:], 2, ids[1]) // GPU1 must be in the set: any partner crosses NUMA
	// Output:
	// GPU0-GPU1 PIX (NUMA 0/0)
	// GPU0-GPU2 SYS (NUMA 0/1)
	// GPU0-GPU3 SYS (NUMA 0/1)
	// GPU1-GPU2 SYS (NUMA 0/1)
	// GPU1-GPU3 SYS (NUMA 0/1)
	// GPU2-GPU3 PIX (NUMA 1/1)
	// 2 of 4 free GPUs: [0 1]
	// 2 of 3 free GPUs: [2 3]
	// 2 of 3 free GPUs: [1 2]
}

// ExampleMatrix_Choose builds a Matrix from a hand-written inventory, as a
// test or a `gpud sim` scenario can: four H100 NVL cards bridged by NVLink
// in pairs (GPU a with b, c with d), the pairs on different NUMA nodes. Any
// NVLink beats any PCIe path, and among equal sets Choose keeps the free
// GPUs left over best connected: one GPU is taken from the broken pair
// (GPU-a), so a later 2-GPU request still finds the bridged one. Asking for
// more than is free is ErrInsufficient.
func ExampleMatrix_Choose() {
	inv := gpu.Inventory{
		GPUs: []gpu.GPU{
			{UUID: "GPU-a", Index: 0, NUMANode: 0},
			{UUID: "GPU-b", Index: 1, NUMANode: 0},
			{UUID: "GPU-c", Index: 2, NUMANode: 1},
			{UUID: "GPU-d", Index: 3, NUMANode: 1},
		},
		Links: []gpu.Link{
			{A: "GPU-a", B: "GPU-b", Level: gpu.LinkNVLink, NVLinks: 12},
			{A: "GPU-c", B: "GPU-d", Level: gpu.LinkNVLink, NVLinks: 12},
			{A: "GPU-a", B: "GPU-c", Level: gpu.LinkSYS},
			{A: "GPU-a", B: "GPU-d", Level: gpu.LinkSYS},
			{A: "GPU-b", B: "GPU-c", Level: gpu.LinkSYS},
			{A: "GPU-b", B: "GPU-d", Level: gpu.LinkSYS},
		},
	}
	m := topology.New(inv)
	free := []string{"GPU-a", "GPU-c", "GPU-d"} // GPU-b is in use
	for _, n := range []int{1, 2, 3, 4} {
		got, err := m.Choose(free, n, nil)
		if err != nil {
			fmt.Println(errors.Is(err, topology.ErrInsufficient), err)
			continue
		}
		fmt.Println(n, got)
	}
	// Output:
	// 1 [GPU-a]
	// 2 [GPU-c GPU-d]
	// 3 [GPU-a GPU-c GPU-d]
	// true topology: not enough free devices: 4 requested, 3 free
}
