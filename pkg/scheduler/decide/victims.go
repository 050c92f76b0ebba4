package decide

import (
	"slices"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpud/gpud/pkg/allocator/jobs"
	"github.com/gpud/gpud/pkg/scheduler/plan"
	"github.com/gpud/gpud/pkg/scheduler/view"
)

// victim is a running pod, or a gang's running pods, that preemption
// evicts as one. The running members of an elastic gang (more running
// than its minMember) are each a victim too, at the gang's priority: up
// to spare of them may go alone, the gang keeping its minimum; beyond
// that only the whole gang goes.
type victim struct {
	key   string
	pods  []*plan.Pod
	holds []relPod
	// uses are what each pod (holds' order) counts against the queue.
	uses  []podUse
	prio  int32
	queue string
	ckpt  bool
	start time.Time
	// lost is the work eviction throws away: per pod the milli-GPUs it
	// holds times the seconds since its last checkpoint (a checkpointable
	// pod's), else since its start.
	lost  int64
	nodes []string
	// pdb names a PodDisruptionBudget that forbids evicting it, "" none.
	pdb string
	// gone: evicted earlier in this cycle (for a gang: it or a member).
	gone bool
	// why it may go for the current preemptor.
	why string
	// whole, on a member of an elastic gang, is the gang's victim.
	whole *victim
	// members, on an elastic gang's victim, are its members' victims;
	// spare is how many of them may still go alone (running members less
	// minMember, less those evicted earlier in this cycle).
	members []*victim
	spare   int
}

// podUse is one victim pod's usage, charged back to its queue when a
// what-if releases it.
type podUse struct {
	use   jobs.Resources
	model []jobs.ModelMilli
}

// optional reports whether v is a member of an elastic gang beyond its
// minimum: evicting it shrinks the gang without stopping it.
func (v *victim) optional() bool { return v.whole != nil }

// victimList builds the running pods preemption may pick: not terminating,
// holding gpud devices through claims no pod outside the victim shares; a
// gang's bound members form one victim, and an elastic gang's members are
// each one too (see victim).
func (c *cycle) victimList() []*victim { return c.pre.victimList(c.buildVictims) }

func (c *cycle) buildVictims() []*victim {
	var out []*victim
	refs := map[string]int{}
	for _, pods := range [][]*plan.Pod{c.s.Bound, c.s.Pending} {
		for _, p := range pods {
			for _, cl := range p.Claims {
				if cl != nil {
					refs[view.ClaimID(cl)]++
				}
			}
		}
	}
	byKey := map[string]*victim{}
	var keys []string
	holds := c.boundHolds()
	for i, p := range c.s.Bound {
		if p.Pod.DeletionTimestamp != nil {
			continue
		}
		key := p.Key()
		if p.Group != "" {
			key = p.Group
		}
		v := byKey[key]
		if v == nil {
			q, err := c.fair.queueOf(p)
			if err != nil {
				q = unqueued
			}
			v = &victim{key: key, prio: p.Priority, queue: q, ckpt: true}
			byKey[key] = v
			keys = append(keys, key)
		}
		c.addVictimPod(v, p, holds[i])
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := byKey[k]
		if !c.usableVictim(v, refs) {
			continue
		}
		out = append(out, v)
		g := c.s.Groups[k]
		if v.pods[0].Group == "" || g == nil || g.Invalid != "" || len(v.pods) <= int(max(g.MinMember, 1)) {
			continue
		}
		// An elastic gang: each member may go alone, at the gang's
		// priority, while the gang keeps minMember running.
		v.spare = len(v.pods) - int(max(g.MinMember, 1))
		for i, p := range v.pods {
			m := &victim{key: p.Key(), prio: v.prio, queue: v.queue, ckpt: true, whole: v}
			c.addVictimPod(m, p, v.holds[i])
			if c.usableVictim(m, refs) {
				v.members = append(v.members, m)
				out = append(out, m)
			}
		}
	}
	return out
}

// addVictimPod adds bound pod p, holding h, to victim v.
func (c *cycle) addVictimPod(v *victim, p *plan.Pod, h relPod) {
	v.pods = append(v.pods, p)
	v.holds = append(v.holds, h)
	v.prio = max(v.prio, p.Priority)
	v.ckpt = v.ckpt && p.Checkpointable
	if st := startOf(p); st.After(v.start) {
		v.start = st
	}
	if !slices.Contains(v.nodes, h.node) {
		v.nodes = append(v.nodes, h.node)
		slices.Sort(v.nodes)
	}
	r, m := c.usageOf(p, h.node, resultsOf(h.allocs))
	v.uses = append(v.uses, podUse{use: r, model: m})
	v.lost += c.lostWork(p, m)
}

// usableVictim reports whether evicting v frees gpud devices (through
// claims, or a device plugin's GPUs) and takes no claim from a pod
// outside v (refs counts each claim's pods).
func (c *cycle) usableVictim(v *victim, refs map[string]int) bool {
	own := map[string]int{}
	gpu := false
	for _, p := range v.pods {
		for _, cl := range p.Claims {
			if cl == nil {
				continue
			}
			own[view.ClaimID(cl)]++
			if cl.Status.Allocation != nil && slices.ContainsFunc(cl.Status.Allocation.Devices.Results, func(r resourceapi.DeviceRequestAllocationResult) bool { return r.Driver == view.DriverName }) {
				gpu = true
			}
		}
	}
	// A pod holding GPUs through a device plugin (nvidia.com/gpu on a
	// node that advertises it) frees them when evicted too.
	gpu = gpu || slices.ContainsFunc(v.pods, func(p *plan.Pod) bool { return p.PluginDevices > 0 })
	for ck, n := range own {
		if refs[ck] > n {
			return false
		}
	}
	return gpu
}

// lostWork is the GPU-time, in milli-GPU-seconds, that evicting p throws
// away: the milli-GPUs it holds (models: whole GPUs, fractions, MIG slices)
// times the seconds since its last checkpoint if it is checkpointable and
// reported one after its start (a checkpoint in the future counts as now),
// else since its start.
func (c *cycle) lostWork(p *plan.Pod, models []jobs.ModelMilli) int64 {
	held := int64(0)
	for _, m := range models {
		held += m.Milli
	}
	since := startOf(p)
	if p.Checkpointable && p.LastCheckpoint.After(since) {
		since = p.LastCheckpoint
	}
	secs := int64(c.s.Now.Sub(since) / time.Second)
	return held * max(secs, 0)
}
