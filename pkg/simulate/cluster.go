package simulate

import (
	"github.com/gpud/gpud/pkg/allocator"
	"github.com/gpud/gpud/pkg/trace"
)

// Nodes turns trace nodes into allocator nodes; each GPU gets the node's
// model.
func Nodes(tn []trace.Node) []allocator.Node {
	out := make([]allocator.Node, len(tn))
	for i, n := range tn {
		gpus := make([]allocator.GPU, n.NumGPU)
		for g := range gpus {
			gpus[g] = allocator.GPU{Model: n.Model}
		}
		out[i] = allocator.Node{Name: n.Name, CPUMilli: n.CPUMilli, MemoryMiB: n.MemoryMiB, GPUs: gpus}
	}
	return out
}

// Request turns a trace pod into an allocator request.
func Request(p trace.Pod) allocator.Request {
	return allocator.Request{
		CPUMilli:  p.CPUMilli,
		MemoryMiB: p.MemoryMiB,
		NumGPU:    p.NumGPU,
		GPUMilli:  p.GPUMilli,
		Models:    allocator.ParseModels(p.GPUSpec),
	}
}

// Requests converts every pod.
func Requests(pods []trace.Pod) []allocator.Request {
	out := make([]allocator.Request, len(pods))
	for i, p := range pods {
		out[i] = Request(p)
	}
	return out
}
