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

// ReadJobs parses a job trace; name labels errors with file:line.
func ReadJobs(r io.Reader, name string) ([]TraceJob, error) {
	var out []TraceJob
	seen := map[string]int{}
	err := readRows(r, name, JobColumns, optional, func(row *trace.Row) {
		j := TraceJob{}
		j.ID = row.Str("id")
		j.Submit = row.Int("submit_s")
		j.Queue = row.Str("queue")
		j.Priority = int(row.OptInt("priority"))
		j.Pods = int(row.OptInt("pods"))
		j.Pod = jobs.Pod{CPUMilli: row.Int("cpu_milli"), MemoryMiB: row.Int("memory_mib"), NumGPU: int(row.Int("num_gpu")),
			GPUMilli: row.Int("gpu_milli"), GPUMemoryMiB: row.OptInt("gpu_mem_mib"), MIG: row.Str("mig"),
			Models: allocator.ParseModels(row.Str("gpu_spec"))}
		lv, err := jobs.ParseLevel(row.Str("topology"))
		if err != nil {
			row.Fail("topology", err)
		}
		j.Topology = lv
		j.Required = row.Bool("required")
		j.RuntimeSeconds = row.Int("runtime_s")
		j.EstimateSeconds = row.OptInt("estimate_s")
		j.Checkpointable = row.Bool("checkpointable")
		j.Preemptible = row.Bool("preemptible")
		switch {
		case row.Err != nil:
		case j.ID == "":
			row.Fail("id", errors.New("empty"))
		case j.Queue == "":
			row.Fail("queue", errors.New("empty"))
		case j.RuntimeSeconds <= 0:
			row.Fail("runtime_s", fmt.Errorf("%d: must be positive", j.RuntimeSeconds))
		case j.Pods < 0 || j.Pods > 4096:
			row.Fail("pods", fmt.Errorf("%d outside 1..4096", j.Pods))
		case j.Pod.GPUMilli < 0 || j.Pod.GPUMilli > 1000:
			row.Fail("gpu_milli", fmt.Errorf("%d outside 0..1000", j.Pod.GPUMilli))
		case j.Pod.NumGPU > 1 && j.Pod.GPUMilli != 0 && j.Pod.GPUMilli != 1000:
			row.Fail("gpu_milli", fmt.Errorf("%d GPUs of %d milli: only single-GPU pods may share", j.Pod.NumGPU, j.Pod.GPUMilli))
		}
		if j.Pod.MIG != "" && row.Err == nil {
			if _, err := jobs.LookupMIG(j.Pod.MIG); err != nil {
				row.Fail("mig", err)
			}
		}
		if prev, dup := seen[j.ID]; dup && row.Err == nil {
			row.Fail("id", fmt.Errorf("%q already on line %d", j.ID, prev))
		}
		seen[j.ID] = row.Line
		out = append(out, j)
	})
	return out, err
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
