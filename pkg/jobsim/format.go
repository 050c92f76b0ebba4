package jobsim

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/gpud/gpud/pkg/allocator"
	"github.com/gpud/gpud/pkg/allocator/jobs"
	"github.com/gpud/gpud/pkg/trace"
)

// ErrMalformed is matched by every [*RowError]; it is pkg/trace's, so one
// errors.Is check covers pod, node and job traces.
var ErrMalformed = trace.ErrMalformed

// RowError is a malformed row or header of a trace or node file: file, line
// and column, as pkg/trace reports them.
type RowError = trace.RowError

// TraceJob is one row of a job trace: the scheduler's job plus what only
// the simulator knows, its true runtime.
type TraceJob struct {
	jobs.Job
	// RuntimeSeconds is how long the job runs once started (uninterrupted).
	RuntimeSeconds int64
	// Line is the trace line the job was read from; 0 for generated jobs.
	Line int
}

// JobColumns is the job-trace header, in order; docs/job-trace.md defines
// each column.
var JobColumns = []string{"id", "submit_s", "queue", "priority", "pods", "cpu_milli", "memory_mib",
	"num_gpu", "gpu_milli", "gpu_mem_mib", "mig", "gpu_spec", "topology", "required",
	"runtime_s", "estimate_s", "checkpointable", "preemptible"}

// optional columns may be absent from the header (their zero value applies).
var optional = map[string]bool{"gpu_mem_mib": true, "mig": true, "gpu_spec": true, "topology": true,
	"required": true, "estimate_s": true, "checkpointable": true, "preemptible": true, "priority": true, "pods": true}

