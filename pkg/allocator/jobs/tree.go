package jobs

import (
	"fmt"
	"slices"
)

// QueueTree is the queue tree's accounting on its own, for a caller that
// places pods itself (gpud scheduler): usage charged at every ancestor,
// limits per resource and per GPU model, guarantees and weighted DRF
// shares, with the same rules [Scheduler] applies.
type QueueTree struct {
	t      *queues
	models map[string]int
}

// QueueExcess says which limit a demand breaks: queue (the leaf or an
// ancestor), the resource (one of cpu_milli, memory_mib, gpu_milli,
// gpu_memory_mib, mig_slices) or the GPU model (milli-GPU), the limit, what
// the queue uses and what the demand needs.
type QueueExcess struct {
	Queue    string
	Resource string
	Model    string
	Limit    int64
	Use      int64
	Need     int64
}

// ModelMilli is milli-GPU of one GPU model, as per-model quotas count it.
type ModelMilli struct {
	Model string
	Milli int64
}

// NewQueueTree builds the tree of qs over a cluster with the GPU models
// models (per-model limits of other models are ignored).
func NewQueueTree(qs []Queue, models []string) (*QueueTree, error) {
	c := &cluster{modelIDs: map[string]int{}}
	for _, m := range models {
		if _, dup := c.modelIDs[m]; dup {
			continue
		}
		if len(c.models) >= 63 {
			return nil, fmt.Errorf("%w: queue tree: more than 63 GPU models", ErrInvalid)
		}
		c.modelIDs[m] = len(c.models)
		c.models = append(c.models, m)
	}
	t, err := newQueues(qs, c)
	if err != nil {
		return nil, fmt.Errorf("jobs: queues: %w", err)
	}
	return &QueueTree{t: t, models: c.modelIDs}, nil
}

// MIGModelMilli is the milli-GPU a MIG instance of compute slices counts as
// in per-model quotas (compute/7 of a GPU, rounded up).
func MIGModelMilli(compute int) int64 { return migMilli(compute) }

func (q *QueueTree) index(name string) int {
	if i, ok := q.t.byName[name]; ok {
		return i
	}
	return -1
}

// Has reports whether the queue is defined.
func (q *QueueTree) Has(name string) bool { return q.index(name) >= 0 }

// Leaf reports whether the queue is defined and has no children.
func (q *QueueTree) Leaf(name string) bool {
	i := q.index(name)
	return i >= 0 && len(q.t.list[i].children) == 0
}

// Roots lists the top-level queues in definition order.
func (q *QueueTree) Roots() []string { return q.names(q.t.roots) }

// Children lists a queue's children in definition order.
func (q *QueueTree) Children(name string) []string {
	if i := q.index(name); i >= 0 {
		return q.names(q.t.list[i].children)
	}
	return nil
}

// Parent is the queue's parent, "" for a top-level or unknown queue.
func (q *QueueTree) Parent(name string) string {
	if i := q.index(name); i >= 0 && q.t.list[i].parent >= 0 {
		return q.t.list[q.t.list[i].parent].q.Name
	}
	return ""
}

func (q *QueueTree) names(is []int) []string {
	out := make([]string, len(is))
	for k, i := range is {
		out[k] = q.t.list[i].q.Name
	}
	return out
}

// Usage is what the queue and its descendants hold.
func (q *QueueTree) Usage(name string) Resources {
	if i := q.index(name); i >= 0 {
		return q.t.list[i].usage
	}
	return Resources{}
}

// Charge adds sign × r and the per-model milli to the queue and its
// ancestors (sign is 1 or -1). Unknown queues and models are ignored.
func (q *QueueTree) Charge(name string, r Resources, models []ModelMilli, sign int64) {
	i := q.index(name)
	if i < 0 {
		return
	}
	q.t.charge(i, r, -1, 0, sign)
	for _, m := range models {
		if id, ok := q.models[m.Model]; ok {
			q.t.charge(i, Resources{}, id, m.Milli, sign)
		}
	}
}

