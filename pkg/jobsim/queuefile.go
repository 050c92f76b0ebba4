package jobsim

import (
	"bytes"
	"errors"
	"fmt"
	"math"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"

	"github.com/gpud/gpud/internal/fileio"
	"github.com/gpud/gpud/internal/strictyaml"
	"github.com/gpud/gpud/pkg/allocator/jobs"
)

// QueueFile is the YAML form of a queue tree and reservations for
// `gpud sim jobs --queues FILE` (see docs/job-trace.md).
type QueueFile struct {
	Queues       []QueueSpec       `yaml:"queues"`
	Reservations []ReservationSpec `yaml:"reservations,omitempty"`
}

// QueueSpec is one queue: jobs go to leaves, limits bind every ancestor.
type QueueSpec struct {
	Name   string  `yaml:"name"`
	Parent string  `yaml:"parent,omitempty"`
	Weight float64 `yaml:"weight,omitempty"`
	// Guaranteed is what the queue may reclaim from others; Limit caps what
	// it may hold, borrowing included (zero fields: no limit).
	Guaranteed ResourceSpec `yaml:"guaranteed,omitempty"`
	Limit      ResourceSpec `yaml:"limit,omitempty"`
	// ModelGuaranteed and ModelLimit are milli-GPU per GPU model.
	ModelGuaranteed map[string]int64 `yaml:"modelGuaranteed,omitempty"`
	ModelLimit      map[string]int64 `yaml:"modelLimit,omitempty"`
}

// ResourceSpec counts resources in the scheduler's exact units.
type ResourceSpec struct {
	CPUMilli     int64 `yaml:"cpuMilli,omitempty"`
	MemoryMiB    int64 `yaml:"memoryMiB,omitempty"`
	GPUMilli     int64 `yaml:"gpuMilli,omitempty"`
	GPUMemoryMiB int64 `yaml:"gpuMemoryMiB,omitempty"`
	MIGSlices    int64 `yaml:"migSlices,omitempty"`
}

// ReservationSpec holds nodes for a queue during [start, end) seconds.
type ReservationSpec struct {
	Name   string   `yaml:"name"`
	Queue  string   `yaml:"queue"`
	Nodes  []string `yaml:"nodes"`
	StartS int64    `yaml:"startS"`
	EndS   int64    `yaml:"endS"`
}

func (r ResourceSpec) resources() jobs.Resources {
	return jobs.Resources{CPUMilli: r.CPUMilli, MemoryMiB: r.MemoryMiB, GPUMilli: r.GPUMilli, GPUMemoryMiB: r.GPUMemoryMiB, MIGSlices: r.MIGSlices}
}

func (r ResourceSpec) negative() bool {
	return r.CPUMilli < 0 || r.MemoryMiB < 0 || r.GPUMilli < 0 || r.GPUMemoryMiB < 0 || r.MIGSlices < 0
}

func (r ResourceSpec) fields() [5]struct {
	name string
	v    int64
} {
	return [5]struct {
		name string
		v    int64
	}{{"cpuMilli", r.CPUMilli}, {"memoryMiB", r.MemoryMiB}, {"gpuMilli", r.GPUMilli}, {"gpuMemoryMiB", r.GPUMemoryMiB}, {"migSlices", r.MIGSlices}}
}

func (r ResourceSpec) tooLarge() bool {
	for _, f := range r.fields() {
		if f.v > MaxQueueResource {
			return true
		}
	}
	return false
}

// over returns the first resource r guarantees beyond limit (a zero limit
// field is no limit).
func (r ResourceSpec) over(limit ResourceSpec) (name string, guaranteed, lim int64, over bool) {
	lf := limit.fields()
	for i, f := range r.fields() {
		if l := lf[i].v; l > 0 && f.v > l {
			return f.name, f.v, l, true
		}
	}
	return "", 0, 0, false
}

// Bounds on a queue file.
const (
	// MaxQueueWeight bounds a queue's weight.
	MaxQueueWeight = 1_000_000
	// MaxQueues bounds the queues, and the reservations, of a file.
	MaxQueues = 10_000
	// MaxQueueResource bounds each guarantee and limit, so that the
	// sums over MaxQueues queues fit in an int64.
	MaxQueueResource = int64(1) << 48
	// maxReported bounds the errors one parse reports.
	maxReported = 10
)

// ErrBadQueueFile is matched by every error of [ParseQueueFile].
var ErrBadQueueFile = errors.New("bad queue file")

// QueueFileError is a queue file error at a line.
type QueueFileError struct {
	File string
	Line int
	Err  error
}

func (e *QueueFileError) Error() string { return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err) }

// Unwrap returns the cause.
func (e *QueueFileError) Unwrap() error { return e.Err }

// Is maps the error onto [ErrBadQueueFile].
func (e *QueueFileError) Is(target error) bool { return target == ErrBadQueueFile }

