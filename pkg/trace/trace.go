package trace

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrMalformed is matched by every [*RowError].
var ErrMalformed = errors.New("trace: malformed")

// RowError is a malformed row or header.
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

// Node is one row of openb_node_list_*.csv.
type Node struct {
	Name      string
	CPUMilli  int64
	MemoryMiB int64
	NumGPU    int
	// Model is the GPU model, "" for CPU-only nodes.
	Model string
}

// Pod is one row of openb_pod_list_*.csv. Times are seconds from the
// trace's start; DeletionTime is 0 when unknown.
type Pod struct {
	Name      string
	CPUMilli  int64
	MemoryMiB int64
	NumGPU    int
	// GPUMilli is the per-GPU share, 0..1000.
	GPUMilli int64
	// GPUSpec is the model constraint, e.g. "V100M16|V100M32"; "" for any.
	GPUSpec       string
	QoS           string
	Phase         string
	CreationTime  int64
	DeletionTime  int64
	ScheduledTime int64
}

// Workload is a pod file's base name without ".csv", as the published
// tables name it.
func Workload(path string) string {
	return strings.TrimSuffix(filepath.Base(path), ".csv")
}

// ReadNodesFile reads a node list.
func ReadNodesFile(path string) ([]Node, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	defer f.Close()
	return ReadNodes(f, path)
}

// ReadPodsFile reads a pod list.
func ReadPodsFile(path string) ([]Pod, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	defer f.Close()
	return ReadPods(f, path)
}

// ReadNodes parses a node list; name labels errors.
func ReadNodes(r io.Reader, name string) ([]Node, error) {
	var out []Node
	err := readRows(r, name, []string{"sn", "cpu_milli", "memory_mib", "gpu", "model"}, func(row *row) error {
		n := Node{Name: row.str("sn"), Model: row.str("model")}
		n.CPUMilli = row.int("cpu_milli")
		n.MemoryMiB = row.int("memory_mib")
		n.NumGPU = int(row.int("gpu"))
		if n.Model == "nan" {
			n.Model = ""
		}
		if row.err == nil && (n.CPUMilli < 0 || n.MemoryMiB < 0 || n.NumGPU < 0) {
			row.fail("gpu", errors.New("negative capacity"))
		}
		out = append(out, n)
		return row.err
	})
	return out, err
}

// ReadPods parses a pod list; name labels errors.
func ReadPods(r io.Reader, name string) ([]Pod, error) {
	var out []Pod
	cols := []string{"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec"}
	err := readRows(r, name, cols, func(row *row) error {
		p := Pod{Name: row.str("name"), GPUSpec: row.str("gpu_spec"), QoS: row.str("qos"), Phase: row.str("pod_phase")}
		p.CPUMilli = row.int("cpu_milli")
		p.MemoryMiB = row.int("memory_mib")
		p.NumGPU = int(row.int("num_gpu"))
		p.GPUMilli = row.int("gpu_milli")
		p.CreationTime = row.optInt("creation_time")
		p.DeletionTime = row.optInt("deletion_time")
		p.ScheduledTime = row.optInt("scheduled_time")
		if p.GPUSpec == "nan" {
			p.GPUSpec = ""
		}
		if row.err == nil {
			switch {
			case p.CPUMilli < 0 || p.MemoryMiB < 0 || p.NumGPU < 0:
				row.fail("num_gpu", errors.New("negative request"))
			case p.GPUMilli < 0 || p.GPUMilli > 1000:
				row.fail("gpu_milli", fmt.Errorf("%d outside 0..1000", p.GPUMilli))
			case p.NumGPU > 1 && p.GPUMilli != 1000 && p.GPUMilli != 0:
				row.fail("gpu_milli", fmt.Errorf("%d GPUs of %d milli: only single-GPU pods may share", p.NumGPU, p.GPUMilli))
			case p.NumGPU == 0 && p.GPUMilli != 0:
				row.fail("gpu_milli", fmt.Errorf("%d milli without a GPU", p.GPUMilli))
			}
		}
		out = append(out, p)
		return row.err
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
	if !ok {
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

// optInt reads an optional integer column; empty or absent is 0.
func (r *row) optInt(col string) int64 {
	if r.str(col) == "" {
		return 0
	}
	return r.int(col)
}

func readRows(rd io.Reader, file string, required []string, fn func(*row) error) error {
	cr := csv.NewReader(rd)
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err != nil {
		return &RowError{File: file, Line: 1, Err: fmt.Errorf("header: %w", err)}
	}
	idx := make(map[string]int, len(header))
	for i, h := range header {
		idx[strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))] = i
	}
	for _, c := range required {
		if _, ok := idx[c]; !ok {
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
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				line = pe.Line
			}
			return &RowError{File: file, Line: line, Err: err}
		}
		if err := fn(&row{file: file, line: line, idx: idx, rec: rec}); err != nil {
			return err
		}
	}
}
