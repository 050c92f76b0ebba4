package jobsim

import (
	"cmp"
	"container/heap"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/gpud/gpud/pkg/allocator"
	"github.com/gpud/gpud/pkg/allocator/jobs"
)

// Policies maps the names `gpud sim jobs --policies` accepts to scheduler
// options: gpud (fair share, backfill, preemption), fifo (arrival order,
// nothing else), no-backfill (fair share and quotas, but neither
// backfill nor preemption), and [MorePolicyNames]: sjf (fifo with the
// shortest estimate first) and las (least attained service).
var Policies = map[string]jobs.Options{
	"gpud":        jobs.Gpud,
	"fifo":        {},
	"no-backfill": {FairShare: true},
	"sjf":         {Order: jobs.OrderShortest},
	"las":         {Order: jobs.OrderLAS, Preemption: true},
}

// PolicyNames lists [Policies] in report order.
var PolicyNames = []string{"gpud", "fifo", "no-backfill"}

// Bounds on [ReplayOptions].
const (
	// MaxCheckpointSeconds bounds ReplayOptions.CheckpointSeconds.
	MaxCheckpointSeconds = 30 * 86400
	// MaxBuckets bounds ReplayOptions.Buckets.
	MaxBuckets = 1000
)

// ReplayOptions configure one replay.
type ReplayOptions struct {
	Policy  string
	Options jobs.Options
	Queues  []jobs.Queue
	// Reservations are passed to the scheduler as they are.
	Reservations []jobs.Reservation
	// CheckpointSeconds is how often checkpointable jobs checkpoint: a
	// preempted one loses the work since its last checkpoint; 0 means 1800.
	CheckpointSeconds int64
	// Buckets is the number of utilization-timeline points; 0 means 12.
	Buckets int
	// Progress, if set, is called every 1,000 completions.
	Progress func(done, total int)
	// Estimates is where jobs' runtime estimates come from: one of
	// [EstimateNames]; "" means EstimateUser.
	Estimates string
	// Learn configures learned estimates.
	Learn LearnOptions
	// Failures injects GPU failures (none when RatePerGPUDay is 0).
	Failures FailureOptions
	// Models is the GPU power and price table energy and cost are
	// measured with; nil means objective.DefaultModels().
	Models map[string]jobs.ModelPower
	// ObjectiveRows prints the objective measures (unallocated %, Jain
	// fairness, kWh, cost) in [WriteReports].
	ObjectiveRows bool
}

type simJob struct {
	tj         *TraceJob
	gpus       float64
	remaining  int64
	runStart   int64
	firstStart int64
	end        int64
	epoch      int
	running    bool
	est        int64 // the estimate it was submitted with
	pods       []jobs.PodPlacement
	hung       bool // on a failed GPU, holding its GPUs, not progressing
	hungAt     int64
}

// Event kinds: a job's end, the restart of a job hung on a failed GPU, a
// failed GPU's repair (id indexes the failure model's GPUs).
const (
	evFinish = iota
	evRestart
	evRepair
)

type finishEvent struct {
	t     int64
	id    int
	epoch int
	kind  int
}

type eventHeap []finishEvent

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	a, b := h[i], h[j]
	return a.t < b.t || (a.t == b.t && (a.kind < b.kind || (a.kind == b.kind && a.id < b.id)))
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(finishEvent)) }
func (h *eventHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Replay runs the trace (sorted by submit_s) on nodes and measures it. It
// schedules at every distinct arrival or completion time. ctx cancels it.
func Replay(ctx context.Context, nodes []allocator.Node, trace []TraceJob, o ReplayOptions) (*Report, error) {
	if o.CheckpointSeconds <= 0 {
		o.CheckpointSeconds = 1800
	}
	if o.Buckets <= 0 {
		o.Buckets = 12
	}
	if !slices.IsSortedFunc(trace, func(a, b TraceJob) int { return cmp.Compare(a.Submit, b.Submit) }) {
		return nil, fmt.Errorf("jobsim: replay: trace not sorted by submit_s: sort it first")
	}
	rp, err := newReplay(nodes, trace, o)
	if err != nil {
		return nil, fmt.Errorf("jobsim: replay: %w", err)
	}
	var last jobs.Result
	for rp.next < len(trace) || rp.events.Len() > 0 || (rp.repairs.Len() > 0 && len(last.Pending) > 0) {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("jobsim: replay: %w", err)
		}
		t := rp.nextTime()
		rp.acc.advance(t)
		if err := rp.eventsDue(t); err != nil {
			return nil, fmt.Errorf("jobsim: replay: %w", err)
		}
		if err := rp.submitDue(t); err != nil {
			return nil, fmt.Errorf("jobsim: replay: %w", err)
		}
		last = rp.s.Schedule(t)
		rp.apply(last, t)
		if rp.next == len(trace) && rp.events.Len() == 0 && (rp.repairs.Len() == 0 || len(last.Pending) == 0) {
			break // what is left pending can never start, even once failed GPUs are back
		}
	}
	r := rp.acc.report(o.Policy, rp.jobs)
	r.Objectives = rp.acc.objectiveStats(r, rp.jobs)
	r.objRows = o.ObjectiveRows
	addPending(r, last.Pending)
	r.Policy = strings.TrimSpace(o.Policy)
	r.Estimates = rp.learn.stats()
	if rp.faults.meanS > 0 {
		st := rp.faults.stats
		r.Failures = &st
	}
	return r, nil
}

