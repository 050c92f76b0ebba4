package jobsim

import (
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
	s, err := jobs.New(nodes, o.Queues, o.Reservations, o.Options)
	if err != nil {
		return nil, fmt.Errorf("jobsim: replay: %w", err)
	}
	capRes := s.Capacity()
	capGPUs := float64(capRes.GPUMilli)/allocator.MilliPerGPU + float64(capRes.MIGSlices)/jobs.MIGSlicesPerGPU
	sorted := slices.IsSortedFunc(trace, func(a, b TraceJob) int { return int(a.Submit - b.Submit) })
	if !sorted {
		return nil, fmt.Errorf("jobsim: replay: trace not sorted by submit_s: sort it first")
	}
	sj := make([]simJob, len(trace))
	index := make(map[string]int, len(trace))
	for i := range trace {
		sj[i] = simJob{tj: &trace[i], gpus: gpus(&trace[i]), remaining: trace[i].RuntimeSeconds, firstStart: -1, end: -1}
		index[trace[i].ID] = i
	}
	acc := newAccounting(o, capGPUs)
	var h eventHeap
	next, done := 0, 0
	var last jobs.Result
	for next < len(trace) || h.Len() > 0 {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("jobsim: replay: %w", err)
		}
		t := int64(-1)
		if next < len(trace) {
			t = trace[next].Submit
		}
		if h.Len() > 0 && (t < 0 || h[0].t < t) {
			t = h[0].t
		}
		acc.advance(t)
		for h.Len() > 0 && h[0].t == t {
			ev := heap.Pop(&h).(finishEvent)
			j := &sj[ev.id]
			if ev.epoch != j.epoch || !j.running {
				continue // preempted since
			}
			if err := s.Finish(j.tj.ID); err != nil {
				return nil, fmt.Errorf("jobsim: replay: %w", err)
			}
			j.running, j.end = false, t
			acc.change(j, -1)
			if done++; o.Progress != nil && done%1000 == 0 {
				o.Progress(done, len(trace))
			}
		}
		for next < len(trace) && trace[next].Submit == t {
			if err := s.Submit(trace[next].Job); err != nil {
				return nil, fmt.Errorf("jobsim: replay: job %s: %w", trace[next].ID, err)
			}
			next++
		}
		last = s.Schedule(t)
		for _, p := range last.Preempted {
			j := &sj[index[p.JobID]]
			elapsed := t - j.runStart
			lost := elapsed
			if j.tj.Checkpointable {
				lost = elapsed % o.CheckpointSeconds
			}
			j.remaining -= elapsed - lost
			j.running = false
			j.epoch++
			acc.preempt(j, lost)
			acc.change(j, -1)
		}
		for _, st := range last.Started {
			j := &sj[index[st.JobID]]
			j.running, j.runStart = true, t
			if j.firstStart < 0 {
				j.firstStart = t
			}
			if st.Backfilled {
				acc.backfilled++
			}
			acc.change(j, 1)
			heap.Push(&h, finishEvent{t: t + j.remaining, id: index[st.JobID], epoch: j.epoch})
		}
		if next == len(trace) && h.Len() == 0 {
			break // what is left pending can never start
		}
	}
	r := acc.report(o.Policy, sj)
	for _, p := range last.Pending {
		r.Unfinished++
		code := p.Reason.Code
		if r.PendingReasons[code] == 0 {
			r.PendingExamples = append(r.PendingExamples, p.JobID+": "+p.Reason.String())
		}
		r.PendingReasons[code]++
	}
	slices.Sort(r.PendingExamples)
	r.Policy = strings.TrimSpace(o.Policy)
	return r, nil
}
