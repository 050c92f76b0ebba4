package allocator

import (
	"fmt"
	"strconv"
	"strings"
)

// gpuClass is what a request's GPU constraints can tell apart: GPUs of one
// class are interchangeable for eligibility. Class ids (1..63) index bit
// sets; id 0 ([noModel]) is "no GPU".
type gpuClass struct {
	model  string
	memMiB int64
	cc     int // compute capability ×10 (8.0 → 80); 0 unknown
	mig    bool
}

// classID returns the id of class k, adding it.
func (c *Cluster) classID(k gpuClass) (uint8, error) {
	if id, ok := c.classIDs[k]; ok {
		return id, nil
	}
	if len(c.classes) >= 63 {
		return 0, fmt.Errorf("more than 62 kinds of GPU (model, memory, compute capability, MIG mode): %w", ErrInvalid)
	}
	id := uint8(len(c.classes))
	c.classes = append(c.classes, k)
	c.classIDs[k] = id
	if k.mig {
		c.migClasses |= 1 << id
	}
	return id, nil
}

// constrained is the sentinel bit of a mask that restricts GPUs; a mask of
// 0 accepts any non-MIG GPU.
const constrained = uint64(1) << 63

// modelMask turns a model list into a bit set of known class ids; 0 means any
// model. A list naming only unknown models gives a mask no GPU matches.
func (c *Cluster) modelMask(models []string) uint64 {
	if len(models) == 0 {
		return 0
	}
	m := constrained
	for id := 1; id < len(c.classes); id++ {
		for _, name := range models {
			if c.classes[id].model == name {
				m |= 1 << id
			}
		}
	}
	return m
}

// requestMask is the set of classes q may use: its models, memory and
// compute-capability minimums, and MIG GPUs for MIG requests only. It
// returns 0 (any GPU, the fast path) when nothing restricts.
func (c *Cluster) requestMask(q Request, mig bool) (uint64, error) {
	minCC := 0
	if q.MinComputeCapability != "" {
		v, err := parseCC(q.MinComputeCapability)
		if err != nil {
			return 0, err
		}
		minCC = v
	}
	m := c.modelMask(q.Models)
	if m == 0 && q.MinGPUMemoryMiB <= 0 && minCC == 0 && !mig && c.migClasses == 0 {
		return 0, nil
	}
	if m == 0 {
		m = ^uint64(0)
	}
	out := constrained
	for id := 1; id < len(c.classes); id++ {
		k := c.classes[id]
		if m&(1<<id) != 0 && k.memMiB >= q.MinGPUMemoryMiB && k.cc >= minCC && k.mig == mig {
			out |= 1 << id
		}
	}
	return out, nil
}

// parseCC turns "8.0" or "9" into 80 or 90.
func parseCC(s string) (int, error) {
	major, minor, _ := strings.Cut(strings.TrimSpace(s), ".")
	ma, err := strconv.Atoi(major)
	if err != nil || ma < 0 {
		return 0, fmt.Errorf("compute capability %q (want major.minor, e.g. 8.0): %w", s, ErrInvalid)
	}
	mi := 0
	if minor != "" {
		if mi, err = strconv.Atoi(minor); err != nil || mi < 0 || mi > 9 {
			return 0, fmt.Errorf("compute capability %q (want major.minor, e.g. 8.0): %w", s, ErrInvalid)
		}
	}
	return ma*10 + mi, nil
}
