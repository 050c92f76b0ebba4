package jobs

import (
	"cmp"
	"fmt"
	"math"
)

// Order is how pending jobs are ordered: globally without fair share,
// within each queue (after priority) with it.
type Order int

// Orders.
const (
	// OrderArrival is submission order (today's policy).
	OrderArrival Order = iota
	// OrderShortest is shortest predicted job first: ascending
	// [Job.EstimateSeconds], jobs without an estimate last, then arrival.
	OrderShortest
	// OrderLAS is Tiresias-style two-dimensional least attained service:
	// jobs are put in discretised queues by the GPU-seconds they have
	// received (GPUs × time run, summed over runs; see
	// [Options.LASThresholds]), lowest first, arrival order within one.
	// With [Options.Preemption] a job preempts running jobs of a higher
	// attained-service queue, and only those (the rule replaces priority,
	// reclaim and reservation preemption).
	OrderLAS
)

// DefaultLASThresholds are the attained-service queue limits of
// [OrderLAS] when [Options.LASThresholds] is nil, in GPU-seconds: 1 and 10
// GPU-hours.
var DefaultLASThresholds = []int64{3600, 36000}

// Objective weighs the terms the policy trades off. The zero value and nil
// are not the same: a nil [Options.Objective] is today's policy exactly,
// which the weights Util = 1, Fair = 1 (others 0) reproduce. A zero term
// is ignored.
//
// Placement of GPU pods (whole and fractional; CPU-only and MIG pods keep
// today's rules) chooses the node with the lowest
//
//	Util·free + Energy·watts + Cost·price
//
// each term normalised to [0, 1] over the cluster: free is the node's free
// milli-GPU (packing leaves fewer GPUs unallocated), watts the power the pod
// adds (its GPUs' busy minus idle watts, plus the node's idle minus off
// watts when the node had nothing on it: packing lets whole nodes sleep),
// price the node's price per GPU-hour.
//
// Ordering with fair share picks, at each level of the queue tree, a queue
// below its guarantee first (a contract, whatever the weights), then the
// lowest Fair·share + Wait·estimate, where share is the queue's weighted
// DRF share and estimate the runtime estimate of the queue's next job
// divided by the longest pending estimate (1 without an estimate); with
// Fair and Wait both 0, the queue whose next job arrived first. Within a
// queue, Wait > 0 orders by priority, then shortest estimate. Without fair
// share, Wait > 0 orders all jobs shortest estimate first.
type Objective struct {
	Util, Wait, Fair, Energy, Cost float64
	// Models gives the power and price of each GPU model; a model absent
	// here has zero watts and price.
	Models map[string]ModelPower
}

// ModelPower is one GPU model's power draw and price.
type ModelPower struct {
	// BusyWatts is the draw of a fully allocated GPU, IdleWatts of an
	// unallocated GPU on a node that runs something, OffWatts of a GPU on
	// a node with nothing on it (power-managed). A fraction draws idle
	// plus its share of busy − idle.
	BusyWatts, IdleWatts, OffWatts float64
	// PricePerHour is the price of one GPU-hour.
	PricePerHour float64
}

// MaxWeight bounds each [Objective] weight.
const MaxWeight = 1e6

// Validate checks every weight is in [0, MaxWeight] with at least one
// positive, and every model's watts and price are finite and not negative.
func (o *Objective) Validate() error {
	ws := []struct {
		n string
		v float64
	}{{"util", o.Util}, {"wait", o.Wait}, {"fair", o.Fair}, {"energy", o.Energy}, {"cost", o.Cost}}
	positive := false
	for _, w := range ws {
		if !(w.v >= 0 && w.v <= MaxWeight) {
			return fmt.Errorf("%w: objective weight %s=%v: want a number in [0, %g]", ErrInvalid, w.n, w.v, MaxWeight)
		}
		positive = positive || w.v > 0
	}
	if !positive {
		return fmt.Errorf("%w: objective: every weight is 0: give at least one term a positive weight", ErrInvalid)
	}
	for m, p := range o.Models {
		for _, v := range []float64{p.BusyWatts, p.IdleWatts, p.OffWatts, p.PricePerHour} {
			if !(v >= 0) || math.IsInf(v, 1) {
				return fmt.Errorf("%w: objective: model %q: watts and price must be finite and not negative", ErrInvalid, m)
			}
		}
	}
	return nil
}

