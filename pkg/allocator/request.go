package allocator

import "fmt"

// request is a normalized [Request].
type request struct {
	cpu, mem int64
	num      int
	milli    int64 // per GPU
	total    int64
	mask     classSet
	maskID   int32 // mask's interned id; 0 for nil
	tag      int   // GpuClustering affinity tag: 0 share, k whole k GPUs
	gmem     int64 // GPU memory (MiB) of a memory-sized fraction; milli is then per node
	mig      int8  // MIG profile index + 1; 0 for none
	key      reqKey
}

// reqKey identifies requests that score alike on the same node state.
type reqKey struct {
	cpu   int64
	num   int
	milli int64
	mask  int32 // interned class set id
	gmem  int64
	mig   int8
}

func (c *Cluster) normalize(q Request) (request, error) {
	r := request{cpu: q.CPUMilli, mem: q.MemoryMiB, num: max(q.NumGPU, 0)}
	if q.CPUMilli < 0 || q.MemoryMiB < 0 || q.GPUMemoryMiB < 0 || q.GPUCoresPct < 0 || q.GPUCoresPct > 100 {
		return r, fmt.Errorf("request %+v: negative resource or cores outside 0-100%%: %w", q, ErrInvalid)
	}
	mig := q.MIGProfile != ""
	switch {
	case mig:
		id, err := lookupMIG(q.MIGProfile)
		if err != nil {
			return r, err
		}
		r.mig, r.num = id, 1
		r.milli = int64(MIGProfiles[id-1].Memory) * migMilliPerSlice
	case r.num > 0 && q.GPUMilli == 0 && (q.GPUMemoryMiB > 0 || q.GPUCoresPct > 0):
		if r.num != 1 {
			return r, fmt.Errorf("request %+v: a memory/cores fraction is of one GPU, not %d: %w", q, r.num, ErrInvalid)
		}
		r.gmem = q.GPUMemoryMiB
		r.milli = max(q.GPUCoresPct*MilliPerGPU/100, 1)
	default:
		r.milli = Request{NumGPU: r.num, GPUMilli: q.GPUMilli}.MilliPerGPUOf()
	}
	r.total = r.milli * int64(r.num)
	if r.num > 0 {
		m, id, err := c.requestMask(q, mig)
		if err != nil {
			return r, err
		}
		r.mask, r.maskID = m, id
		if r.milli < MilliPerGPU {
			r.tag = 0
		} else {
			r.tag = min(r.num, maxAffinity-1)
		}
	}
	r.key = reqKey{cpu: r.cpu, num: r.num, milli: r.milli, mask: r.maskID, gmem: r.gmem, mig: r.mig}
	return r, nil
}

// atNode returns r as it applies to node s when every GPU of s has the
// same known memory ([nodeState.memUniform]): a memory-sized fraction takes
// the larger of its cores share and its memory's share of that memory. ok
// is false on any other node; [Allocator.variant] sizes r there, per GPU
// memory.
func atNode(s *nodeState, r *request) (request, bool) {
	if r.gmem == 0 {
		return *r, true
	}
	if !s.memUniform {
		return *r, false
	}
	return atMem(r, s.gpuMemMin), true
}

// atMem sizes memory-sized fraction r against a GPU of memMiB (> 0).
func atMem(r *request, memMiB int64) request {
	out := *r
	out.milli = max(r.milli, (r.gmem*MilliPerGPU+memMiB-1)/memMiB)
	if out.milli >= MilliPerGPU {
		out.milli, out.tag = MilliPerGPU, 1
	}
	out.total = out.milli
	return out
}

// atGPU sizes r for GPU g of s, as [Cluster.Bind] takes it; ok is false if
// r is memory-sized and g's memory is unknown.
func atGPU(s *nodeState, r *request, g int) (request, bool) {
	if r.gmem == 0 {
		return *r, true
	}
	m := s.spec.GPUs[g].MemoryMiB
	if m <= 0 {
		return *r, false
	}
	return atMem(r, m), true
}