// Over reports the first limit that adding r and models to the queue
// breaks, at the queue or an ancestor: resources first, then models.
func (q *QueueTree) Over(name string, r Resources, models []ModelMilli) (QueueExcess, bool) {
	i := q.index(name)
	if i < 0 {
		return QueueExcess{}, false
	}
	for a := i; a >= 0; a = q.t.list[a].parent {
		s := &q.t.list[a]
		lim := s.q.Quota.Limit
		for d := range resourceNames {
			l, use, need := *lim.at(d), *s.usage.at(d), *r.at(d)
			if l > 0 && need > 0 && use+need > l {
				return QueueExcess{Queue: s.q.Name, Resource: resourceNames[d], Limit: l, Use: use, Need: need}, true
			}
		}
	}
	for _, m := range models {
		if e, over := q.ModelRoom(name, m.Model, m.Milli); over {
			return e, true
		}
	}
	return QueueExcess{}, false
}

// ModelRoom reports the first per-model limit that adding milli of model to
// the queue breaks, at the queue or an ancestor.
func (q *QueueTree) ModelRoom(name, model string, milli int64) (QueueExcess, bool) {
	i, id := q.index(name), -1
	if m, ok := q.models[model]; ok {
		id = m
	}
	if i < 0 || id < 0 || milli <= 0 {
		return QueueExcess{}, false
	}
	for a := i; a >= 0; a = q.t.list[a].parent {
		s := &q.t.list[a]
		if l := s.modelLimit[id]; l >= 0 && s.modelUse[id]+milli > l {
			return QueueExcess{Queue: s.q.Name, Model: model, Limit: l, Use: s.modelUse[id], Need: milli}, true
		}
	}
	return QueueExcess{}, false
}

// Share is the queue's weighted dominant share of capacity, as fair share
// orders siblings.
func (q *QueueTree) Share(name string, capacity Resources) float64 {
	if i := q.index(name); i >= 0 {
		return q.t.share(i, capacity)
	}
	return 0
}

// UnderGuarantee reports whether the queue holds fewer milli-GPU than it
// is guaranteed (fair share serves such siblings first).
func (q *QueueTree) UnderGuarantee(name string) bool {
	i := q.index(name)
	return i >= 0 && q.t.list[i].usage.GPUMilli < q.t.list[i].q.Quota.Guaranteed.GPUMilli
}

// BelowGuarantee reports whether the queue, with extra added, stays within
// its guaranteed milli-GPU and MIG slices for what extra uses (a queue
// entitled to reclaim).
func (q *QueueTree) BelowGuarantee(name string, extra Resources) bool {
	i := q.index(name)
	return i >= 0 && q.t.belowGuarantee(i, extra)
}

// OverGuarantee reports whether the queue uses more GPU than guaranteed
// after removing freed (a queue others may reclaim from).
func (q *QueueTree) OverGuarantee(name string, freed Resources) bool {
	i := q.index(name)
	return i >= 0 && q.t.overGuarantee(i, freed)
}

// Within reports whether queue name is owner or one of its descendants.
func (q *QueueTree) Within(name, owner string) bool {
	i, o := q.index(name), q.index(owner)
	return i >= 0 && o >= 0 && q.t.within(i, o)
}

// VictimCost orders preemption victim sets as [Scheduler] does: fewer
// victims, then fewer that cannot resume from a checkpoint, then less
// GPU-time lost since the victims' last checkpoints (or starts), then less
// run time thrown away.
type VictimCost struct {
	Victims, NonCheckpointable int
	// LostGPUMilliSeconds is the work the set throws away: per victim the
	// milli-GPUs it holds times the seconds since its last checkpoint, or
	// its start. Zero when unknown ([Scheduler] leaves it out).
	LostGPUMilliSeconds int64
	ElapsedSeconds      int64
}

// Less reports whether a is the cheaper victim set.
func (a VictimCost) Less(b VictimCost) bool {
	if a.Victims != b.Victims || a.NonCheckpointable != b.NonCheckpointable {
		return victimCost{a.Victims, a.NonCheckpointable, 0}.less(victimCost{b.Victims, b.NonCheckpointable, 0})
	}
	if a.LostGPUMilliSeconds != b.LostGPUMilliSeconds {
		return a.LostGPUMilliSeconds < b.LostGPUMilliSeconds
	}
	return a.ElapsedSeconds < b.ElapsedSeconds
}

// ResourceNames lists the resources [QueueExcess.Resource] names.
func ResourceNames() []string { return slices.Clone(resourceNames[:]) }
