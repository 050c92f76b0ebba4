package jobsim

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/gpud/gpud/pkg/allocator"
)

// Report is what one replay measured. Times are seconds.
type Report struct {
	Policy               string
	Jobs, Completed      int
	Unfinished           int
	AvgJCT, P95JCT       float64
	AvgWait, P95Wait     float64
	GangJobs             int
	AvgGangWait, P95Gang float64
	Utilization          float64   // time-average allocated GPUs / capacity
	Timeline             []float64 // utilization per equal time bucket
	Makespan             int64
	Preemptions          int
	LostGPUHours         float64
	Backfilled           int
	Queues               []QueueShare
	PendingReasons       map[string]int
	PendingExamples      []string
	// Estimates describes the runtime estimates jobs were submitted with.
	Estimates EstimateStats
	// Failures is what injected GPU failures cost; nil without failures.
	Failures *FailureStats
	// Objectives are the measures an operator's objectives weigh.
	Objectives             ObjectiveStats
	objRows                bool
	capGPUs, gpuSecondsUse float64
}

// QueueShare is one queue's time-average share of the cluster's GPUs
// against its entitlement (guaranteed share).
type QueueShare struct {
	Name        string
	Entitlement float64
	Share       float64
	AvgWait     float64
}

type accounting struct {
	o          ReplayOptions
	capGPUs    float64
	t0, t      int64
	started    bool
	alloc      float64
	byQueue    map[string]float64
	queueInt   map[string]float64
	steps      []step
	preempts   int
	lostGPUSec float64
	backfilled int
	pw         *power
}

type step struct {
	t     int64
	alloc float64
}

func newAccounting(o ReplayOptions, capGPUs float64, nodes []allocator.Node) *accounting {
	return &accounting{o: o, capGPUs: capGPUs, byQueue: map[string]float64{}, queueInt: map[string]float64{}, pw: newPower(nodes, o.Models)}
}

func (a *accounting) advance(t int64) {
	if !a.started {
		a.t0, a.t, a.started = t, t, true
	}
	if dt := float64(t - a.t); dt > 0 {
		for q, g := range a.byQueue {
			a.queueInt[q] += g * dt
		}
		a.pw.advance(dt)
	}
	a.t = t
}

func (a *accounting) change(j *simJob, sign float64) {
	a.alloc += sign * j.gpus
	a.byQueue[j.tj.Queue] += sign * j.gpus
	a.steps = append(a.steps, step{a.t, a.alloc})
	a.pw.change(j, sign, a.t)
}

func (a *accounting) preempt(j *simJob, lostSeconds int64) {
	a.preempts++
	a.lostGPUSec += j.gpus * float64(lostSeconds)
}

func (a *accounting) report(policy string, sj []simJob) *Report {
	r := &Report{Policy: policy, Jobs: len(sj), Preemptions: a.preempts, LostGPUHours: a.lostGPUSec / 3600,
		Backfilled: a.backfilled, PendingReasons: map[string]int{}, capGPUs: a.capGPUs}
	var jct, wait, gang []float64
	waitByQueue := map[string][]float64{}
	for i := range sj {
		j := &sj[i]
		if j.end < 0 {
			continue
		}
		r.Completed++
		jct = append(jct, float64(j.end-j.tj.Submit))
		w := float64(j.firstStart - j.tj.Submit)
		wait = append(wait, w)
		waitByQueue[j.tj.Queue] = append(waitByQueue[j.tj.Queue], w)
		if j.tj.Pods > 1 {
			gang = append(gang, w)
		}
	}
	r.GangJobs = len(gang)
	r.AvgJCT, r.P95JCT = mean(jct), p95(jct)
	r.AvgWait, r.P95Wait = mean(wait), p95(wait)
	r.AvgGangWait, r.P95Gang = mean(gang), p95(gang)
	r.Makespan = a.t - a.t0
	span := float64(r.Makespan)
	if span > 0 && a.capGPUs > 0 {
		var integral float64
		nb := int64(a.o.Buckets)
		bound := func(b int64) int64 { return a.t0 + r.Makespan*b/nb } // bucket b is [bound(b), bound(b+1))
		buckets := make([]float64, nb)
		for k, s := range a.steps {
			end := a.t
			if k+1 < len(a.steps) {
				end = a.steps[k+1].t
			}
			integral += s.alloc * float64(end-s.t)
			for b := int64(0); b < nb; b++ {
				lo, hi := max(s.t, bound(b)), min(end, bound(b+1))
				if hi > lo {
					buckets[b] += s.alloc * float64(hi-lo)
				}
			}
		}
		for b := range buckets {
			if w := bound(int64(b)+1) - bound(int64(b)); w > 0 {
				buckets[b] /= float64(w) * a.capGPUs
			}
		}
		r.Utilization = integral / span / a.capGPUs
		r.Timeline = buckets
		r.gpuSecondsUse = integral
	}
	for _, q := range a.o.Queues {
		qs := QueueShare{Name: q.Name, AvgWait: mean(waitByQueue[q.Name])}
		if a.capGPUs > 0 {
			qs.Entitlement = float64(q.Quota.Guaranteed.GPUMilli) / 1000 / a.capGPUs
			if span > 0 {
				qs.Share = a.queueInt[q.Name] / span / a.capGPUs
			}
		}
		r.Queues = append(r.Queues, qs)
	}
	return r
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func p95(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(len(s)-1, int(math.Ceil(0.95*float64(len(s))))-1)]
}

