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
	// Labels carry topology hints (NVLink domain, rack, zone). On a GPU,
	// [LabelNVLinkDomain] names the GPU's NVLink domain within its node and
	// [LabelMIG] = "true" puts the GPU in MIG mode.
	Labels map[string]string
	// ComputeCapability is "major.minor", e.g. "8.0"; empty means unknown,
	// which no minimum accepts.
	ComputeCapability string
}

// Labels the allocator reads. The keys match pkg/allocator/jobs'.
const (
	// LabelNVLinkDomain on a GPU names the NVLink domain it belongs to
	// within its node; multi-GPU pods are kept within one domain when they
	// can be. GPUs without it are each their own domain.
	LabelNVLinkDomain = "nvidia.com/gpu.clique"
	// LabelMIG on a GPU, set to "true", makes it a MIG GPU: it serves only
	// MIG-profile requests, in slices.
	LabelMIG = "nvidia.com/mig.enabled"
)

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
//
// A fraction may instead be sized by GPU memory and compute: NumGPU == 1 with
// GPUMemoryMiB and/or GPUCoresPct takes, on the chosen GPU, the larger of
// GPUCoresPct × 10 milli and GPUMemoryMiB's share of the GPU's memory
// (rounded up; a whole GPU if that reaches 1000). Such a request needs GPUs
// whose MemoryMiB is known.
//
// MIGProfile, e.g. "1g.10gb" or "3g.40gb" (the 40 GB names and a
// "nvidia.com/mig-" prefix are accepted), asks for one MIG slice of a GPU in
// MIG mode; NumGPU is then taken as 1 and GPUMilli is ignored.
//
// MinGPUMemoryMiB and MinComputeCapability ("8.0") restrict the GPUs, as
// Models does.
type Request struct {
	CPUMilli  int64
	MemoryMiB int64
	NumGPU    int
	GPUMilli  int64
	Models    []string

	GPUMemoryMiB         int64
	GPUCoresPct          int64
	MIGProfile           string
	MinGPUMemoryMiB      int64
	MinComputeCapability string
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
// 0 for CPU-only requests). For a MIG slice it is the slice's memory share;
// for a memory-sized fraction, whose share depends on the GPU, it is the
// cores share alone (a lower bound).
func (r Request) MilliPerGPUOf() int64 {
	if r.MIGProfile != "" {
		if id, err := lookupMIG(r.MIGProfile); err == nil {
			return int64(MIGProfiles[id-1].Memory) * migMilliPerSlice
		}
		return 0
	}
	if r.NumGPU <= 0 {
		return 0
	}
	if r.GPUMilli == 0 && (r.GPUMemoryMiB > 0 || r.GPUCoresPct > 0) {
		return min(max(r.GPUCoresPct*MilliPerGPU/100, 1), MilliPerGPU)
	}
	if r.GPUMilli <= 0 || r.GPUMilli > MilliPerGPU {
		return MilliPerGPU
	}
	return r.GPUMilli
}

// TotalGPUMilli is the request's GPU demand summed over its GPUs.
func (r Request) TotalGPUMilli() int64 {
	if r.MIGProfile != "" {
		return r.MilliPerGPUOf()
	}
	return r.MilliPerGPUOf() * int64(max(r.NumGPU, 0))
}

// Decision is where a request goes.
type Decision struct {
	// Node is the index of the node in the [Cluster].
	Node int
	// GPUs are the device indices on that node; empty for CPU-only requests.
	GPUs []int
	// MilliPerGPU is taken from each GPU in GPUs. For a MIG slice it is the
	// slice's memory share (125 per eighth).
	MilliPerGPU int64
	// MIGStart is the memory-slice offset (0-7) of a MIG slice on GPUs[0].
	MIGStart int
}
