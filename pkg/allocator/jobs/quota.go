package jobs

import (
	"fmt"
	"slices"
)

// queueState is one queue with its usage, charged at every ancestor.
type queueState struct {
	q          Queue
	parent     int
	children   []int
	usage      Resources
	modelUse   []int64 // milli per model id
	modelLimit []int64 // -1: no limit
	modelGuar  []int64
	weight     float64
}

type queues struct {
	list   []queueState
	byName map[string]int
	roots  []int
}

func newQueues(qs []Queue, c *cluster) (*queues, error) {
	t := &queues{byName: map[string]int{}}
	for _, q := range qs {
		if q.Name == "" {
			return nil, fmt.Errorf("queue without a name: %w", ErrInvalid)
		}
		if _, dup := t.byName[q.Name]; dup {
			return nil, fmt.Errorf("queue %q defined twice: %w", q.Name, ErrInvalid)
		}
		s := queueState{q: q, parent: -1, weight: q.Weight, modelUse: make([]int64, len(c.models)),
			modelLimit: make([]int64, len(c.models)), modelGuar: make([]int64, len(c.models))}
		if s.weight <= 0 {
			s.weight = 1
		}
		for id, m := range c.models {
			s.modelLimit[id] = -1
			if v, ok := q.Quota.ModelLimit[m]; ok {
				s.modelLimit[id] = v
			}
			s.modelGuar[id] = q.Quota.ModelGuaranteed[m]
		}
		t.byName[q.Name] = len(t.list)
		t.list = append(t.list, s)
	}
	for i := range t.list {
		p := t.list[i].q.Parent
		if p == "" {
			t.roots = append(t.roots, i)
			continue
		}
		pi, ok := t.byName[p]
		if !ok {
			return nil, fmt.Errorf("queue %q: parent %q not defined: %w", t.list[i].q.Name, p, ErrInvalid)
		}
		t.list[i].parent = pi
		t.list[pi].children = append(t.list[pi].children, i)
	}
	for i := range t.list { // reject cycles
		seen := 0
		for a := i; a >= 0; a = t.list[a].parent {
			if seen++; seen > len(t.list) {
				return nil, fmt.Errorf("queue %q: parent cycle: %w", t.list[i].q.Name, ErrInvalid)
			}
		}
	}
	return t, nil
}

// charge adds sign × r (and model milli) to queue qi and its ancestors.
func (t *queues) charge(qi int, r Resources, model int, milli int64, sign int64) {
	for a := qi; a >= 0; a = t.list[a].parent {
		s := &t.list[a]
		if sign > 0 {
			s.usage = s.usage.Add(r)
		} else {
			s.usage = s.usage.Sub(r)
		}
		if model >= 0 {
			s.modelUse[model] += sign * milli
		}
	}
}

// overLimit returns a reason if adding r to qi breaks a limit of qi or an
// ancestor, naming the queue, the resource and the amount over.
func (t *queues) overLimit(qi int, r Resources) (Reason, bool) {
	for a := qi; a >= 0; a = t.list[a].parent {
		s := &t.list[a]
		lim := s.q.Quota.Limit
		for d := range resourceNames {
			l, use, need := *lim.at(d), *s.usage.at(d), *r.at(d)
			if l > 0 && need > 0 && use+need > l {
				return reasonf(CodeQuota, "queue %q %s limit %d: %d in use, job needs %d, %d over",
					s.q.Name, resourceNames[d], l, use, need, use+need-l), true
			}
		}
	}
	return Reason{}, false
}

// allowedModels narrows d's models to those on which qi and every ancestor
// have room for need milli; ok is false if none is left, with the reason.
func (t *queues) allowedModels(qi int, d *demand, need int64, c *cluster) (modelSet, Reason, bool) {
	if need == 0 {
		return d.models, Reason{}, true
	}
	limited := false
	for a := qi; a >= 0 && !limited; a = t.list[a].parent {
		limited = slices.ContainsFunc(t.list[a].modelLimit, func(v int64) bool { return v >= 0 })
	}
	if !limited {
		return d.models, Reason{}, true
	}
	out := constrained
	var why Reason
	for id := range c.models {
		if !d.models.has(id) {
			continue
		}
		ok := true
		for a := qi; a >= 0 && ok; a = t.list[a].parent {
			s := &t.list[a]
			if l := s.modelLimit[id]; l >= 0 && s.modelUse[id]+need > l {
				ok = false
				if why.Code == "" {
					why = reasonf(CodeModelQuota, "queue %q %s limit %d milli: %d in use, job needs %d, %d over",
						s.q.Name, c.models[id], l, s.modelUse[id], need, s.modelUse[id]+need-l)
				}
			}
		}
		if ok {
			out |= 1 << id
		}
	}
	if out == constrained {
		if why.Code == "" {
			why = reasonf(CodeNeverFits, "no GPU of models %v in the cluster", d.models)
		}
		return out, why, false
	}
	return out, Reason{}, true
}

// share is qi's weighted dominant share: the largest fraction of any
// cluster resource it uses, divided by its weight.
func (t *queues) share(qi int, capacity Resources) float64 {
	s := &t.list[qi]
	best := 0.0
	for d := range resourceNames {
		if c := *capacity.at(d); c > 0 {
			best = max(best, float64(*s.usage.at(d))/float64(c))
		}
	}
	return best / s.weight
}

// belowGuarantee reports whether qi, with extra added, stays within its
// guaranteed GPU milli and MIG slices for what extra uses.
func (t *queues) belowGuarantee(qi int, extra Resources) bool {
	s := &t.list[qi]
	g := s.q.Quota.Guaranteed
	if extra.GPUMilli == 0 && extra.MIGSlices == 0 {
		return false
	}
	if extra.GPUMilli > 0 && s.usage.GPUMilli+extra.GPUMilli > g.GPUMilli {
		return false
	}
	if extra.MIGSlices > 0 && s.usage.MIGSlices+extra.MIGSlices > g.MIGSlices {
		return false
	}
	return true
}

// overGuarantee reports whether qi uses more GPU than guaranteed, after
// removing freed.
func (t *queues) overGuarantee(qi int, freed Resources) bool {
	s := &t.list[qi]
	g := s.q.Quota.Guaranteed
	u := s.usage.Sub(freed)
	return u.GPUMilli > g.GPUMilli || u.MIGSlices > g.MIGSlices
}

// within reports whether queue qi is owner or a descendant of owner.
func (t *queues) within(qi, owner int) bool {
	for a := qi; a >= 0; a = t.list[a].parent {
		if a == owner {
			return true
		}
	}
	return false
}
