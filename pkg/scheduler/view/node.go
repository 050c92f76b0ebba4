package view

import (
	"fmt"
	"math/rand/v2"

	"github.com/gpud/gpud/pkg/allocator"
)

// isMIG reports whether the item asks for a MIG slice; a nil item (a pod
// without devices) does not.
func (it *Item) isMIG() bool { return it != nil && it.Kind == MIG }

// nodeUsedBind appends the bind that charges cluster node i with the CPU
// and memory used reports, capped at the node's capacity (a node
// over-committed by pods bound elsewhere has nothing left, not less than
// nothing; the GPU binds before it take no CPU or memory).
func nodeUsedBind(dst []bind, i int, n *Node, used func(*Node) (int64, int64)) []bind {
	cpu, mem := used(n)
	cpu = min(max(cpu, 0), n.CPUMilli)
	mem = min(max(mem, 0), n.MemoryMiB)
	if cpu > 0 || mem > 0 {
		dst = append(dst, bind{allocator.Decision{Node: i}, allocator.Request{CPUMilli: cpu, MemoryMiB: mem}})
	}
	return dst
}

// PlaceNode chooses a node for a pod that has no gpud device left to
// allocate (CPU and memory only, req.NumGPU 0): the allocator policy
// decides, so such pods go where they strand the fewest GPUs instead of
// filling the first node's CPUs. Only nodes opt.NodeFilter accepts are
// candidates. It fails with [ErrNoFit] when none has room.
func (v *View) PlaceNode(req allocator.Request, opt Options) (string, error) {
	if req.NumGPU != 0 || req.GPUMilli != 0 || req.MIGProfile != "" || req.GPUMemoryMiB != 0 {
		return "", fmt.Errorf("PlaceNode: request %+v asks for a GPU: %w", req, ErrInvalid)
	}
	if opt.Rand == nil {
		opt.Rand = rand.New(rand.NewPCG(1, 2))
	}
	md, err := v.cluster(nil, v.usage, opt, nil, "", nil)
	if err != nil {
		return "", err
	}
	d, err := md.alloc.Decide(req)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrNoFit, err)
	}
	return md.refs[d.Node].Name, nil
}
