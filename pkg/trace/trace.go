package trace

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
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
func ReadNodesFile(path string) ([]Node, error) { return readFile(path, ReadNodes) }

// ReadPodsFile reads a pod list.
func ReadPodsFile(path string) ([]Pod, error) { return readFile(path, ReadPods) }

func readFile[T any](path string, read func(io.Reader, string) ([]T, error)) ([]T, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	defer f.Close()
	return read(f, path)
}

// ReadNodes parses a node list; name labels errors. Every value must lie
// within this package's bounds ([MaxGPUsPerNode], ...).
func ReadNodes(r io.Reader, name string) ([]Node, error) {
	var out []Node
	var gpus ClusterGPUs
	err := ReadRows(r, name, []string{"sn", "cpu_milli", "memory_mib", "gpu", "model"}, func(row *Row) error {
		n := Node{Name: row.Str("sn"), Model: row.Str("model")}
		n.CPUMilli = row.IntIn("cpu_milli", 0, MaxCPUMilli)
		n.MemoryMiB = row.IntIn("memory_mib", 0, MaxMemoryMiB)
		n.NumGPU = gpus.Read(row, "gpu")
		if n.Model == "nan" {
			n.Model = ""
		}
		out = append(out, n)
		return row.Err
	})
	return out, err
}

// ClusterGPUs counts the GPUs of a node list as it is read.
type ClusterGPUs int

// Read reads a node's GPU count from col: 0..[MaxGPUsPerNode], and at most
// [MaxClusterGPUs] for all nodes so far.
func (c *ClusterGPUs) Read(row *Row, col string) int {
	n := int(row.IntIn(col, 0, MaxGPUsPerNode))
	if row.Err == nil && int(*c)+n > MaxClusterGPUs {
		row.Fail(col, fmt.Errorf("the node list passes %d GPUs", MaxClusterGPUs))
	}
	*c += ClusterGPUs(n)
	return n
}

// PodColumns are the columns of an openb pod list gpud reads: the first
// five are required, the rest optional (absent or blank is unset).
var PodColumns = []string{"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli",
	"gpu_spec", "qos", "pod_phase", "creation_time", "deletion_time", "scheduled_time"}

// requiredPodColumns is how many of [PodColumns] a pod list must have.
const requiredPodColumns = 5

// ReadPodsFileColumns reads a pod list and also returns which of
// [PodColumns] it had.
func ReadPodsFileColumns(path string) ([]Pod, []string, error) {
	var cols []string
	pods, err := readFile(path, func(r io.Reader, name string) ([]Pod, error) {
		var err error
		var pods []Pod
		pods, cols, err = ReadPodsColumns(r, name)
		return pods, err
	})
	return pods, cols, err
}

// ReadPods parses a pod list; name labels errors. Every value must lie
// within this package's bounds ([MaxGPUsPerNode], ...).
func ReadPods(r io.Reader, name string) ([]Pod, error) {
	pods, _, err := ReadPodsColumns(r, name)
	return pods, err
}

// ReadPodsColumns is [ReadPods] that also returns which of [PodColumns]
// the list had, in that order.
func ReadPodsColumns(r io.Reader, name string) ([]Pod, []string, error) {
	var out []Pod
	var read []string
	err := ReadRows(r, name, PodColumns[:requiredPodColumns], func(row *Row) error {
		if read == nil {
			for _, c := range PodColumns {
				if row.Has(c) {
					read = append(read, c)
				}
			}
		}
		p := Pod{Name: row.Str("name"), GPUSpec: row.Str("gpu_spec"), QoS: row.Str("qos"), Phase: row.Str("pod_phase")}
		p.CPUMilli = row.IntIn("cpu_milli", 0, MaxCPUMilli)
		p.MemoryMiB = row.IntIn("memory_mib", 0, MaxMemoryMiB)
		p.NumGPU = int(row.IntIn("num_gpu", 0, MaxGPUsPerNode))
		p.GPUMilli = row.IntIn("gpu_milli", 0, 1000)
		p.CreationTime = row.OptIntIn("creation_time", 0, MaxSeconds)
		p.DeletionTime = row.OptIntIn("deletion_time", 0, MaxSeconds)
		p.ScheduledTime = row.OptIntIn("scheduled_time", 0, MaxSeconds)
		for _, s := range []*string{&p.GPUSpec, &p.QoS, &p.Phase} {
			if strings.EqualFold(*s, "nan") {
				*s = ""
			}
		}
		if row.Err == nil {
			switch {
			case p.NumGPU > 1 && p.GPUMilli != 1000 && p.GPUMilli != 0:
				row.Fail("gpu_milli", fmt.Errorf("%d GPUs of %d milli: only single-GPU pods may share", p.NumGPU, p.GPUMilli))
			case p.NumGPU == 0 && p.GPUMilli != 0:
				row.Fail("gpu_milli", fmt.Errorf("%d milli without a GPU", p.GPUMilli))
			}
		}
		out = append(out, p)
		return row.Err
	})
	return out, read, err
}
