package allocator

import (
	"fmt"
	"slices"
)

// fit checks node s against r (already sized with [atNode] or
// [Allocator.variant]) and returns
// "" or the failing reason.
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
	if r.mig != 0 {
		return migFit(s, r)
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

func migFit(s *nodeState, r *request) string {
	p := &MIGProfiles[r.mig-1]
	access := false
	for g := range s.gpuFree {
		if !accessible(r.mask, s.gpuModel[g]) {
			continue
		}
		access = true
		if s.usable[g] && migStart(s, g, p) >= 0 {
			return ""
		}
	}
	if !access {
		return ReasonModel
	}
	return ReasonMIG
}

// resolve normalizes req for node d.Node.
func (c *Cluster) resolve(d Decision, req Request, op string) (*nodeState, request, error) {
	r, err := c.normalize(req)
	if err != nil {
		return nil, r, fmt.Errorf("%s: %w", op, err)
	}
	if d.Node < 0 || d.Node >= len(c.state) {
		return nil, r, fmt.Errorf("%s: node %d of %d: %w", op, d.Node, len(c.state), ErrInvalid)
	}
	s := &c.state[d.Node]
	if len(d.GPUs) != r.num {
		return nil, r, fmt.Errorf("%s %+v on %q: %d GPUs for %d: %w", op, req, s.spec.Name, len(d.GPUs), r.num, ErrInvalid)
	}
	for i, g := range d.GPUs {
		if g < 0 || g >= len(s.gpuFree) || slices.Contains(d.GPUs[:i], g) {
			return nil, r, fmt.Errorf("%s %+v on %q: gpu %d: %w", op, req, s.spec.Name, g, ErrInvalid)
		}
	}
	if r.gmem > 0 {
		// A memory-sized fraction takes its share of its own GPU's memory.
		var ok bool
		if r, ok = atGPU(s, &r, d.GPUs[0]); !ok {
			return nil, r, fmt.Errorf("%s %+v on %q gpu %d: GPU memory unknown: %w", op, req, s.spec.Name, d.GPUs[0], ErrNoFit)
		}
	}
	if r.mig != 0 && (d.MIGStart < 0 || d.MIGStart >= MIGMemorySlices) {
		return nil, r, fmt.Errorf("%s %+v on %q: MIG start %d: %w", op, req, s.spec.Name, d.MIGStart, ErrInvalid)
	}
	return s, r, nil
}

// Bind takes d's resources for req from the cluster.
func (c *Cluster) Bind(d Decision, req Request) error {
	s, r, err := c.resolve(d, req, "bind")
	if err != nil {
		return err
	}
	if s.cpuFree < r.cpu || s.memFree < r.mem {
		return fmt.Errorf("bind %+v on %q: %w", req, s.spec.Name, ErrNoFit)
	}
	for _, g := range d.GPUs {
		if !s.usable[g] || s.gpuFree[g] < r.milli || !accessible(r.mask, s.gpuModel[g]) {
			return fmt.Errorf("bind %+v on %q gpu %d: %w", req, s.spec.Name, g, ErrNoFit)
		}
	}
	if r.mig != 0 {
		g, p := d.GPUs[0], &MIGProfiles[r.mig-1]
		if !slices.Contains(p.Starts, d.MIGStart) || s.migUsed[g]&p.Mask(d.MIGStart) != 0 ||
			int(s.migCompute[g])+p.Compute > MIGComputeSlices {
			return fmt.Errorf("bind %s at slice %d on %q gpu %d: %w", p.Name, d.MIGStart, s.spec.Name, g, ErrNoFit)
		}
		s.migUsed[g] |= p.Mask(d.MIGStart)
		s.migCompute[g] += uint8(p.Compute)
	}
	s.cpuFree -= r.cpu
	s.memFree -= r.mem
	c.memFree[d.Node] = s.memFree
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
	c.versions[d.Node]++
	return nil
}

// Unbind returns what [Cluster.Bind] took for the same d and req.
func (c *Cluster) Unbind(d Decision, req Request) error {
	s, r, err := c.resolve(d, req, "unbind")
	if err != nil {
		return err
	}
	for _, g := range d.GPUs {
		if s.gpuFree[g]+r.milli > MilliPerGPU {
			return fmt.Errorf("unbind %+v on %q gpu %d: more than bound: %w", req, s.spec.Name, g, ErrInvalid)
		}
	}
	if r.mig != 0 {
		g, p := d.GPUs[0], &MIGProfiles[r.mig-1]
		b := p.Mask(d.MIGStart)
		if s.migUsed[g]&b != b || int(s.migCompute[g]) < p.Compute {
			return fmt.Errorf("unbind %s at slice %d on %q gpu %d: not bound: %w", p.Name, d.MIGStart, s.spec.Name, g, ErrInvalid)
		}
		s.migUsed[g] &^= b
		s.migCompute[g] -= uint8(p.Compute)
	}
	s.cpuFree += r.cpu
	s.memFree += r.mem
	c.memFree[d.Node] = s.memFree
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
	c.versions[d.Node]++
	return nil
}
