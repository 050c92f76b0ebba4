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

// objNode is a node's precomputed objective inputs.
type objNode struct {
	wake       float64 // idle − off watts of all its GPUs
	deltaMilli float64 // mean busy − idle watts per milli-GPU
	price      float64 // mean price per GPU-hour
}

// objState is an [Objective] prepared for a cluster.
type objState struct {
	o                    Objective
	nodes                []objNode
	maxMilli, maxW, maxP float64
}

func newObjState(o *Objective, c *cluster) *objState {
	st := &objState{o: *o, nodes: make([]objNode, len(c.info))}
	for i, inf := range c.info {
		var n objNode
		busy := 0.0
		for _, g := range inf.gpus {
			p := o.Models[c.models[g.model]]
			n.wake += p.IdleWatts - p.OffWatts
			n.deltaMilli += (p.BusyWatts - p.IdleWatts) / 1000
			n.price += p.PricePerHour
			busy += max(p.BusyWatts, p.IdleWatts)
		}
		if k := float64(len(inf.gpus)); k > 0 {
			n.deltaMilli /= k
			n.price /= k
		}
		n.wake = max(n.wake, 0)
		n.deltaMilli = max(n.deltaMilli, 0)
		st.nodes[i] = n
		st.maxMilli = max(st.maxMilli, float64(len(inf.gpus))*1000)
		st.maxW = max(st.maxW, busy)
		st.maxP = max(st.maxP, n.price)
	}
	return st
}

// score is the objective's placement score of one pod of d on node i:
// lower is better.
func (st *objState) score(c *cluster, i int, d *demand) float64 {
	f, n := &c.free[i], &st.nodes[i]
	podMilli := float64(d.milli) * float64(d.num)
	sc := 0.0
	if st.o.Util > 0 && st.maxMilli > 0 {
		sc += st.o.Util * float64(f.milliFree) / st.maxMilli
	}
	if st.o.Energy > 0 && st.maxW > 0 {
		w := n.deltaMilli * podMilli
		if f.pods == 0 {
			w += n.wake
		}
		sc += st.o.Energy * w / st.maxW
	}
	if st.o.Cost > 0 && st.maxP > 0 {
		sc += st.o.Cost * n.price / st.maxP
	}
	return sc
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
