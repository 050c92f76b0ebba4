package schedbench

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpud/gpud/pkg/trace"
)

// ScaleNodes builds a synthetic cluster of n GPU nodes from a trace's node
// models (make scale-bench): the trace's GPU nodes are shuffled
// (deterministically for seed) and repeated in that order, copy k of a node
// named <name>-r<k> (the first copy keeps the trace's name). At a multiple of
// the trace's GPU node count the model mix (GPU model and count, CPU,
// memory) is exactly the trace's; below it, a uniform draw of it. The result
// is sorted by name.
func ScaleNodes(nodes []trace.Node, n int, seed uint64) []trace.Node {
	var pool []trace.Node
	for _, x := range nodes {
		if x.NumGPU > 0 {
			pool = append(pool, x)
		}
	}
	if len(pool) == 0 || n <= 0 {
		return nil
	}
	r := rand.New(rand.NewPCG(seed, seed^0xbf58476d1ce4e5b9))
	r.Shuffle(len(pool), func(i, j int) { pool[i], pool[j] = pool[j], pool[i] })
	out := make([]trace.Node, n)
	for i := range out {
		x := pool[i%len(pool)]
		if k := i / len(pool); k > 0 {
			x.Name = fmt.Sprintf("%s-r%d", x.Name, k)
		}
		out[i] = x
	}
	slices.SortFunc(out, func(a, b trace.Node) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// SampleScaled is [Sample] for any n: up to the expressible pods' count it
// is Sample; past it, further draws of the whole list (seed+1, seed+2, ...)
// are added, copy k of a pod named <name>-r<k>, and the result is in trace
// order (creation time; copies after their original).
func SampleScaled(pods []trace.Pod, n int, seed uint64) []trace.Pod {
	out := Sample(pods, n, seed)
	if len(out) == 0 {
		return out
	}
	for k := 1; len(out) < n; k++ {
		more := Sample(pods, n-len(out), seed+uint64(k))
		for i := range more {
			more[i].Name = fmt.Sprintf("%s-r%d", more[i].Name, k)
		}
		out = append(out, more...)
	}
	slices.SortStableFunc(out, func(a, b trace.Pod) int { return cmp.Compare(a.CreationTime, b.CreationTime) })
	return out
}

// LongestPause is the longest time between two consecutive binds (times
// sorted), from the first bind to the last: while it lasts, pods the
// scheduler places later wait with nothing bound. Zero below two binds.
func LongestPause(times []time.Time) time.Duration {
	var longest time.Duration
	for i := 1; i < len(times); i++ {
		longest = max(longest, times[i].Sub(times[i-1]))
	}
	return longest
}

// ProcUsage is a process's peak resident memory and CPU time so far, from
// /proc.
type ProcUsage struct {
	PeakRSSBytes int64
	CPU          time.Duration
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's CPU times (100 on
// every Linux architecture Go supports).
const clockTicks = 100

// ReadProcUsage reads pid's peak RSS (VmHWM) and user+system CPU time.
func ReadProcUsage(pid int) (ProcUsage, error) {
	var u ProcUsage
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, fmt.Errorf("schedbench: process usage: %w", err)
	}
	for line := range strings.SplitSeq(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return u, fmt.Errorf("schedbench: process usage: VmHWM %q: %w", rest, err)
			}
			u.PeakRSSBytes = kb << 10
		}
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, fmt.Errorf("schedbench: process usage: %w", err)
	}
	cpu, err := parseStatCPU(string(stat))
	if err != nil {
		return u, fmt.Errorf("schedbench: process usage: pid %d: %w", pid, err)
	}
	u.CPU = cpu
	return u, nil
}

// parseStatCPU returns utime+stime of a /proc/<pid>/stat line. The command
// name (field 2) is in parentheses and may hold spaces, so fields are
// counted after its closing parenthesis.
func parseStatCPU(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("stat %q: no command name", stat)
	}
	f := strings.Fields(stat[i+1:])
	// After the name: state is field 3, utime 14 and stime 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("stat %q: %d fields after the name, want at least 13", stat, len(f))
	}
	var ticks int64
	for _, s := range f[11:13] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 0 {
			return 0, fmt.Errorf("stat %q: CPU time %q is not a count of ticks", stat, s)
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// ScaleTable prints issue 25's figures for each scheduler of one run, with
// each one's throughput as a multiple of kube-scheduler's.
func ScaleTable(results []Result) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "scheduler\tbound\tpods/s\tratio\tlongest pause\tfirst bind\tfeed p50\tfeed p99\tpeak RSS MiB\tCPU-s per 1,000 pods\tunalloc GPU % at 1st failure\t")
	base := 0.0
	for _, r := range results {
		if r.Scheduler == BaselineName {
			base = r.PodsPerSecond()
		}
	}
	for _, r := range results {
		ratio := "-"
		if base > 0 {
			ratio = fmt.Sprintf("%.2f", r.PodsPerSecond()/base)
		}
		unalloc := "- (all fit)"
		switch {
		case r.FeedFailed > 0:
			unalloc = fmt.Sprintf("%.2f (feed)", r.Unallocated)
		case r.Bound < r.Pods:
			unalloc = fmt.Sprintf("%.2f (burst)", r.UnallocatedAfterBurst)
		}
		perK := "-"
		if r.Bound > 0 {
			perK = fmt.Sprintf("%.1f", r.BurstCPU.Seconds()*1000/float64(r.Bound))
		}
		fmt.Fprintf(w, "%s\t%d/%d\t%.1f\t%s\t%.1fs\t%.1fs\t%s\t%s\t%d\t%s\t%s\t\n",
			r.Scheduler, r.Bound, r.Pods, r.PodsPerSecond(), ratio, r.LongestPause.Seconds(), r.FirstBind.Seconds(),
			r.FeedLatencyP50.Round(time.Millisecond), r.FeedLatencyP99.Round(time.Millisecond),
			r.PeakRSSBytes>>20, perK, unalloc)
	}
	w.Flush()
	return b.String()
}