// replay is the state of one [Replay]: the scheduler, the jobs as the
// simulator sees them, and the pending finish events.
type replay struct {
	o      ReplayOptions
	s      *jobs.Scheduler
	trace  []TraceJob
	jobs   []simJob
	index  map[string]int // job ID -> index in trace and jobs
	acc    *accounting
	events eventHeap // job ends and restarts
	next   int       // first trace job not yet submitted
	done   int
	learn  *learner
	faults *faults
	// repairs are failed GPUs' repairs; they keep the replay going only
	// while jobs are pending.
	repairs eventHeap
}

func newReplay(nodes []allocator.Node, trace []TraceJob, o ReplayOptions) (*replay, error) {
	s, err := jobs.New(nodes, o.Queues, o.Reservations, o.Options)
	if err != nil {
		return nil, err
	}
	l, err := newLearner(o.Estimates, o.Learn)
	if err != nil {
		return nil, err
	}
	if err := o.Failures.defaults(); err != nil {
		return nil, err
	}
	var t0 int64
	if len(trace) > 0 {
		t0 = trace[0].Submit
	}
	capRes := s.Capacity()
	capGPUs := float64(capRes.GPUMilli)/allocator.MilliPerGPU + float64(capRes.MIGSlices)/jobs.MIGSlicesPerGPU
	rp := &replay{o: o, s: s, trace: trace, jobs: make([]simJob, len(trace)), index: make(map[string]int, len(trace)), acc: newAccounting(o, capGPUs, nodes),
		learn: l, faults: newFaults(nodes, o.Failures, t0)}
	for i := range trace {
		rp.jobs[i] = simJob{tj: &trace[i], gpus: gpus(&trace[i]), remaining: trace[i].RuntimeSeconds, firstStart: -1, end: -1}
		rp.index[trace[i].ID] = i
	}
	return rp, nil
}

// nextTime is the earliest of the next arrival, job event, repair and,
// while work remains, GPU failure.
func (rp *replay) nextTime() int64 {
	t := int64(-1)
	earlier := func(x int64) {
		if t < 0 || x < t {
			t = x
		}
	}
	if rp.next < len(rp.trace) {
		earlier(rp.trace[rp.next].Submit)
	}
	if rp.events.Len() > 0 {
		earlier(rp.events[0].t)
	}
	if rp.repairs.Len() > 0 {
		earlier(rp.repairs[0].t)
	}
	if rp.faults.next >= 0 && (rp.next < len(rp.trace) || rp.events.Len() > 0) {
		if rp.acc.started && rp.faults.next < rp.acc.t {
			// Failures paused while nothing ran (only repairs were
			// due); the process is memoryless, so draw afresh.
			rp.faults.draw(rp.acc.t)
		}
		earlier(rp.faults.next)
	}
	return t
}

// eventsDue handles what happens at t: repairs, job ends and restarts,
// then failures.
func (rp *replay) eventsDue(t int64) error {
	for rp.repairs.Len() > 0 && rp.repairs[0].t == t {
		ev := heap.Pop(&rp.repairs).(finishEvent)
		g := rp.faults.gpus[ev.id]
		delete(rp.faults.failed, g)
		if _, err := rp.s.SetGPUHealth(g.node, g.gpu, true); err != nil {
			return err
		}
	}
	for rp.events.Len() > 0 && rp.events[0].t == t {
		ev := heap.Pop(&rp.events).(finishEvent)
		j := &rp.jobs[ev.id]
		if ev.epoch != j.epoch {
			continue // preempted or failed since
		}
		var err error
		switch {
		case ev.kind == evFinish && j.running && !j.hung:
			err = rp.finish(j, t)
		case ev.kind == evRestart && j.hung:
			err = rp.restart(j, t)
		}
		if err != nil {
			return err
		}
	}
	if rp.faults.next == t && (rp.next < len(rp.trace) || rp.events.Len() > 0) {
		if err := rp.fail(t); err != nil {
			return err
		}
		rp.faults.draw(t)
	}
	return nil
}

