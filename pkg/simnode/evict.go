package simnode

import (
	"sort"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// maxEvictions bounds the evictions a node remembers (the oldest go).
const maxEvictions = 1024

// Eviction is a process the driver killed to make room on a GPU under
// memory pressure (see [Device.makeRoomLocked]).
type Eviction struct {
	// GPU is the GPU's index, PID the process killed and Bytes what it
	// held there.
	GPU   int
	PID   uint32
	Bytes uint64
	// Cgroup is the cgroup whose soft limit the process was above (the
	// innermost one with limits on the GPU, else the process's own);
	// SoftBytes that limit (0: none set, nothing guaranteed) and UsedBytes
	// what the cgroup held on the GPU before the eviction.
	Cgroup    string
	SoftBytes uint64
	UsedBytes uint64
	// ForPID is the process whose allocation, within its own soft limit,
	// needed the room.
	ForPID uint32
}

// Evictions returns the processes the simulated driver evicted, oldest
// first (the last 1024).
func (n *Node) Evictions() []Eviction {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]Eviction(nil), n.evictions...)
}

// protectionLocked is what guarantees memory to a process in cgroup: the
// innermost cgroup at or above it with limits on the GPU, and its soft
// limit. ok is false when none has limits: the process is guaranteed
// nothing (the dmem controller's dmem.min defaults to 0).
func (d *Device) protectionLocked(cgroup string) (ns string, soft uint64, ok bool) {
	for cand, l := range d.memLimits {
		if inCgroup(cgroup, cand) && len(cand) > len(ns) {
			ns, soft, ok = cand, l.soft, true
		}
	}
	return ns, soft, ok
}

// makeRoomLocked is the driver's answer to an allocation of bytes by
// process pid in cgroup that does not fit in the GPU's free memory, with
// per-cgroup limits on (r615 "MPS v3 memory partitioning"): the soft limit
// is guaranteed, and a client above its own soft limit is "borrowing from
// others' share; under real contention MPS may evict/kill you". So when
// the allocation keeps pid's cgroup within its soft limit, processes of
// cgroups above theirs are killed until the allocation fits: the cgroup
// furthest above its soft limit first, its largest process first, and
// none once its cgroup is back within its soft limit. A cgroup without
// limits is guaranteed nothing (its own processes count, not its
// children's, which are judged on their own); a process in no cgroup is
// outside the model and never evicted. It reports whether the room was made; when it
// cannot be (the requester borrows too, or the borrowers do not hold
// enough), nothing is evicted and the allocation fails with ERROR_MEMORY
// as before.
func (d *Device) makeRoomLocked(pid uint32, cgroup string, bytes, free uint64) bool {
	if cgroup == "" || bytes <= free || d.memoryLimitsCallLocked("/") != nvml.SUCCESS {
		return false
	}
	ns, soft, ok := d.protectionLocked(cgroup)
	if !ok || d.cgroupUsedLocked(ns)+bytes > soft {
		return false // not guaranteed: a borrower does not evict
	}
	type group struct {
		soft, used uint64
		pids       []uint32
	}
	groups := map[string]*group{}
	for q, p := range d.procs {
		if q == pid || p.cgroup == "" || p.gi >= 0 {
			continue
		}
		key, qsoft, limited := d.protectionLocked(p.cgroup)
		if !limited {
			key = p.cgroup
		}
		if key == ns {
			continue // the requester's own cgroup is within its guarantee
		}
		g := groups[key]
		if g == nil {
			g = &group{soft: qsoft, used: d.cgroupUsedLocked(key)}
			if !limited {
				g.used = d.ownUsedLocked(key)
			}
			groups[key] = g
		}
		g.pids = append(g.pids, q)
	}
	keys := make([]string, 0, len(groups))
	for k, g := range groups {
		sort.Slice(g.pids, func(i, j int) bool {
			a, b := d.procs[g.pids[i]].memBytes, d.procs[g.pids[j]].memBytes
			return a > b || (a == b && g.pids[i] < g.pids[j])
		})
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var plan []Eviction
	need := bytes - free
	for need > 0 {
		best := ""
		var bestExcess uint64
		for _, k := range keys {
			g := groups[k]
			if len(g.pids) == 0 || g.used <= g.soft {
				continue
			}
			if e := g.used - g.soft; e > bestExcess {
				best, bestExcess = k, e
			}
		}
		if best == "" {
			return false // the borrowers do not hold enough
		}
		g := groups[best]
		q := g.pids[0]
		g.pids = g.pids[1:]
		mem := d.procs[q].memBytes
		plan = append(plan, Eviction{GPU: d.index, PID: q, Bytes: mem, Cgroup: best, SoftBytes: g.soft, UsedBytes: g.used, ForPID: pid})
		g.used -= mem
		need -= min(need, mem)
	}
	for _, e := range plan {
		delete(d.procs, e.PID)
	}
	n := d.node
	n.evictions = append(n.evictions, plan...)
	if over := len(n.evictions) - maxEvictions; over > 0 {
		n.evictions = append([]Eviction(nil), n.evictions[over:]...)
	}
	return true
}

// ownUsedLocked is the memory held by the processes in cgroup itself (not
// below it): an unlimited cgroup's use, apart from its children's.
func (d *Device) ownUsedLocked(cgroup string) uint64 {
	var used uint64
	for _, p := range d.procs {
		if p.cgroup == cgroup {
			used += p.memBytes
		}
	}
	return used
}