// ReadQueueFile reads a queue file of at most [fileio.MaxConfigBytes] and
// parses it with [ParseQueueFile].
func ReadQueueFile(path string) ([]jobs.Queue, []jobs.Reservation, error) {
	data, err := fileio.ReadFile(path, fileio.MaxConfigBytes)
	if err != nil {
		return nil, nil, fmt.Errorf("queue file: %w", err)
	}
	return ParseQueueFile(data, path)
}

// ParseQueueFile parses a queue file strictly; name labels errors. An
// unknown key, a YAML alias, a queue without a name, a duplicate, an
// undefined parent or reservation queue, a parent cycle, a negative or
// non-finite weight, a negative resource or an empty reservation window
// is a [*QueueFileError] naming the line; the first ten are reported. A
// file nested more than 32 levels or with more than [MaxQueues] queues is
// refused before its values are checked.
func ParseQueueFile(data []byte, name string) ([]jobs.Queue, []jobs.Reservation, error) {
	f, doc, err := decodeQueueFile(data, name)
	if err != nil {
		return nil, nil, err
	}
	at := func(path string, err error) error {
		return &QueueFileError{File: name, Line: lineOf(doc, path), Err: err}
	}
	switch {
	case len(f.Queues) == 0:
		return nil, nil, at("$.queues", errors.New("no queues"))
	case len(f.Queues) > MaxQueues:
		return nil, nil, at("$.queues", fmt.Errorf("%d queues, more than %d", len(f.Queues), MaxQueues))
	case len(f.Reservations) > MaxQueues:
		return nil, nil, at("$.reservations", fmt.Errorf("%d reservations, more than %d", len(f.Reservations), MaxQueues))
	}
	errs := checkQueues(f.Queues, at)
	defined := make(map[string]bool, len(f.Queues))
	out := make([]jobs.Queue, 0, len(f.Queues))
	for _, q := range f.Queues {
		defined[q.Name] = true
		out = append(out, jobs.Queue{Name: q.Name, Parent: q.Parent, Weight: q.Weight, Quota: jobs.Quota{
			Guaranteed: q.Guaranteed.resources(), Limit: q.Limit.resources(),
			ModelGuaranteed: q.ModelGuaranteed, ModelLimit: q.ModelLimit,
		}})
	}
	rs := make([]jobs.Reservation, 0, len(f.Reservations))
	for i, r := range f.Reservations {
		switch {
		case !defined[r.Queue]:
			errs = append(errs, at(fmt.Sprintf("$.reservations[%d].queue", i), fmt.Errorf("reservation %q: queue %q is not defined", r.Name, r.Queue)))
		case r.StartS < 0 || r.EndS <= r.StartS:
			errs = append(errs, at(fmt.Sprintf("$.reservations[%d].endS", i), fmt.Errorf("reservation %q: window [%d, %d) is empty or negative", r.Name, r.StartS, r.EndS)))
		}
		rs = append(rs, jobs.Reservation{Name: r.Name, Queue: r.Queue, Nodes: r.Nodes, Start: r.StartS, End: r.EndS})
	}
	if len(errs) > maxReported {
		errs = append(errs[:maxReported], fmt.Errorf("%s: and %d more errors", name, len(errs)-maxReported))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	return out, rs, nil
}

// decodeQueueFile parses data into a QueueFile and its syntax tree, for
// line lookups, through internal/strictyaml (unknown fields, duplicate keys
// and fractions in integer fields are errors; a panic in the YAML library
// is an error too).
func decodeQueueFile(data []byte, name string) (f QueueFile, doc ast.Node, err error) {
	if line := tooDeep(data, maxYAMLDepth); line > 0 {
		return f, nil, &QueueFileError{File: name, Line: line, Err: fmt.Errorf("nested more than %d levels deep", maxYAMLDepth)}
	}
	file, err := strictyaml.Parse(data)
	if err != nil {
		return f, nil, yamlError(name, err)
	}
	if len(file.Docs) == 0 || file.Docs[0].Body == nil {
		return f, nil, &QueueFileError{File: name, Line: 1, Err: errors.New("no queues")}
	}
	doc = file.Docs[0].Body
	if line := firstAlias(doc); line > 0 {
		return f, nil, &QueueFileError{File: name, Line: line, Err: errors.New("YAML aliases are not supported")}
	}
	if err := strictyaml.Unmarshal(data, &f); err != nil {
		return f, nil, yamlError(name, err)
	}
	return f, doc, nil
}

// firstAlias returns the line of the first alias in doc, or 0; a tree the
// library cannot walk counts as line 1.
func firstAlias(doc ast.Node) (line int) {
	defer func() {
		if recover() != nil {
			line = 1
		}
	}()
	if aliases := ast.Filter(ast.AliasType, doc); len(aliases) > 0 {
		return max(aliases[0].GetToken().Position.Line, 1)
	}
	return 0
}

// maxYAMLDepth bounds the nesting of a queue file, which needs 4 levels:
// the YAML parser takes time quadratic in it.
const maxYAMLDepth = 32

// tooDeep returns the first line where data nests flow collections ([ {)
// or block sequences (- - -) more than limit deep, or 0. It over-counts
// brackets inside quoted text, which only makes it stricter.
func tooDeep(data []byte, limit int) int {
	flow := 0
	for i, line := range bytes.Split(data, []byte("\n")) {
		rest := bytes.TrimLeft(line, " ")
		dashes := 0
		for bytes.HasPrefix(rest, []byte("- ")) || bytes.HasPrefix(rest, []byte("? ")) {
			dashes++
			rest = bytes.TrimLeft(rest[2:], " ")
		}
		if dashes > limit {
			return i + 1
		}
		for _, b := range rest {
			if b == '#' {
				break
			}
			switch b {
			case '[', '{':
				if flow++; flow > limit {
					return i + 1
				}
			case ']', '}':
				flow = max(flow-1, 0)
			}
		}
	}
	return 0
}

// checkQueues reports the queue errors besides undefined reservation
// queues; at places an error at a YAML path.
func checkQueues(qs []QueueSpec, at func(path string, err error) error) []error {
	var errs []error
	index := make(map[string]int, len(qs))
	for i, q := range qs {
		path := fmt.Sprintf("$.queues[%d]", i)
		switch {
		case q.Name == "":
			errs = append(errs, at(path, fmt.Errorf("queue %d has no name", i+1)))
		case index[q.Name] != 0:
			errs = append(errs, at(path+".name", fmt.Errorf("queue %q defined twice", q.Name)))
		case math.IsNaN(q.Weight) || q.Weight < 0 || q.Weight > MaxQueueWeight:
			errs = append(errs, at(path+".weight", fmt.Errorf("queue %q: weight %v outside 0..%d", q.Name, q.Weight, MaxQueueWeight)))
		case q.Guaranteed.negative() || q.Limit.negative():
			errs = append(errs, at(path, fmt.Errorf("queue %q: negative resource", q.Name)))
		case q.Guaranteed.tooLarge() || q.Limit.tooLarge():
			errs = append(errs, at(path, fmt.Errorf("queue %q: a resource above %d (the queues' sums must fit in 64 bits)", q.Name, MaxQueueResource)))
		default:
			if r, g, l, over := q.Guaranteed.over(q.Limit); over {
				errs = append(errs, at(path+".guaranteed."+r, fmt.Errorf("queue %q: guaranteed %s %d exceeds its limit %d", q.Name, r, g, l)))
			}
			for model, g := range q.ModelGuaranteed {
				if l, ok := q.ModelLimit[model]; ok && l > 0 && g > l {
					errs = append(errs, at(path+".modelGuaranteed", fmt.Errorf("queue %q: guaranteed %d milli-GPU of %s exceeds its limit %d", q.Name, g, model, l)))
				}
			}
			for _, m := range []map[string]int64{q.ModelGuaranteed, q.ModelLimit} {
				for model, v := range m {
					if v < 0 || v > MaxQueueResource {
						errs = append(errs, at(path, fmt.Errorf("queue %q: milli-GPU of %s %d outside 0..%d", q.Name, model, v, MaxQueueResource)))
					}
				}
			}
		}
		index[q.Name] = i + 1
	}
	for i, q := range qs {
		if q.Parent != "" && index[q.Parent] == 0 {
			errs = append(errs, at(fmt.Sprintf("$.queues[%d].parent", i), fmt.Errorf("queue %q: parent %q is not defined", q.Name, q.Parent)))
			continue
		}
		for steps, p := 0, q.Parent; p != "" && index[p] != 0; p = qs[index[p]-1].Parent {
			if steps++; steps > len(qs) {
				errs = append(errs, at(fmt.Sprintf("$.queues[%d].parent", i), fmt.Errorf("queue %q: parent cycle", q.Name)))
				break
			}
		}
	}
	return errs
}

// yamlError is a strictyaml error as a [*QueueFileError] at its line
// (line 1 when it has none).
func yamlError(name string, err error) error {
	var se *strictyaml.Error
	if errors.As(err, &se) {
		return &QueueFileError{File: name, Line: max(se.Line, 1), Err: errors.New(se.Msg)}
	}
	return &QueueFileError{File: name, Line: 1, Err: err}
}

// lineOf is the line of the node at a YAML path in doc, or 1.
func lineOf(doc ast.Node, path string) (line int) {
	defer func() {
		if recover() != nil {
			line = 1
		}
	}()
	p, err := yaml.PathString(path)
	if err != nil {
		return 1
	}
	n, err := p.FilterNode(doc)
	if err != nil || n == nil || n.GetToken() == nil {
		return 1
	}
	return n.GetToken().Position.Line
}
