package jobs

import "github.com/gpud/gpud/pkg/allocator"

// podsFit counts the pods of d that fit on node i at once, up to limit.
func (c *cluster) podsFit(i int, d *demand, limit int) int {
	f, inf := &c.free[i], &c.info[i]
	n := limit
	if d.cpu > 0 {
		n = min(n, int(f.cpu/d.cpu))
	}
	if d.mem > 0 {
		n = min(n, int(f.mem/d.mem))
	}
	if n <= 0 {
		return 0
	}
	k := 0
	switch d.kind {
	case kindCPU:
		return n
	case kindWhole:
		if d.models == 0 {
			k = f.wholeFree / d.num
			break
		}
		for g, s := range inf.gpus {
			if s.healthy && !s.mig && d.models.has(s.model) && f.gpus[g].milli == allocator.MilliPerGPU {
				k++
			}
		}
		k /= d.num
	case kindFrac:
		if d.models == 0 && f.milliFree < d.milli {
			return 0
		}
		for g, s := range inf.gpus {
			if !s.healthy || s.mig || !d.models.has(s.model) {
				continue
			}
			gf := f.gpus[g]
			per := int64(n) // a memory-sized fraction takes no milli
			if d.milli > 0 {
				per = gf.milli / d.milli
			}
			if need := d.fracMem(s.memMiB); need > 0 {
				per = min(per, gf.mem/need)
			} else if d.gmem > 0 {
				per = 0
			}
			k += int(per)
			if k >= n {
				return n
			}
		}
	case kindMIG:
		for g, s := range inf.gpus {
			if !s.healthy || !s.mig || !d.models.has(s.model) {
				continue
			}
			used, comp := f.gpus[g].migUsed, f.gpus[g].migCompute
			for {
				st := migFit(d.mig, used, comp)
				if st < 0 {
					break
				}
				used |= d.mig.Mask(st)
				comp += d.mig.Compute
				k++
				if k >= n {
					return n
				}
			}
		}
	}
	return min(n, k)
}

// choose picks GPUs for one pod of d on node i, or reports false.
func (c *cluster) choose(i int, d *demand) (PodPlacement, bool) {
	f, inf := &c.free[i], &c.info[i]
	p := PodPlacement{Node: i, NodeName: inf.name, MIGStart: -1}
	if f.cpu < d.cpu || f.mem < d.mem {
		return p, false
	}
	switch d.kind {
	case kindCPU:
		return p, true
	case kindWhole:
		for g, s := range inf.gpus {
			if s.healthy && !s.mig && d.models.has(s.model) && f.gpus[g].milli == allocator.MilliPerGPU {
				p.GPUs = append(p.GPUs, g)
				if len(p.GPUs) == 1 || s.memMiB < p.MemoryMiBPerGPU {
					p.MemoryMiBPerGPU = s.memMiB
				}
				if len(p.GPUs) == d.num {
					p.MilliPerGPU = allocator.MilliPerGPU
					return p, true
				}
			}
		}
	case kindFrac:
		best, bestMilli := -1, int64(0)
		for g, s := range inf.gpus {
			if !s.healthy || s.mig || !d.models.has(s.model) {
				continue
			}
			gf := f.gpus[g]
			need := d.fracMem(s.memMiB)
			if gf.milli < d.milli || gf.mem < need || (d.gmem > 0 && s.memMiB == 0) {
				continue
			}
			if best < 0 || gf.milli < bestMilli {
				best, bestMilli = g, gf.milli
				p.MemoryMiBPerGPU = need
			}
		}
		if best >= 0 {
			p.GPUs, p.MilliPerGPU = []int{best}, d.milli
			return p, true
		}
	case kindMIG:
		best, bestComp, bestStart := -1, -1, -1
		for g, s := range inf.gpus {
			if !s.healthy || !s.mig || !d.models.has(s.model) {
				continue
			}
			gf := f.gpus[g]
			if st := migFit(d.mig, gf.migUsed, gf.migCompute); st >= 0 && gf.migCompute > bestComp {
				best, bestComp, bestStart = g, gf.migCompute, st
			}
		}
		if best >= 0 {
			p.GPUs, p.MIGStart = []int{best}, bestStart
			p.MemoryMiBPerGPU = inf.gpus[best].memMiB * int64(d.mig.Memory) / migMemorySlices
			return p, true
		}
	}
	return p, false
}