// NodePower is one node's power and price for the placement objective
// ([Objective.PlacementScore]), from its GPUs' models ([PowerOf]).
type NodePower struct {
	// WakeWatts is what the node's GPUs draw idle above off (a node with
	// nothing on it is power-managed down to off).
	WakeWatts float64
	// WattsPerMilli is the mean busy − idle watts per milli-GPU.
	WattsPerMilli float64
	// PricePerHour is the mean price per GPU-hour.
	PricePerHour float64
	// BusyWatts is every GPU's busy draw, the bound watts are normalised by.
	BusyWatts float64
	// Milli is the node's GPUs in milli-GPU, the bound free is normalised by.
	Milli float64
}

// PowerOf is the power and price of a node whose GPUs are of the given
// models' power (one entry per GPU).
func PowerOf(gpus []ModelPower) NodePower {
	var n NodePower
	for _, p := range gpus {
		n.WakeWatts += p.IdleWatts - p.OffWatts
		n.WattsPerMilli += (p.BusyWatts - p.IdleWatts) / 1000
		n.PricePerHour += p.PricePerHour
		n.BusyWatts += max(p.BusyWatts, p.IdleWatts)
	}
	if k := float64(len(gpus)); k > 0 {
		n.WattsPerMilli /= k
		n.PricePerHour /= k
		n.Milli = k * 1000
	}
	n.WakeWatts = max(n.WakeWatts, 0)
	n.WattsPerMilli = max(n.WattsPerMilli, 0)
	return n
}

// ScoreBounds normalise each term of [Objective.PlacementScore] to [0, 1]:
// the largest node's milli-GPU, busy watts and price per GPU-hour in the
// cluster.
type ScoreBounds struct {
	Milli, Watts, Price float64
}

// Bound widens b to cover n.
func (b *ScoreBounds) Bound(n NodePower) {
	b.Milli = max(b.Milli, n.Milli)
	b.Watts = max(b.Watts, n.BusyWatts)
	b.Price = max(b.Price, n.PricePerHour)
}

// PlacementScore is the objective's score of placing a pod of podMilli
// milli-GPU on a node with power n and freeMilli milli-GPU unallocated;
// empty says nothing runs on the node (placing there wakes it). Lower is
// better:
//
//	Util·free/bounds.Milli + Energy·watts/bounds.Watts + Cost·price/bounds.Price
//
// with watts = n.WattsPerMilli·podMilli (+ n.WakeWatts when empty). Both
// the replay (this package) and gpud scheduler (pkg/scheduler/decide)
// score with it.
func (o *Objective) PlacementScore(n NodePower, freeMilli, podMilli float64, empty bool, b ScoreBounds) float64 {
	sc := 0.0
	if o.Util > 0 && b.Milli > 0 {
		sc += o.Util * freeMilli / b.Milli
	}
	if o.Energy > 0 && b.Watts > 0 {
		w := n.WattsPerMilli * podMilli
		if empty {
			w += n.WakeWatts
		}
		sc += o.Energy * w / b.Watts
	}
	if o.Cost > 0 && b.Price > 0 {
		sc += o.Cost * n.PricePerHour / b.Price
	}
	return sc
}

// objState is an [Objective] prepared for a cluster.
type objState struct {
	o      Objective
	nodes  []NodePower
	bounds ScoreBounds
}

func newObjState(o *Objective, c *cluster) *objState {
	st := &objState{o: *o, nodes: make([]NodePower, len(c.info))}
	for i, inf := range c.info {
		ps := make([]ModelPower, len(inf.gpus))
		for k, g := range inf.gpus {
			ps[k] = o.Models[c.models[g.model]]
		}
		st.nodes[i] = PowerOf(ps)
		st.bounds.Bound(st.nodes[i])
	}
	return st
}

// score is the objective's placement score of one pod of d on node i:
// lower is better.
func (st *objState) score(c *cluster, i int, d *demand) float64 {
	f := &c.free[i]
	return st.o.PlacementScore(st.nodes[i], float64(f.milliFree), float64(d.milli)*float64(d.num), f.pods == 0, st.bounds)
}

// lasLevel is j's attained-service queue at now.
func (s *Scheduler) lasLevel(j *jobState, now int64) int {
	a := j.attained
	if j.running {
		a += j.d.modelMilli() * int64(j.n) * (now - j.start)
	}
	th := s.opts.LASThresholds
	if th == nil {
		th = DefaultLASThresholds
	}
	lv := 0
	for _, t := range th {
		if a >= t*1000 {
			lv++
		}
	}
	return lv
}

