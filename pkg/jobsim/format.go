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
)

// ErrMalformed is matched by every [*RowError].
var ErrMalformed = errors.New("jobsim: malformed")

// RowError is a malformed row or header of a trace or node file.
type RowError struct {
	File   string
	Line   int
	Column string
	Err    error
}

func (e *RowError) Error() string {
	if e.Column != "" {
		return fmt.Sprintf("%s:%d: column %s: %v", e.File, e.Line, e.Column, e.Err)
	}
	return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err)
}

// Unwrap returns the cause.
func (e *RowError) Unwrap() error { return e.Err }

// Is maps the error onto [ErrMalformed].
func (e *RowError) Is(target error) bool { return target == ErrMalformed }

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
	err := readRows(r, name, JobColumns, optional, func(row *row) {
		j := TraceJob{}
		j.ID = row.str("id")
		j.Submit = row.int("submit_s")
		j.Queue = row.str("queue")
		j.Priority = int(row.optInt("priority"))
		j.Pods = int(row.optInt("pods"))
		j.Pod = jobs.Pod{CPUMilli: row.int("cpu_milli"), MemoryMiB: row.int("memory_mib"), NumGPU: int(row.int("num_gpu")),
			GPUMilli: row.int("gpu_milli"), GPUMemoryMiB: row.optInt("gpu_mem_mib"), MIG: row.str("mig"),
			Models: allocator.ParseModels(row.str("gpu_spec"))}
		lv, err := jobs.ParseLevel(row.str("topology"))
		if err != nil {
			row.fail("topology", err)
		}
		j.Topology = lv
		j.Required = row.bool("required")
		j.RuntimeSeconds = row.int("runtime_s")
		j.EstimateSeconds = row.optInt("estimate_s")
		j.Checkpointable = row.bool("checkpointable")
		j.Preemptible = row.bool("preemptible")
		switch {
		case row.err != nil:
		case j.ID == "":
			row.fail("id", errors.New("empty"))
		case j.Queue == "":
			row.fail("queue", errors.New("empty"))
		case j.RuntimeSeconds <= 0:
			row.fail("runtime_s", fmt.Errorf("%d: must be positive", j.RuntimeSeconds))
		case j.Pods < 0 || j.Pods > 4096:
			row.fail("pods", fmt.Errorf("%d outside 1..4096", j.Pods))
		case j.Pod.GPUMilli < 0 || j.Pod.GPUMilli > 1000:
			row.fail("gpu_milli", fmt.Errorf("%d outside 0..1000", j.Pod.GPUMilli))
		case j.Pod.NumGPU > 1 && j.Pod.GPUMilli != 0 && j.Pod.GPUMilli != 1000:
			row.fail("gpu_milli", fmt.Errorf("%d GPUs of %d milli: only single-GPU pods may share", j.Pod.NumGPU, j.Pod.GPUMilli))
		}
		if j.Pod.MIG != "" && row.err == nil {
			if _, err := jobs.LookupMIG(j.Pod.MIG); err != nil {
				row.fail("mig", err)
			}
		}
		if prev, dup := seen[j.ID]; dup && row.err == nil {
			row.fail("id", fmt.Errorf("%q already on line %d", j.ID, prev))
		}
		seen[j.ID] = row.line
		out = append(out, j)
	})
	return out, err
}

// row gives typed access to one CSV record.
type row struct {
	file string
	line int
	idx  map[string]int
	rec  []string
	err  error
}

func (r *row) fail(col string, err error) {
	if r.err == nil {
		r.err = &RowError{File: r.file, Line: r.line, Column: col, Err: err}
	}
}

func (r *row) str(col string) string {
	i, ok := r.idx[col]
	if !ok || i >= len(r.rec) {
		return ""
	}
	return strings.TrimSpace(r.rec[i])
}

func (r *row) int(col string) int64 {
	s := r.str(col)
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		r.fail(col, fmt.Errorf("not an integer: %q", s))
	}
	return v
}

func (r *row) optInt(col string) int64 {
	if r.str(col) == "" {
		return 0
	}
	return r.int(col)
}

func (r *row) bool(col string) bool {
	switch strings.ToLower(r.str(col)) {
	case "", "false", "0", "no":
		return false
	case "true", "1", "yes":
		return true
	}
	r.fail(col, fmt.Errorf("not a boolean: %q", r.str(col)))
	return false
}

func readRows(rd io.Reader, file string, cols []string, opt map[string]bool, fn func(*row)) error {
	cr := csv.NewReader(rd)
	cr.FieldsPerRecord = -1
	header, err := cr.Read()
	if err != nil {
		return &RowError{File: file, Line: 1, Err: fmt.Errorf("header: %w", err)}
	}
	idx := make(map[string]int, len(header))
	for i, h := range header {
		idx[strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))] = i
	}
	for _, c := range cols {
		if _, ok := idx[c]; !ok && !opt[c] {
			return &RowError{File: file, Line: 1, Column: c, Err: errors.New("missing column")}
		}
	}
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			return nil
		}
		line, _ := cr.FieldPos(0)
		if err != nil {
			return &RowError{File: file, Line: line, Err: err}
		}
		r := &row{file: file, line: line, idx: idx, rec: rec}
		fn(r)
		if r.err != nil {
			return r.err
		}
	}
}
