package memlimit

import (
	"sort"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// The driver reports no event when it evicts a borrower: a container above
// its soft limit is "borrowing from others' share; under real contention
// MPS may evict/kill you" (r615 MPS v3 memory partitioning), and the
// killed client's memory is simply gone. The agent sees it the one way the
// driver documents: GetMemoryLimits_v1's currentUsed of the container's
// cgroup (and GetMemoryInfo of the GPU), polled. [Evicted] compares two
// polls.

// CgroupUse is one container's use of one GPU against its soft limit, as
// GetMemoryLimits_v1 reports it; a cgroup that is gone uses 0.
type CgroupUse struct {
	UsedBytes, SoftBytes uint64
}

// Sample is one poll of one GPU: its memory as GetMemoryInfo reports it,
// and the use of each limited container's cgroup on it (by the cgroup's
// path as given to [Manager.Sample]).
type Sample struct {
	GPUUUID              string
	UsedBytes, FreeBytes uint64
	Cgroups              map[string]CgroupUse
}

// Eviction is a container that lost memory it borrowed while the GPU was
// under pressure: the driver evicted it (or it freed that memory just as
// others needed more than was free; the two look the same to NVML).
type Eviction struct {
	GPUUUID, Cgroup string
	// SoftBytes is its soft limit; BeforeBytes what it held at the poll
	// before (above SoftBytes) and AfterBytes now.
	SoftBytes, BeforeBytes, AfterBytes uint64
	// OthersGrewBytes is how much more the rest of the GPU held, more than
	// the FreeBytesBefore that were free.
	OthersGrewBytes, FreeBytesBefore uint64
}

// Evicted compares two polls of one GPU and returns the borrowers the
// driver evicted between them, sorted by cgroup: containers that were
// above their soft limit at prev and hold less at cur, while the rest of
// the GPU grew by more than was free at prev (memory pressure: the room
// had to come from someone, and the driver takes it from borrowers first).
// Cgroups missing from cur are not judged; one that is gone must be in cur
// with 0 used.
func Evicted(prev, cur Sample) []Eviction {
	if prev.GPUUUID != cur.GPUUUID {
		return nil
	}
	var dropped []string
	var before, after uint64
	for cg, p := range prev.Cgroups {
		c, ok := cur.Cgroups[cg]
		if !ok || p.UsedBytes <= p.SoftBytes || c.UsedBytes >= p.UsedBytes {
			continue
		}
		dropped = append(dropped, cg)
		before += p.UsedBytes
		after += c.UsedBytes
	}
	if len(dropped) == 0 || prev.UsedBytes < before || cur.UsedBytes < after {
		return nil
	}
	othersBefore, othersNow := prev.UsedBytes-before, cur.UsedBytes-after
	if othersNow <= othersBefore || othersNow-othersBefore <= prev.FreeBytes {
		return nil // no pressure: what the others took was free
	}
	sort.Strings(dropped)
	out := make([]Eviction, 0, len(dropped))
	for _, cg := range dropped {
		p, c := prev.Cgroups[cg], cur.Cgroups[cg]
		out = append(out, Eviction{
			GPUUUID: cur.GPUUUID, Cgroup: cg, SoftBytes: p.SoftBytes, BeforeBytes: p.UsedBytes, AfterBytes: c.UsedBytes,
			OthersGrewBytes: othersNow - othersBefore, FreeBytesBefore: prev.FreeBytes,
		})
	}
	return out
}

// Sample polls the GPUs in [ModeDriver] of cgroups (GPU UUID → container
// cgroups, as given to [Manager.Set]): each GPU's memory, and each
// cgroup's use and soft limit there. A cgroup that is gone
// (ERROR_OPERATING_SYSTEM) uses 0; one without limits on the GPU
// (ERROR_NOT_FOUND) or that the driver does not answer for is left out,
// and so is a GPU whose memory the driver does not report. Results are
// sorted by UUID.
func (m *Manager) Sample(cgroups map[string][]string) []Sample {
	var out []Sample
	for uuid, cgs := range cgroups {
		g, ok := m.gpus[uuid]
		if !ok || g.mode != ModeDriver {
			continue
		}
		mem, ret := g.dev.GetMemoryInfo()
		if ret != nvml.SUCCESS {
			continue
		}
		s := Sample{GPUUUID: uuid, UsedBytes: mem.Used, FreeBytes: mem.Free, Cgroups: map[string]CgroupUse{}}
		for _, cg := range cgs {
			l, ret := g.dev.GetMemoryLimits_v1(m.namespace(cg))
			switch ret {
			case nvml.SUCCESS:
				s.Cgroups[cg] = CgroupUse{UsedBytes: l.CurrentUsed, SoftBytes: l.SoftLimit}
			case nvml.ERROR_OPERATING_SYSTEM:
				s.Cgroups[cg] = CgroupUse{}
			}
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GPUUUID < out[j].GPUUUID })
	return out
}
