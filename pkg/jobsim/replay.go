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
// nothing else) and no-backfill (fair share and quotas, but neither
// backfill nor preemption).
var Policies = map[string]jobs.Options{
	"gpud":        jobs.Gpud,
	"fifo":        {},
	"no-backfill": {FairShare: true},
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
}

type finishEvent struct {
	t     int64
	id    int
	epoch int
}

type eventHeap []finishEvent

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	return h[i].t < h[j].t || (h[i].t == h[j].t && h[i].id < h[j].id)
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
	for rp.next < len(trace) || rp.events.Len() > 0 {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("jobsim: replay: %w", err)
		}
		t := rp.nextTime()
		rp.acc.advance(t)
		if err := rp.finishDue(t); err != nil {
			return nil, fmt.Errorf("jobsim: replay: %w", err)
		}
		if err := rp.submitDue(t); err != nil {
			return nil, fmt.Errorf("jobsim: replay: %w", err)
		}
		last = rp.s.Schedule(t)
		rp.apply(last, t)
		if rp.next == len(trace) && rp.events.Len() == 0 {
			break // what is left pending can never start
		}
	}
	r := rp.acc.report(o.Policy, rp.jobs)
	addPending(r, last.Pending)
	r.Policy = strings.TrimSpace(o.Policy)
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
	events eventHeap
	next   int // first trace job not yet submitted
	done   int
}

func newReplay(nodes []allocator.Node, trace []TraceJob, o ReplayOptions) (*replay, error) {
	s, err := jobs.New(nodes, o.Queues, o.Reservations, o.Options)
	if err != nil {
		return nil, err
	}
	capRes := s.Capacity()
	capGPUs := float64(capRes.GPUMilli)/allocator.MilliPerGPU + float64(capRes.MIGSlices)/jobs.MIGSlicesPerGPU
	rp := &replay{o: o, s: s, trace: trace, jobs: make([]simJob, len(trace)), index: make(map[string]int, len(trace)), acc: newAccounting(o, capGPUs)}
	for i := range trace {
		rp.jobs[i] = simJob{tj: &trace[i], gpus: gpus(&trace[i]), remaining: trace[i].RuntimeSeconds, firstStart: -1, end: -1}
		rp.index[trace[i].ID] = i
	}
	return rp, nil
}

// nextTime is the earlier of the next arrival and the next finish event.
func (rp *replay) nextTime() int64 {
	t := int64(-1)
	if rp.next < len(rp.trace) {
		t = rp.trace[rp.next].Submit
	}
	if rp.events.Len() > 0 && (t < 0 || rp.events[0].t < t) {
		t = rp.events[0].t
	}
	return t
}

// finishDue ends the jobs whose finish event is at t, skipping events of
// jobs preempted since.
func (rp *replay) finishDue(t int64) error {
	for rp.events.Len() > 0 && rp.events[0].t == t {
		ev := heap.Pop(&rp.events).(finishEvent)
		j := &rp.jobs[ev.id]
		if ev.epoch != j.epoch || !j.running {
			continue // preempted since
		}
		if err := rp.s.Finish(j.tj.ID); err != nil {
			return err
		}
		j.running, j.end = false, t
		rp.acc.change(j, -1)
		if rp.done++; rp.o.Progress != nil && rp.done%1000 == 0 {
			rp.o.Progress(rp.done, len(rp.trace))
		}
	}
	return nil
}

// submitDue submits the jobs that arrive at t.
func (rp *replay) submitDue(t int64) error {
	for rp.next < len(rp.trace) && rp.trace[rp.next].Submit == t {
		if err := rp.s.Submit(rp.trace[rp.next].Job); err != nil {
			return fmt.Errorf("job %s: %w", rp.trace[rp.next].ID, err)
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
		j.remaining -= elapsed - lost
		j.running = false
		j.epoch++
		rp.acc.preempt(j, lost)
		rp.acc.change(j, -1)
	}
	for _, st := range res.Started {
		j := &rp.jobs[rp.index[st.JobID]]
		j.running, j.runStart = true, t
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
