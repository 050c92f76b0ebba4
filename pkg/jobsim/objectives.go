package jobsim

import (
	"github.com/gpud/gpud/pkg/allocator"
	"github.com/gpud/gpud/pkg/allocator/jobs"
	"github.com/gpud/gpud/pkg/allocator/objective"
)

// MorePolicyNames are the policies beyond [PolicyNames] that
// `--policies` accepts: sjf (FIFO's rules, shortest predicted job first)
// and las (Tiresias-style least attained service, preempting jobs that
// have received more GPU-time).
var MorePolicyNames = []string{"sjf", "las"}

// ObjectiveStats is what the operator's objectives measure: where the
// power went, what the GPUs cost and how evenly queues were served.
type ObjectiveStats struct {
	// UnallocatedPct is the time-averaged percentage of GPUs allocated to
	// nothing.
	UnallocatedPct float64
	// Jain is Jain's fairness index over queues of each queue's service:
	// the inverse of its completed jobs' mean slowdown (completion time
	// over runtime, as finish-time fairness measures it). 1 when every
	// queue's jobs are slowed down alike; 1/n when one queue is served and
	// n − 1 starve.
	Jain float64
	// KWh is the GPUs' energy: busy, idle or off (see [jobs.ModelPower]).
	KWh float64
	// Cost is the price of the GPU-hours jobs held, by model.
	Cost float64
}

// ObjectiveVariants crosses each variant with each setting of a sweep:
// the policy label gains "/" and the setting's label, and the scheduler
// gets the setting's objective with the variant's power table (the
// defaults when it has none).
func ObjectiveVariants(vs []ReplayOptions, settings []objective.Setting) []ReplayOptions {
	var out []ReplayOptions
	for _, v := range vs {
		models := v.Models
		if models == nil {
			models = objective.DefaultModels()
		}
		for _, st := range objective.Apply(settings, models) {
			o := v
			o.Policy += "/" + st.Label
			o.Options.Objective = st.Objective
			o.ObjectiveRows = true
			out = append(out, o)
		}
	}
	return out
}

// power tracks the cluster's draw as jobs start and stop.
type power struct {
	models map[string]jobs.ModelPower
	nodes  []allocator.Node
	wake   []float64 // per node: idle − off watts of its GPUs
	pods   []int     // pods on each node
	watts  float64
	joules float64
	cost   float64 // price × GPU-seconds
}

func newPower(nodes []allocator.Node, models map[string]jobs.ModelPower) *power {
	if models == nil {
		models = objective.DefaultModels()
	}
	p := &power{models: models, nodes: nodes, wake: make([]float64, len(nodes)), pods: make([]int, len(nodes))}
	for i, n := range nodes {
		for _, g := range n.GPUs {
			m := objective.Lookup(models, g.Model)
			p.wake[i] += m.IdleWatts - m.OffWatts
			p.watts += m.OffWatts
		}
	}
	return p
}

// change adds (sign 1) or removes (sign −1) job j's pods' draw; a removal
// also books the price of the GPUs j held since it started, ending at t.
func (p *power) change(j *simJob, sign float64, t int64) {
	if len(j.pods) == 0 {
		return
	}
	per := j.gpus / float64(len(j.pods)) // GPU-equivalents per pod
	for _, pp := range j.pods {
		if pp.Node < 0 || pp.Node >= len(p.nodes) {
			continue
		}
		if sign > 0 {
			if p.pods[pp.Node] == 0 {
				p.watts += p.wake[pp.Node]
			}
			p.pods[pp.Node]++
		} else {
			if p.pods[pp.Node]--; p.pods[pp.Node] == 0 {
				p.watts -= p.wake[pp.Node]
			}
		}
		if len(pp.GPUs) == 0 {
			continue
		}
		share := per / float64(len(pp.GPUs))
		for _, g := range pp.GPUs {
			if g < 0 || g >= len(p.nodes[pp.Node].GPUs) {
				continue
			}
			m := objective.Lookup(p.models, p.nodes[pp.Node].GPUs[g].Model)
			p.watts += sign * (m.BusyWatts - m.IdleWatts) * share
			if sign < 0 {
				p.cost += m.PricePerHour * share * float64(t-j.runStart)
			}
		}
	}
}

func (p *power) advance(dt float64) { p.joules += p.watts * dt }

// objectiveStats completes r's objective measures.
func (a *accounting) objectiveStats(r *Report, sj []simJob) ObjectiveStats {
	st := ObjectiveStats{UnallocatedPct: 100 * (1 - r.Utilization), KWh: a.pw.joules / 3.6e6, Cost: a.pw.cost / 3600}
	sum, n := map[string]float64{}, map[string]int{}
	var names []string
	for i := range sj {
		j := &sj[i]
		if j.end < 0 {
			continue
		}
		if n[j.tj.Queue] == 0 {
			names = append(names, j.tj.Queue)
		}
		sum[j.tj.Queue] += float64(j.end-j.tj.Submit) / float64(max(j.tj.RuntimeSeconds, 1))
		n[j.tj.Queue]++
	}
	var xs []float64
	for _, q := range names {
		xs = append(xs, float64(n[q])/sum[q])
	}
	st.Jain = objective.Jain(xs)
	return st
}