// WriteJobs writes a job trace with the [JobColumns] header.
func WriteJobs(w io.Writer, js []TraceJob) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(JobColumns); err != nil {
		return fmt.Errorf("jobsim: write trace: %w", err)
	}
	for _, j := range js {
		p := j.Pod
		rec := []string{j.ID, itoa(j.Submit), j.Queue, strconv.Itoa(j.Priority), strconv.Itoa(max(j.Pods, 1)),
			itoa(p.CPUMilli), itoa(p.MemoryMiB), strconv.Itoa(p.NumGPU), itoa(p.GPUMilli), itoa(p.GPUMemoryMiB),
			p.MIG, strings.Join(p.Models, "|"), j.Topology.String(), strconv.FormatBool(j.Required),
			itoa(j.RuntimeSeconds), itoa(j.EstimateSeconds), strconv.FormatBool(j.Checkpointable), strconv.FormatBool(j.Preemptible)}
		if err := cw.Write(rec); err != nil {
			return fmt.Errorf("jobsim: write trace: %w", err)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("jobsim: write trace: %w", err)
	}
	return nil
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// Bounds on a job trace's values besides pkg/trace's.
const (
	// MaxPods bounds a gang's pods.
	MaxPods = 4096
	// MaxPriority bounds a priority's magnitude.
	MaxPriority = 1_000_000
)

// ReadJobs parses a job trace; name labels errors with file:line and
// column. Every value is checked here, so a trace that reads replays: values
// within bounds ([trace.MaxSeconds], [MaxPods], ...), requests the scheduler
// accepts, unique IDs, and rows sorted by submit_s.
func ReadJobs(r io.Reader, name string) ([]TraceJob, error) {
	var out []TraceJob
	seen := map[string]int{}
	err := readRows(r, name, JobColumns, optional, func(row *trace.Row) {
		j := readJob(row)
		switch {
		case row.Err != nil:
		case seen[j.ID] != 0:
			row.Fail("id", fmt.Errorf("%s already on line %d", trace.Quote(j.ID), seen[j.ID]))
		case len(out) > 0 && j.Submit < out[len(out)-1].Submit:
			row.Fail("submit_s", fmt.Errorf("%d before line %d's %d: sort the trace by submit_s", j.Submit, out[len(out)-1].Line, out[len(out)-1].Submit))
		}
		seen[j.ID] = row.Line
		out = append(out, j)
	})
	return out, err
}

// readJob reads one row's job; a bad value fails the row.
func readJob(row *trace.Row) TraceJob {
	j := TraceJob{Line: row.Line}
	j.ID = row.Str("id")
	j.Submit = row.IntIn("submit_s", 0, trace.MaxSeconds)
	j.Queue = row.Str("queue")
	j.Priority = int(row.OptIntIn("priority", -MaxPriority, MaxPriority))
	j.Pods = int(row.OptIntIn("pods", 0, MaxPods))
	j.Pod = jobs.Pod{
		CPUMilli:     row.IntIn("cpu_milli", 0, trace.MaxCPUMilli),
		MemoryMiB:    row.IntIn("memory_mib", 0, trace.MaxMemoryMiB),
		NumGPU:       int(row.IntIn("num_gpu", 0, trace.MaxGPUsPerNode)),
		GPUMilli:     row.IntIn("gpu_milli", 0, allocator.MilliPerGPU),
		GPUMemoryMiB: row.OptIntIn("gpu_mem_mib", 0, trace.MaxMemoryMiB),
		MIG:          row.Str("mig"),
		Models:       allocator.ParseModels(row.Str("gpu_spec")),
	}
	lv, err := jobs.ParseLevel(row.Str("topology"))
	if err != nil {
		row.Fail("topology", err)
	}
	j.Topology = lv
	j.Required = row.Bool("required")
	j.RuntimeSeconds = row.IntIn("runtime_s", 1, trace.MaxSeconds)
	j.EstimateSeconds = row.OptIntIn("estimate_s", 0, trace.MaxSeconds)
	j.Checkpointable = row.Bool("checkpointable")
	j.Preemptible = row.Bool("preemptible")
	p := j.Pod
	switch {
	case row.Err != nil:
	case j.ID == "":
		row.Fail("id", errors.New("empty"))
	case j.Queue == "":
		row.Fail("queue", errors.New("empty"))
	case p.NumGPU > 1 && p.GPUMilli != 0 && p.GPUMilli != allocator.MilliPerGPU:
		row.Fail("gpu_milli", fmt.Errorf("%d GPUs of %d milli: only single-GPU pods may share", p.NumGPU, p.GPUMilli))
	case p.NumGPU > 1 && p.GPUMilli == 0 && p.GPUMemoryMiB > 0:
		row.Fail("gpu_mem_mib", fmt.Errorf("%d GPUs of %d MiB: only single-GPU pods may share", p.NumGPU, p.GPUMemoryMiB))
	case p.NumGPU == 0 && p.MIG == "" && (p.GPUMilli > 0 || p.GPUMemoryMiB > 0):
		row.Fail("num_gpu", errors.New("0, but gpu_milli or gpu_mem_mib asks for a GPU: a fraction has num_gpu 1"))
	case p.MIG != "":
		if _, err := jobs.LookupMIG(p.MIG); err != nil {
			row.Fail("mig", err)
		}
	}
	return j
}

// CheckQueues reports the first job, by file and line, whose queue is not a
// leaf of queues (undefined, or a parent of others). An empty queues is
// fine: [DefaultQueues] derives them from the trace.
func CheckQueues(file string, js []TraceJob, queues []jobs.Queue) error {
	if len(queues) == 0 {
		return nil
	}
	defined := make(map[string]bool, len(queues))
	parents := make(map[string]bool)
	for _, q := range queues {
		defined[q.Name] = true
		if q.Parent != "" {
			parents[q.Parent] = true
		}
	}
	for _, j := range js {
		switch {
		case !defined[j.Queue]:
			return &RowError{File: file, Line: j.Line, Column: "queue", Err: fmt.Errorf("queue %s is not defined", trace.Quote(j.Queue))}
		case parents[j.Queue]:
			return &RowError{File: file, Line: j.Line, Column: "queue", Err: fmt.Errorf("queue %s is a parent queue: jobs go to leaf queues", trace.Quote(j.Queue))}
		}
	}
	return nil
}

func readRows(rd io.Reader, file string, cols []string, opt map[string]bool, fn func(*trace.Row)) error {
	required := make([]string, 0, len(cols))
	for _, c := range cols {
		if !opt[c] {
			required = append(required, c)
		}
	}
	return trace.ReadRows(rd, file, required, func(r *trace.Row) error {
		fn(r)
		return r.Err
	})
}
