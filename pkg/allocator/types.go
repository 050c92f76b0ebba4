package allocator

import "strings"

// MilliPerGPU is one whole GPU in milli-GPU units.
const MilliPerGPU = 1000

// GPU is one device of a node.
type GPU struct {
	// Model is the GPU model name as constraints spell it, e.g. "V100M32".
	Model string
	// MemoryMiB is the device memory; informational for placement.
	MemoryMiB int64
	// Unhealthy GPUs are never chosen. The zero value is healthy.
	Unhealthy bool
	// Labels carry topology hints (NVLink domain, rack, zone).
	Labels map[string]string
}

// Node is the capacity of one node. Its free resources live in [Cluster].
type Node struct {
	Name      string
	CPUMilli  int64
	MemoryMiB int64
	GPUs      []GPU
	Labels    map[string]string
}

// Request is one pod's demand.
//
// NumGPU == 0 asks for no GPU. NumGPU >= 1 with GPUMilli == 0 or 1000 asks for
// whole GPUs. NumGPU == 1 with 0 < GPUMilli < 1000 asks for a fraction of one
// GPU. Models, if not empty, lists the GPU models the request accepts.
type Request struct {
	CPUMilli  int64
	MemoryMiB int64
	NumGPU    int
	GPUMilli  int64
	Models    []string
}

// ParseModels splits a constraint such as "V100M16|V100M32" into models.
// An empty string means "any model".
func ParseModels(spec string) []string {
	var out []string
	for _, m := range strings.Split(spec, "|") {
		if m = strings.TrimSpace(m); m != "" {
			out = append(out, m)
		}
	}
	return out
}

// MilliPerGPUOf returns the per-GPU milli request of r (1000 for whole GPUs,
// 0 for CPU-only requests).
func (r Request) MilliPerGPUOf() int64 {
	if r.NumGPU == 0 {
		return 0
	}
	if r.GPUMilli <= 0 || r.GPUMilli > MilliPerGPU {
		return MilliPerGPU
	}
	return r.GPUMilli
}

// TotalGPUMilli is the request's GPU demand summed over its GPUs.
func (r Request) TotalGPUMilli() int64 { return r.MilliPerGPUOf() * int64(r.NumGPU) }

// Decision is where a request goes.
type Decision struct {
	// Node is the index of the node in the [Cluster].
	Node int
	// GPUs are the device indices on that node; empty for CPU-only requests.
	GPUs []int
	// MilliPerGPU is taken from each GPU in GPUs.
	MilliPerGPU int64
}
