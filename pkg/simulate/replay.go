package simulate

import (
	"cmp"
	"container/heap"
	"errors"
	"fmt"
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
	c, err := allocator.NewCluster(Nodes(nodes))
	if err != nil {
		return ReplayResult{}, fmt.Errorf("simulate: replay: %w", err)
	}
	reqs := Requests(pods)
	p, err := allocator.NewPolicy(policy, c.Workload(reqs))
	if err != nil {
		return ReplayResult{}, fmt.Errorf("simulate: replay: %w", err)
	}
	a := allocator.New(c, p, rand.New(rand.NewPCG(seed, 0x7135)))
	order := make([]int, len(pods))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(x, y int) int { return cmp.Compare(pods[x].CreationTime, pods[y].CreationTime) })

	res := ReplayResult{Policy: p.Name(), Pods: len(pods)}
	var (
		deps       departures
		queue      []int
		now, start int64
		area       float64 // GPU milli × seconds
		delaySum   float64
	)
	advance := func(t int64) {
		if t > now {
			area += float64(c.AllocatedGPUMilli()) * float64(t-now)
			now = t
		}
	}
	try := func(i int) (bool, error) {
		d, err := a.Place(reqs[i])
		if errors.Is(err, allocator.ErrNoFit) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("simulate: replay %s: %w", pods[i].Name, err)
		}
		res.Placed++
		wait := now - pods[i].CreationTime
		delaySum += float64(wait)
		if wait > 0 {
			res.Delayed++
			res.MaxQueueDelaySec = max(res.MaxQueueDelaySec, wait)
		}
		if life := pods[i].DeletionTime - pods[i].CreationTime; pods[i].DeletionTime > 0 && life >= 0 {
			heap.Push(&deps, departure{at: now + life, d: d, req: reqs[i]})
		}
		return true, nil
	}
	drain := func() error {
		kept := queue[:0]
		for _, i := range queue {
			ok, err := try(i)
			if err != nil {
				return err
			}
			if !ok {
				kept = append(kept, i)
			}
		}
		queue = kept
		return nil
	}
	if len(order) > 0 {
		start = pods[order[0]].CreationTime
		now = start
	}
	for _, i := range order {
		for len(deps) > 0 && deps[0].at <= pods[i].CreationTime {
			dp := heap.Pop(&deps).(departure)
			advance(dp.at)
			if err := c.Unbind(dp.d, dp.req); err != nil {
				return res, fmt.Errorf("simulate: replay: %w", err)
			}
			if err := drain(); err != nil {
				return res, err
			}
		}
		advance(pods[i].CreationTime)
		ok, err := try(i)
		if err != nil {
			return res, err
		}
		if !ok {
			queue = append(queue, i)
		}
	}
	for len(deps) > 0 {
		dp := heap.Pop(&deps).(departure)
		advance(dp.at)
		if err := c.Unbind(dp.d, dp.req); err != nil {
			return res, fmt.Errorf("simulate: replay: %w", err)
		}
		if err := drain(); err != nil {
			return res, err
		}
	}
	res.Unplaced = len(queue)
	if span := now - start; span > 0 && c.GPUCapacityMilli() > 0 {
		res.AllocGPUPctTimeAvg = area / float64(span) / float64(c.GPUCapacityMilli()) * 100
	}
	if res.Placed > 0 {
		res.MeanQueueDelaySec = delaySum / float64(res.Placed)
	}
	return res, nil
}
