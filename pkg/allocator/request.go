package allocator

// request is a normalized [Request].
type request struct {
	cpu, mem int64
	num      int
	milli    int64 // per GPU
	total    int64
	mask     uint64
	tag      int // GpuClustering affinity tag: 0 share, k whole k GPUs
	key      reqKey
}

// reqKey identifies requests that score alike on the same node state.
type reqKey struct {
	cpu   int64
	num   int
	milli int64
	mask  uint64
}

func (c *Cluster) normalize(q Request) request {
	r := request{cpu: q.CPUMilli, mem: q.MemoryMiB, num: q.NumGPU}
	if r.num < 0 {
		r.num = 0
	}
	r.milli = Request{NumGPU: r.num, GPUMilli: q.GPUMilli}.MilliPerGPUOf()
	r.total = r.milli * int64(r.num)
	if r.num > 0 {
		r.mask = c.modelMask(q.Models)
		if r.milli < MilliPerGPU {
			r.tag = 0
		} else {
			r.tag = min(r.num, maxAffinity-1)
		}
	}
	r.key = reqKey{cpu: r.cpu, num: r.num, milli: r.milli, mask: r.mask}
	return r
}
