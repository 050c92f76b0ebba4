package allocator

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// gpuClass is what a request's GPU constraints can tell apart: GPUs of one
// class are interchangeable for eligibility. Class ids index [classSet]s;
// id 0 ([noModel]) is "no GPU". A cluster may hold any number of classes.
type gpuClass struct {
	model  string
	memMiB int64
	cc     int // compute capability ×10 (8.0 → 80); 0 unknown
	mig    bool
}

// classID is a [gpuClass]'s index in Cluster.classes.
type classID uint32

// classSet is a set of class ids, a bit per id. nil accepts any GPU that is
// not in MIG mode (no restriction); a non-nil set accepts its members only.
// Sets are interned per cluster ([Cluster.intern]) and never modified.
type classSet []uint64

// has reports whether the set accepts class id.
func (m classSet) has(id classID) bool {
	if m == nil {
		return true
	}
	w := int(id >> 6)
	return w < len(m) && m[w]&(1<<(id&63)) != 0
}

// classID returns the id of class k, adding it.
func (c *Cluster) classID(k gpuClass) classID {
	if id, ok := c.classIDs[k]; ok {
		return id
	}
	id := classID(len(c.classes))
	c.classes = append(c.classes, k)
	c.classIDs[k] = id
	if k.mig {
		c.hasMIG = true
	}
	return id
}

// intern returns the cluster's copy of the set in words and its id (>= 1;
// 0 is the nil set). Looking up a known set does not allocate.
func (c *Cluster) intern(words []uint64) (classSet, int32) {
	c.keyBuf = c.keyBuf[:0]
	for _, w := range words {
		c.keyBuf = binary.LittleEndian.AppendUint64(c.keyBuf, w)
	}
	if id, ok := c.setIDs[string(c.keyBuf)]; ok {
		return c.sets[id], id
	}
	if c.setIDs == nil {
		c.setIDs = map[string]int32{}
		c.sets = []classSet{nil}
	}
	id := int32(len(c.sets))
	c.sets = append(c.sets, append(classSet(make([]uint64, 0, len(words))), words...))
	c.setIDs[string(c.keyBuf)] = id
	return c.sets[id], id
}

// words returns a zeroed scratch bit set wide enough for every class.
func (c *Cluster) words() []uint64 {
	n := (len(c.classes) + 63) / 64
	c.scratch = append(c.scratch[:0], make([]uint64, n)...)
	return c.scratch
}

// requestMask is the set of classes q may use: its models, memory and
// compute-capability minimums, and MIG GPUs for MIG requests only, with its
// interned id. It returns nil, 0 (any GPU, the fast path) when nothing
// restricts.
func (c *Cluster) requestMask(q Request, mig bool) (classSet, int32, error) {
	minCC := 0
	if q.MinComputeCapability != "" {
		v, err := parseCC(q.MinComputeCapability)
		if err != nil {
			return nil, 0, err
		}
		minCC = v
	}
	if len(q.Models) == 0 && q.MinGPUMemoryMiB <= 0 && minCC == 0 && !mig && !c.hasMIG {
		return nil, 0, nil
	}
	w := c.words()
	for id := 1; id < len(c.classes); id++ {
		k := &c.classes[id]
		if k.memMiB < q.MinGPUMemoryMiB || k.cc < minCC || k.mig != mig {
			continue
		}
		if len(q.Models) > 0 && !slices.Contains(q.Models, k.model) {
			continue
		}
		w[id>>6] |= 1 << (id & 63)
	}
	m, id := c.intern(w)
	return m, id, nil
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
