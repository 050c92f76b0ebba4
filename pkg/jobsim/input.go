package jobsim

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/gpud/gpud/pkg/allocator"
	"github.com/gpud/gpud/pkg/allocator/jobs"
)

// Input is what `gpud sim jobs` replays: the nodes, the job trace, and
// the queue tree with its reservations.
type Input struct {
	Nodes        []allocator.Node
	Trace        []TraceJob
	Queues       []jobs.Queue
	Reservations []jobs.Reservation
}

// LoadInput reads the node file, the job trace and, if queuesPath is
// set, the queue file, checking every job's queue is a leaf of it;
// without one the trace's queues get [DefaultQueues].
func LoadInput(nodesPath, jobsPath, queuesPath string, no NodeOptions) (Input, error) {
	var in Input
	var err error
	if in.Nodes, err = ReadNodesFile(nodesPath, no); err != nil {
		return in, err
	}
	f, err := os.Open(jobsPath)
	if err != nil {
		return in, fmt.Errorf("open the job trace: %w", err)
	}
	in.Trace, err = ReadJobs(f, jobsPath)
	f.Close()
	if err != nil {
		return in, err
	}
	if queuesPath == "" {
		in.Queues = DefaultQueues(in.Trace, CapacityMilli(in.Nodes))
		return in, nil
	}
	if in.Queues, in.Reservations, err = ReadQueueFile(queuesPath); err != nil {
		return in, err
	}
	if err := CheckQueues(jobsPath, in.Trace, in.Queues); err != nil {
		return in, fmt.Errorf("--queues %s: %w", queuesPath, err)
	}
	return in, nil
}

// ReplayAll runs the input once per variant (see [Variants]), writing
// progress lines to progress unless it is nil.
func (in *Input) ReplayAll(ctx context.Context, variants []ReplayOptions, progress io.Writer) ([]*Report, error) {
	var reports []*Report
	for _, o := range variants {
		name := o.Policy
		o.Queues, o.Reservations = in.Queues, in.Reservations
		start := time.Now()
		if progress != nil {
			fmt.Fprintf(progress, "sim jobs: %s: replaying %d jobs on %d nodes\n", name, len(in.Trace), len(in.Nodes))
			o.Progress = func(done, total int) {
				if done%5000 == 0 {
					fmt.Fprintf(progress, "sim jobs: %s: %d/%d jobs done\n", name, done, total)
				}
			}
		}
		r, err := Replay(ctx, in.Nodes, in.Trace, o)
		if err != nil {
			return nil, err
		}
		if progress != nil {
			fmt.Fprintf(progress, "sim jobs: %s: done in %s\n", name, time.Since(start).Round(time.Millisecond))
		}
		reports = append(reports, r)
	}
	return reports, nil
}

// ReadNodesFile reads the node CSV at path (see [ReadNodes]).
func ReadNodesFile(path string, o NodeOptions) ([]allocator.Node, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open the node file: %w", err)
	}
	defer f.Close()
	return ReadNodes(f, path, o)
}

// CapacityMilli is the milli-GPU of healthy non-MIG GPUs plus MIG GPUs.
func CapacityMilli(nodes []allocator.Node) int64 {
	var c int64
	for _, n := range nodes {
		for _, g := range n.GPUs {
			if !g.Unhealthy {
				c += allocator.MilliPerGPU
			}
		}
	}
	return c
}
