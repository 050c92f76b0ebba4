package enforce

import (
	"github.com/gpud/gpud/pkg/memlimit"
)

// LimitSampler polls what containers with limits use of their GPUs
// (*memlimit.Manager). A [Config.MemoryLimits] that is one also has its
// borrowers' evictions watched.
type LimitSampler interface {
	Sample(cgroups map[string][]string) []memlimit.Sample
}

var _ LimitSampler = (*memlimit.Manager)(nil)

// watchEvictions polls, once per Reconcile, every GPU on which containers
// have driver limits: its memory and each such container's use
// (GetMemoryLimits_v1). A container that was above its soft limit at the
// last poll and holds less now, while the rest of its GPU grew by more
// than was free, was evicted by the driver under memory pressure
// ([memlimit.Evicted]): the driver sends no event, and the killed process
// is simply gone. Each eviction is logged, counted
// (gpud_memory_borrower_evictions_total) and told to the Events on the
// container's pod. It runs before containers that went are released, so a
// borrower whose container ended with its process reads as 0 used.
// Called with e.mu held.
func (e *Enforcer) watchEvictions() {
	s, ok := e.cfg.MemoryLimits.(LimitSampler)
	if !ok {
		return
	}
	cgroups := map[string][]string{}
	owners := map[string]limitsOwner{}
	for rel, t := range e.tracked {
		for _, uuid := range t.limits {
			cgroups[uuid] = append(cgroups[uuid], rel)
			owners[rel] = t.owner
		}
	}
	if len(cgroups) == 0 {
		e.lastUse = nil
		return
	}
	next := map[string]memlimit.Sample{}
	for _, cur := range s.Sample(cgroups) {
		next[cur.GPUUUID] = cur
		prev, ok := e.lastUse[cur.GPUUUID]
		if !ok {
			continue
		}
		for _, ev := range memlimit.Evicted(prev, cur) {
			o := owners[ev.Cgroup]
			e.cfg.Metrics.observeEviction()
			e.log.Warn("gpu memory borrower evicted under memory pressure",
				"cgroup", ev.Cgroup, "container", o.String(), "gpu_uuid", ev.GPUUUID, "soft_bytes", ev.SoftBytes,
				"before_bytes", ev.BeforeBytes, "after_bytes", ev.AfterBytes, "others_grew_bytes", ev.OthersGrewBytes, "free_bytes_before", ev.FreeBytesBefore)
			if e.cfg.Events != nil {
				e.cfg.Events.MemoryBorrowerEvicted(o.namespace, o.pod, o.podUID, o.container, ev.GPUUUID, ev.SoftBytes, ev.BeforeBytes, ev.AfterBytes)
			}
		}
	}
	e.lastUse = next
}