// bind takes p's resources; p must come from choose on the current state.
func (c *cluster) bind(p *PodPlacement, d *demand) {
	f, inf := &c.free[p.Node], &c.info[p.Node]
	f.cpu -= d.cpu
	f.mem -= d.mem
	f.pods++
	for _, g := range p.GPUs {
		gf := &f.gpus[g]
		if d.kind == kindMIG {
			gf.migUsed |= d.mig.Mask(p.MIGStart)
			gf.migCompute += d.mig.Compute
			continue
		}
		healthy := inf.gpus[g].healthy // the counters count healthy GPUs only
		if gf.milli == allocator.MilliPerGPU && healthy {
			f.wholeFree--
		}
		gf.milli -= p.MilliPerGPU
		gf.mem -= takenMem(p, d, inf.gpus[g].memMiB)
		if healthy {
			f.milliFree -= p.MilliPerGPU
		}
	}
}

// unbind returns what bind took.
func (c *cluster) unbind(p *PodPlacement, d *demand) {
	f, inf := &c.free[p.Node], &c.info[p.Node]
	f.cpu += d.cpu
	f.mem += d.mem
	f.pods--
	for _, g := range p.GPUs {
		gf := &f.gpus[g]
		if d.kind == kindMIG {
			gf.migUsed &^= d.mig.Mask(p.MIGStart)
			gf.migCompute -= d.mig.Compute
			continue
		}
		gf.milli += p.MilliPerGPU
		gf.mem += takenMem(p, d, inf.gpus[g].memMiB)
		if inf.gpus[g].healthy { // a job leaving a failed GPU frees nothing usable
			f.milliFree += p.MilliPerGPU
			if gf.milli == allocator.MilliPerGPU {
				f.wholeFree++
			}
		}
	}
}

// usage is what placement p of d counts against quotas, and the model it
// charges (-1 for CPU-only pods).
func (c *cluster) usage(p *PodPlacement, d *demand) (Resources, int) {
	r := Resources{CPUMilli: d.cpu, MemoryMiB: d.mem}
	model := -1
	for _, g := range p.GPUs {
		model = c.info[p.Node].gpus[g].model
		r.GPUMemoryMiB += takenMem(p, d, c.info[p.Node].gpus[g].memMiB)
		if d.kind == kindMIG {
			r.MIGSlices += int64(d.mig.Compute)
		} else {
			r.GPUMilli += p.MilliPerGPU
		}
	}
	return r, model
}

// score ranks node i for one pod of d: lower packs tighter. Whole and
// fractional pods go where the least GPU capacity stays free, MIG pods to
// the busiest MIG GPUs, CPU-only pods away from GPU nodes.
func (c *cluster) score(i int, d *demand) int64 {
	f := &c.free[i]
	switch d.kind {
	case kindCPU:
		return int64(len(c.info[i].gpus))<<40 | f.cpu
	case kindMIG:
		var free int64
		for g, s := range c.info[i].gpus {
			if s.mig && s.healthy {
				free += int64(MIGSlicesPerGPU - f.gpus[g].migCompute)
			}
		}
		return free
	}
	return f.milliFree
}

// takenMem is the GPU memory p takes on a GPU of memMiB: all of it for a
// whole GPU, the placement's share otherwise.
func takenMem(p *PodPlacement, d *demand, memMiB int64) int64 {
	if d.kind == kindWhole {
		return memMiB
	}
	return p.MemoryMiBPerGPU
}