// shortestFirst reports whether jobs are ordered shortest estimate first
// ([OrderShortest] or a positive Wait weight).
func (s *Scheduler) shortestFirst() bool {
	return s.opts.Order == OrderShortest || (s.opts.Objective != nil && s.opts.Objective.Wait > 0)
}

// estKey is an estimate for ordering: unknown sorts last.
func estKey(j *jobState) int64 {
	if j.job.EstimateSeconds <= 0 {
		return never
	}
	return j.job.EstimateSeconds
}

// validate checks the order, LAS thresholds and objective.
func (o *Options) validate() error {
	if o.Order < OrderArrival || o.Order > OrderLAS {
		return fmt.Errorf("%w: options: order %d unknown", ErrInvalid, o.Order)
	}
	for k, t := range o.LASThresholds {
		if t <= 0 || t > 1e12 || (k > 0 && t <= o.LASThresholds[k-1]) {
			return fmt.Errorf("%w: options: LAS thresholds %v: want ascending GPU-seconds in 1..1e12", ErrInvalid, o.LASThresholds)
		}
	}
	if o.Objective != nil {
		return o.Objective.Validate()
	}
	return nil
}

// orderCmp compares two pending jobs by [Options.Order] (and the Wait
// weight); 0 leaves them to arrival order.
func (s *Scheduler) orderCmp(a, b *jobState, now int64) int {
	switch {
	case s.opts.Order == OrderLAS:
		return cmp.Compare(s.lasLevel(a, now), s.lasLevel(b, now))
	case s.shortestFirst():
		return cmp.Compare(estKey(a), estKey(b))
	}
	return 0
}

// objectiveOrder is [Scheduler.order]'s fair-share iterator with the
// objective's queue choice: below guarantee first, then the lowest
// Fair·share + Wait·estimate of the queue's next job (or, with both 0, the
// earliest next job). byQueue is sorted; pos and remain are as in order.
func (s *Scheduler) objectiveOrder(byQueue [][]*jobState, remain, pos []int) func() *jobState {
	o := s.opts.Objective
	maxEst := int64(0)
	for _, j := range s.pending {
		maxEst = max(maxEst, j.job.EstimateSeconds)
	}
	estNorm := func(j *jobState) float64 {
		if j.job.EstimateSeconds <= 0 || maxEst <= 0 {
			return 1
		}
		return float64(j.job.EstimateSeconds) / float64(maxEst)
	}
	// next is the job queue qi would give next: its own for a leaf, the
	// earliest (or shortest, with Wait) of its children's otherwise.
	var next func(qi int) *jobState
	next = func(qi int) *jobState {
		if remain[qi] == 0 {
			return nil
		}
		if len(s.q.list[qi].children) == 0 {
			return byQueue[qi][pos[qi]]
		}
		var best *jobState
		for _, c := range s.q.list[qi].children {
			j := next(c)
			if j == nil {
				continue
			}
			if best == nil || cmp.Or(s.orderCmp(j, best, 0), cmp.Compare(j.job.Submit, best.job.Submit), cmp.Compare(j.seq, best.seq)) < 0 {
				best = j
			}
		}
		return best
	}
	return func() *jobState {
		level := s.q.roots
		for {
			best := -1
			var bestBelow bool
			var bestScore float64
			var bestJob *jobState
			for _, qi := range level {
				j := next(qi)
				if j == nil {
					continue
				}
				below := s.q.list[qi].usage.GPUMilli < s.q.list[qi].q.Quota.Guaranteed.GPUMilli
				sc := o.Fair*s.q.share(qi, s.c.capacity) + o.Wait*estNorm(j)
				better := best < 0 || (below && !bestBelow)
				if !better && below == bestBelow {
					if o.Fair == 0 && o.Wait == 0 {
						better = cmp.Or(cmp.Compare(j.job.Submit, bestJob.job.Submit), cmp.Compare(j.seq, bestJob.seq)) < 0
					} else {
						better = sc < bestScore
					}
				}
				if better {
					best, bestBelow, bestScore, bestJob = qi, below, sc, j
				}
			}
			if best < 0 {
				return nil
			}
			if len(s.q.list[best].children) == 0 {
				j := byQueue[best][pos[best]]
				pos[best]++
				for a := best; a >= 0; a = s.q.list[a].parent {
					remain[a]--
				}
				return j
			}
			level = s.q.list[best].children
		}
	}
}
