package simulate

import (
	"cmp"
	"container/heap"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/gpud/gpud/pkg/allocator"
	"github.com/gpud/gpud/pkg/trace"
)

// ReplayResult summarizes a dynamic replay of one policy.
type ReplayResult struct {
	Policy string
	// Pods is the number of pods replayed; Placed ran, Unplaced were still
	// waiting when the trace ended.
	Pods, Placed, Unplaced int
	// AllocGPUPctTimeAvg is allocated GPU as % of capacity, averaged over
	// time from the first arrival to the last event.
	AllocGPUPctTimeAvg float64
	// MeanQueueDelaySec and MaxQueueDelaySec are over placed pods.
	MeanQueueDelaySec float64
	MaxQueueDelaySec  int64
	// Delayed is how many placed pods waited at all.
	Delayed int
}

// ReplayHeader is the CSV header of [WriteReplayCSV].
var ReplayHeader = []string{"workload", "policy", "pods", "placed", "unplaced", "delayed", "alloc_gpu_pct_time_avg", "queue_delay_mean_s", "queue_delay_max_s"}

type departure struct {
	at  int64
	d   allocator.Decision
	req allocator.Request
}

type departures []departure

func (h departures) Len() int           { return len(h) }
func (h departures) Less(i, j int) bool { return h[i].at < h[j].at }
func (h departures) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *departures) Push(x any)        { *h = append(*h, x.(departure)) }
func (h *departures) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Replay runs pods in creation-time order; each placed pod holds its
// resources for its traced lifetime (deletion − creation; pods without a
// deletion time never leave). A pod that does not fit waits in a FIFO queue
// that is retried, in order and skipping pods that still do not fit, after
// every departure.
func Replay(nodes []trace.Node, pods []trace.Pod, policy string, seed uint64) (ReplayResult, error) {
	rp, err := newReplayer(nodes, pods, policy, seed)
	if err != nil {
		return ReplayResult{}, fmt.Errorf("simulate: replay: %w", err)
	}
	order := make([]int, len(pods))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(x, y int) int { return cmp.Compare(pods[x].CreationTime, pods[y].CreationTime) })
	if len(order) > 0 {
		rp.start = pods[order[0]].CreationTime
		rp.now = rp.start
	}
	for _, i := range order {
		if err := rp.departUntil(pods[i].CreationTime); err != nil {
			return rp.res, err
		}
		rp.advance(pods[i].CreationTime)
		ok, err := rp.try(i)
		if err != nil {
			return rp.res, err
		}
		if !ok {
			rp.queue = append(rp.queue, i)
		}
	}
	if err := rp.departUntil(math.MaxInt64); err != nil {
		return rp.res, err
	}
	return rp.result(), nil
}

// replayer is the state of one [Replay].
type replayer struct {
	c     *allocator.Cluster
	a     *allocator.Allocator
	pods  []trace.Pod
	reqs  []allocator.Request
	res   ReplayResult
	deps  departures
	queue []int // waiting pods, FIFO
	// now is the replay clock; start is the first arrival.
	now, start int64
	area       float64 // GPU milli × seconds
	delaySum   float64
}

func newReplayer(nodes []trace.Node, pods []trace.Pod, policy string, seed uint64) (*replayer, error) {
	c, err := allocator.NewCluster(Nodes(nodes))
	if err != nil {
		return nil, err
	}
	reqs := Requests(pods)
	p, err := allocator.NewPolicy(policy, c.Workload(reqs))
	if err != nil {
		return nil, err
	}
	a := allocator.New(c, p, rand.New(rand.NewPCG(seed, 0x7135)))
	return &replayer{c: c, a: a, pods: pods, reqs: reqs, res: ReplayResult{Policy: p.Name(), Pods: len(pods)}}, nil
}

// advance moves the clock to t, integrating the allocated GPU.
func (rp *replayer) advance(t int64) {
	if t > rp.now {
		rp.area += float64(rp.c.AllocatedGPUMilli()) * float64(t-rp.now)
		rp.now = t
	}
}

// try places pod i now; false if it does not fit.
func (rp *replayer) try(i int) (bool, error) {
	d, err := rp.a.Place(rp.reqs[i])
	if errors.Is(err, allocator.ErrNoFit) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("simulate: replay %s: %w", rp.pods[i].Name, err)
	}
	rp.res.Placed++
	wait := rp.now - rp.pods[i].CreationTime
	rp.delaySum += float64(wait)
	if wait > 0 {
		rp.res.Delayed++
		rp.res.MaxQueueDelaySec = max(rp.res.MaxQueueDelaySec, wait)
	}
	if life := rp.pods[i].DeletionTime - rp.pods[i].CreationTime; rp.pods[i].DeletionTime > 0 && life >= 0 {
		heap.Push(&rp.deps, departure{at: rp.now + life, d: d, req: rp.reqs[i]})
	}
	return true, nil
}

// departUntil lets every pod due by t leave, in order, retrying the queue
// after each departure.
func (rp *replayer) departUntil(t int64) error {
	for len(rp.deps) > 0 && rp.deps[0].at <= t {
		dp := heap.Pop(&rp.deps).(departure)
		rp.advance(dp.at)
		if err := rp.c.Unbind(dp.d, dp.req); err != nil {
			return fmt.Errorf("simulate: replay: %w", err)
		}
		if err := rp.drain(); err != nil {
			return err
		}
	}
	return nil
}

// drain retries the waiting pods in order, keeping those that still do not
// fit.
func (rp *replayer) drain() error {
	kept := rp.queue[:0]
	for _, i := range rp.queue {
		ok, err := rp.try(i)
		if err != nil {
			return err
		}
		if !ok {
			kept = append(kept, i)
		}
	}
	rp.queue = kept
	return nil
}

// result completes the summary once every pod has left or waits forever.
func (rp *replayer) result() ReplayResult {
	res := rp.res
	res.Unplaced = len(rp.queue)
	if span := rp.now - rp.start; span > 0 && rp.c.GPUCapacityMilli() > 0 {
		res.AllocGPUPctTimeAvg = rp.area / float64(span) / float64(rp.c.GPUCapacityMilli()) * 100
	}
	if res.Placed > 0 {
		res.MeanQueueDelaySec = rp.delaySum / float64(res.Placed)
	}
	return res
}
