package schedbench

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"
)

// Result is one scheduler's run.
type Result struct {
	Scheduler string
	// Throughput phase: all Pods created before the scheduler starts.
	Pods  int
	Bound int
	// FirstBind and LastBind are when the first and the last pod was seen
	// bound, from the scheduler's start.
	FirstBind, LastBind time.Duration
	// Bind90 is when the Count90(Bound)-th pod was seen bound.
	Bind90 time.Duration
	// UnallocatedAfterBurst is the unallocated GPU % when the burst ended.
	UnallocatedAfterBurst float64
	// Fragmentation phase: pods fed in trace order, one at a time.
	FedBound     int     // pods bound before the first that did not fit
	Unallocated  float64 // unallocated GPU % at that point
	FirstFailure string  // that pod and the scheduler's reason
	// FeedPlaced and FeedFailed count the whole feed (pods that did not
	// fit are dropped and the feed goes on); UnallocatedEnd is the
	// unallocated GPU % after it.
	FeedPlaced, FeedFailed int
	UnallocatedEnd         float64
	OverAllocated          int // devices holding more than a whole GPU (must be 0)
	FeedLatencyP50         time.Duration
	FeedLatencyP99         time.Duration
	// LongestPause is the longest time between two binds in the burst
	// ([LongestPause]).
	LongestPause time.Duration
	// PeakRSSBytes and BurstCPU are the scheduler process's peak resident
	// memory and CPU time (user and system) from its start to the burst's
	// end.
	PeakRSSBytes int64
	BurstCPU     time.Duration
}

// PodsPerSecond is the burst's binding rate: pods bound after the first,
// over the time from the first bind to the last.
func (r Result) PodsPerSecond() float64 {
	span := (r.LastBind - r.FirstBind).Seconds()
	if r.Bound < 2 || span <= 0 {
		return 0
	}
	return float64(r.Bound-1) / span
}

// Count90 is 90% of n pods, rounded up (at least 1).
func Count90(n int) int { return max(1, (9*n+9)/10) }

// PodsPerSecond90 is the binding rate up to 90% of the pods bound: as
// [Result.PodsPerSecond] without the tail of the last pods.
func (r Result) PodsPerSecond90() float64 {
	span := (r.Bind90 - r.FirstBind).Seconds()
	k := Count90(r.Bound)
	if k < 2 || span <= 0 {
		return 0
	}
	return float64(k-1) / span
}

// BaselineName is the scheduler the ratio divides by.
const BaselineName = "kube-scheduler"

// Table prints results with each scheduler's throughput ratio to
// kube-scheduler's ([BaselineName]; the first result's when it is absent).
func Table(results []Result) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "\tburst\t\t\t\t\t\t\tfeed in trace order\t\t\t\t\t\t")
	fmt.Fprintln(w, "scheduler\tpods\tbound\tbound/s\tratio\tbound/s to 90%\tbinds from\tunalloc GPU %\tunalloc GPU % at 1st failure\tbound before 1st failure\tunalloc GPU % at end\tplaced/failed\tp50\tp99\t")
	base := 0.0
	if len(results) > 0 {
		base = results[0].PodsPerSecond()
	}
	for _, r := range results {
		if r.Scheduler == BaselineName {
			base = r.PodsPerSecond()
		}
	}
	for _, r := range results {
		rate := r.PodsPerSecond()
		ratio := "-"
		if base > 0 {
			ratio = fmt.Sprintf("%.2f", rate/base)
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%.1f\t%s\t%.1f\t%.1f-%.1fs\t%.2f\t%.2f\t%d\t%.2f\t%d/%d\t%s\t%s\t\n",
			r.Scheduler, r.Pods, r.Bound, rate, ratio, r.PodsPerSecond90(), r.FirstBind.Seconds(), r.LastBind.Seconds(),
			r.UnallocatedAfterBurst, r.Unallocated, r.FedBound, r.UnallocatedEnd, r.FeedPlaced, r.FeedFailed,
			r.FeedLatencyP50.Round(time.Millisecond), r.FeedLatencyP99.Round(time.Millisecond))
	}
	w.Flush()
	for _, r := range results {
		fmt.Fprintf(&b, "%s: first pod that did not fit: %s", r.Scheduler, r.FirstFailure)
		if r.OverAllocated > 0 {
			fmt.Fprintf(&b, " (OVER-ALLOCATED: %d devices hold more than a GPU)", r.OverAllocated)
		}
		b.WriteString("\n")
	}
	return b.String()
}