// finish ends j at t and teaches the learner its runtime.
func (rp *replay) finish(j *simJob, t int64) error {
	if err := rp.s.Finish(j.tj.ID); err != nil {
		return err
	}
	j.running, j.end = false, t
	rp.acc.change(j, -1)
	if rp.done++; rp.o.Progress != nil && rp.done%1000 == 0 {
		rp.o.Progress(rp.done, len(rp.trace))
	}
	return rp.learn.finished(j.tj)
}

// fail takes the GPUs of one failure event down at t: each running job on
// them stops progressing (keeping the work up to its last checkpoint, none
// if not checkpointable) and hangs, holding its GPUs, until its restart.
func (rp *replay) fail(t int64) error {
	for _, g := range rp.faults.victims() {
		on, err := rp.s.SetGPUHealth(g.node, g.gpu, false)
		if err != nil {
			return err
		}
		heap.Push(&rp.repairs, finishEvent{t: t + rp.faults.o.RepairSeconds, id: rp.faults.index(g), kind: evRepair})
		for _, id := range on {
			j := &rp.jobs[rp.index[id]]
			if j.hung {
				continue
			}
			elapsed := t - j.runStart
			kept := int64(0)
			if j.tj.Checkpointable {
				kept = elapsed - elapsed%rp.o.CheckpointSeconds
			}
			j.remaining -= kept
			j.hung, j.hungAt = true, t
			j.epoch++
			rp.faults.stats.JobsHit++
			rp.faults.stats.LostGPUHours += j.gpus * float64(elapsed-kept) / 3600
			heap.Push(&rp.events, finishEvent{t: t + rp.faults.delay(), id: rp.index[id], epoch: j.epoch, kind: evRestart})
		}
	}
	return nil
}

// unhang ends j's hang at t, counting the GPU-hours it held.
func (rp *replay) unhang(j *simJob, t int64) {
	h := j.gpus * float64(t-j.hungAt) / 3600
	rp.faults.stats.HangGPUHours += h
	rp.faults.stats.LostGPUHours += h
	j.hung = false
	j.epoch++
}

// restart stops hung j at t and submits it again with the work left.
func (rp *replay) restart(j *simJob, t int64) error {
	rp.unhang(j, t)
	if err := rp.s.Finish(j.tj.ID); err != nil {
		return err
	}
	j.running = false
	rp.acc.change(j, -1)
	rp.faults.stats.Restarts++
	job := j.tj.Job
	job.EstimateSeconds = j.est
	return rp.s.Submit(job)
}

// submitDue submits the jobs that arrive at t.
func (rp *replay) submitDue(t int64) error {
	for rp.next < len(rp.trace) && rp.trace[rp.next].Submit == t {
		tj := &rp.trace[rp.next]
		est, err := rp.learn.estimate(tj)
		if err != nil {
			return fmt.Errorf("job %s: %w", tj.ID, err)
		}
		rp.jobs[rp.next].est = est
		job := tj.Job
		job.EstimateSeconds = est
		if err := rp.s.Submit(job); err != nil {
			return fmt.Errorf("job %s: %w", tj.ID, err)
		}
		rp.next++
	}
	return nil
}

// apply books a scheduling round at t: preempted jobs lose the work since
// their last checkpoint (all of it if not checkpointable), started jobs get
// a finish event.
func (rp *replay) apply(res jobs.Result, t int64) {
	for _, p := range res.Preempted {
		j := &rp.jobs[rp.index[p.JobID]]
		elapsed := t - j.runStart
		lost := elapsed
		if j.tj.Checkpointable {
			lost = elapsed % rp.o.CheckpointSeconds
		}
		if j.hung { // its work was counted when its GPU failed
			rp.unhang(j, t)
			elapsed, lost = 0, 0
		}
		j.remaining -= elapsed - lost
		j.running = false
		j.epoch++
		rp.acc.preempt(j, lost)
		rp.acc.change(j, -1)
	}
	for _, st := range res.Started {
		j := &rp.jobs[rp.index[st.JobID]]
		j.running, j.runStart, j.pods = true, t, st.Pods
		if j.firstStart < 0 {
			j.firstStart = t
		}
		if st.Backfilled {
			rp.acc.backfilled++
		}
		rp.acc.change(j, 1)
		heap.Push(&rp.events, finishEvent{t: t + j.remaining, id: rp.index[st.JobID], epoch: j.epoch})
	}
}

// addPending counts the jobs still pending by reason, with one example each.
func addPending(r *Report, pending []jobs.Pending) {
	for _, p := range pending {
		r.Unfinished++
		code := p.Reason.Code
		if r.PendingReasons[code] == 0 {
			r.PendingExamples = append(r.PendingExamples, p.JobID+": "+p.Reason.String())
		}
		r.PendingReasons[code]++
	}
	slices.Sort(r.PendingExamples)
}