// WriteReports prints reports side by side, then each metric of the first
// as a ratio to every other (below 1 is better for times and losses, above 1
// for utilization).
func WriteReports(w io.Writer, rs []*Report) error {
	if len(rs) == 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-28s", "metric")
	for _, r := range rs {
		fmt.Fprintf(&b, " %14s", r.Policy)
	}
	b.WriteString("\n")
	metrics := []metric{
		{"jobs completed", func(r *Report) float64 { return float64(r.Completed) }, "%14.0f", false},
		{"jobs never started/finished", func(r *Report) float64 { return float64(r.Unfinished) }, "%14.0f", false},
		{"avg JCT (h)", func(r *Report) float64 { return r.AvgJCT / 3600 }, "%14.3f", false},
		{"p95 JCT (h)", func(r *Report) float64 { return r.P95JCT / 3600 }, "%14.3f", false},
		{"avg queueing delay (h)", func(r *Report) float64 { return r.AvgWait / 3600 }, "%14.3f", false},
		{"p95 queueing delay (h)", func(r *Report) float64 { return r.P95Wait / 3600 }, "%14.3f", false},
		{"gang jobs", func(r *Report) float64 { return float64(r.GangJobs) }, "%14.0f", false},
		{"avg gang wait (h)", func(r *Report) float64 { return r.AvgGangWait / 3600 }, "%14.3f", false},
		{"p95 gang wait (h)", func(r *Report) float64 { return r.P95Gang / 3600 }, "%14.3f", false},
		{"GPU utilization (time avg)", func(r *Report) float64 { return r.Utilization }, "%14.3f", false},
		{"makespan (h)", func(r *Report) float64 { return float64(r.Makespan) / 3600 }, "%14.1f", false},
		{"preemptions", func(r *Report) float64 { return float64(r.Preemptions) }, "%14.0f", false},
		{"GPU-hours lost to preemption", func(r *Report) float64 { return r.LostGPUHours }, "%14.1f", false},
		{"backfilled starts", func(r *Report) float64 { return float64(r.Backfilled) }, "%14.0f", false},
	}
	metrics = append(metrics, extraMetrics(rs)...)
	for _, m := range metrics {
		fmt.Fprintf(&b, "%-28s", m.name)
		for _, r := range rs {
			fmt.Fprintf(&b, " "+m.f, m.get(r))
		}
		b.WriteString("\n")
	}
	for k := range rs[0].Timeline {
		fmt.Fprintf(&b, "%-28s", fmt.Sprintf("utilization t%02d/%d", k+1, len(rs[0].Timeline)))
		for _, r := range rs {
			if k < len(r.Timeline) {
				fmt.Fprintf(&b, " %14.3f", r.Timeline[k])
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("\nper-queue GPU share vs entitlement (share/entitled, avg wait h)\n")
	for qi, q := range rs[0].Queues {
		fmt.Fprintf(&b, "%-28s", fmt.Sprintf("  %s (entitled %.2f)", q.Name, q.Entitlement))
		for _, r := range rs {
			if qi < len(r.Queues) {
				x := r.Queues[qi]
				fmt.Fprintf(&b, " %14s", fmt.Sprintf("%.3f/%.2f %.2fh", x.Share, x.Entitlement, x.AvgWait/3600))
			}
		}
		b.WriteString("\n")
	}
	if len(rs) > 1 {
		fmt.Fprintf(&b, "\nratios %s / other (times, losses: <1 better; utilization: >1 better)\n", rs[0].Policy)
		fmt.Fprintf(&b, "%-28s", "metric")
		for _, r := range rs[1:] {
			fmt.Fprintf(&b, " %14s", "vs "+r.Policy)
		}
		b.WriteString("\n")
		for _, m := range metrics {
			if m.name == "gang jobs" || m.name == "jobs completed" || m.name == "backfilled starts" || m.noRatio {
				continue
			}
			fmt.Fprintf(&b, "%-28s", m.name)
			for _, r := range rs[1:] {
				fmt.Fprintf(&b, " %14s", ratio(m.get(rs[0]), m.get(r)))
			}
			b.WriteString("\n")
		}
	}
	for _, r := range rs {
		if len(r.PendingReasons) == 0 {
			continue
		}
		codes := make([]string, 0, len(r.PendingReasons))
		for c := range r.PendingReasons {
			codes = append(codes, c)
		}
		slices.Sort(codes)
		fmt.Fprintf(&b, "\n%s: jobs left pending by reason:", r.Policy)
		for _, c := range codes {
			fmt.Fprintf(&b, " %s=%d", c, r.PendingReasons[c])
		}
		b.WriteString("\n")
		for _, e := range r.PendingExamples {
			fmt.Fprintf(&b, "  e.g. %s\n", e)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// ratio prints a/b; against a zero it prints both values instead of an
// infinite ratio (preemptions against a policy that never preempts).
func ratio(a, b float64) string {
	switch {
	case b == 0 && a == 0:
		return "1.000"
	case b == 0:
		return fmt.Sprintf("%.4g vs 0", a)
	}
	return fmt.Sprintf("%.3f", a/b)
}

type metric struct {
	name    string
	get     func(r *Report) float64
	f       string
	noRatio bool
}

// extraMetrics are the estimate rows (when any report's estimates are not
// the trace's own) and failure rows (when any report injected failures).
func extraMetrics(rs []*Report) []metric {
	var est, fail, obj bool
	for _, r := range rs {
		est = est || r.Estimates.Source != EstimateUser
		fail = fail || r.Failures != nil
		obj = obj || r.objRows
	}
	var out []metric
	if obj {
		out = append(out,
			metric{"GPUs unallocated % (avg)", func(r *Report) float64 { return r.Objectives.UnallocatedPct }, "%14.2f", false},
			metric{"Jain fairness (queues)", func(r *Report) float64 { return r.Objectives.Jain }, "%14.3f", false},
			metric{"GPU energy (kWh)", func(r *Report) float64 { return r.Objectives.KWh }, "%14.1f", false},
			metric{"GPU cost", func(r *Report) float64 { return r.Objectives.Cost }, "%14.2f", false})
	}
	if est {
		out = append(out,
			metric{"jobs with an estimate", func(r *Report) float64 { return r.Estimates.Coverage }, "%14.3f", true},
			metric{"median |est-run|/run", func(r *Report) float64 { return r.Estimates.MedianError }, "%14.3f", true},
			metric{"p90 |est-run|/run", func(r *Report) float64 { return r.Estimates.P90Error }, "%14.3f", true},
			metric{"estimates below runtime", func(r *Report) float64 { return r.Estimates.Under }, "%14.3f", true})
	}
	if fail {
		f := func(get func(*FailureStats) float64) func(*Report) float64 {
			return func(r *Report) float64 {
				if r.Failures == nil {
					return 0
				}
				return get(r.Failures)
			}
		}
		out = append(out,
			metric{"GPU failure events", f(func(s *FailureStats) float64 { return float64(s.Events) }), "%14.0f", true},
			metric{"GPUs failed", f(func(s *FailureStats) float64 { return float64(s.GPUsFailed) }), "%14.0f", true},
			metric{"jobs hit by a failure", f(func(s *FailureStats) float64 { return float64(s.JobsHit) }), "%14.0f", true},
			metric{"GPU-h lost to failures", f(func(s *FailureStats) float64 { return s.LostGPUHours }), "%14.1f", false},
			metric{"  of which hung (h)", f(func(s *FailureStats) float64 { return s.HangGPUHours }), "%14.1f", false},
			// A longer run sees more failures: compare per event too.
			metric{"  per failure event (h)", f(func(s *FailureStats) float64 { return s.LostGPUHours / float64(max(s.Events, 1)) }), "%14.2f", false},
			metric{"GPU-h out for repair", f(func(s *FailureStats) float64 { return s.RepairGPUHours }), "%14.1f", true})
	}
	return out
}
