package queues

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpud/gpud/pkg/allocator/jobs"
)

// maxNameLen bounds a GPU model or reservation name.
const maxNameLen = 256

// FromUnstructured decodes a Queue as the dynamic client returns it.
func FromUnstructured(u *unstructured.Unstructured) (*Queue, error) {
	var q Queue
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &q); err != nil {
		return nil, fmt.Errorf("queue %s: %w: %w", u.GetName(), ErrInvalid, err)
	}
	return &q, nil
}

// Convert turns one Queue into the allocator's queue and reservations,
// checking what one object alone can get wrong; every problem is named
// by its field ("spec.limit.gpuMilli: Invalid value: -1: ..."). The
// parent is not looked up here (Resolve does).
func Convert(q *Queue) (jobs.Queue, []jobs.Reservation, error) {
	errs := validate(q)
	if len(errs) > 0 {
		return jobs.Queue{}, nil, fmt.Errorf("%w: %w", ErrInvalid, errs.ToAggregate())
	}
	s := q.Spec
	w, _ := weightValue(s.Weight) // validate checked it
	out := jobs.Queue{Name: q.Name, Parent: s.Parent, Weight: w, Quota: jobs.Quota{
		Guaranteed: s.Guaranteed.resources(), Limit: s.Limit.resources(),
		ModelGuaranteed: cloneMap(s.ModelGuaranteed), ModelLimit: cloneMap(s.ModelLimit),
	}, Objective: s.Objectives.objective()}
	var rs []jobs.Reservation
	for _, r := range s.Reservations {
		rs = append(rs, jobs.Reservation{Name: q.Name + "/" + r.Name, Queue: q.Name, Nodes: slices.Clone(r.Nodes),
			Start: r.Start.Unix(), End: r.End.Unix()})
	}
	return out, rs, nil
}

func cloneMap(m map[string]int64) map[string]int64 {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func (r Resources) resources() jobs.Resources {
	return jobs.Resources{CPUMilli: r.CPUMilli, MemoryMiB: r.MemoryMiB, GPUMilli: r.GPUMilli, GPUMemoryMiB: r.GPUMemoryMiB, MIGSlices: r.MIGSlices}
}

func fromJobs(r jobs.Resources) Resources {
	return Resources{CPUMilli: r.CPUMilli, MemoryMiB: r.MemoryMiB, GPUMilli: r.GPUMilli, GPUMemoryMiB: r.GPUMemoryMiB, MIGSlices: r.MIGSlices}
}

type namedValue struct {
	name string
	v    int64
}

func (r Resources) fields() [5]namedValue {
	return [5]namedValue{{"cpuMilli", r.CPUMilli}, {"memoryMiB", r.MemoryMiB}, {"gpuMilli", r.GPUMilli},
		{"gpuMemoryMiB", r.GPUMemoryMiB}, {"migSlices", r.MIGSlices}}
}

// validate checks one Queue on its own.
func validate(q *Queue) field.ErrorList {
	var errs field.ErrorList
	name := field.NewPath("metadata", "name")
	if q.Name == "" {
		errs = append(errs, field.Required(name, "the queue's name"))
	} else if msgs := validation.IsDNS1123Subdomain(q.Name); len(msgs) > 0 {
		errs = append(errs, field.Invalid(name, q.Name, fmt.Sprint(msgs)))
	}
	spec := field.NewPath("spec")
	s := q.Spec
	if s.Parent != "" && s.Parent == q.Name {
		errs = append(errs, field.Invalid(spec.Child("parent"), s.Parent, "a queue cannot be its own parent"))
	}
	if _, err := weightValue(s.Weight); err != nil {
		errs = append(errs, field.Invalid(spec.Child("weight"), s.Weight.String(), weightHelp))
	}
	for _, set := range []struct {
		path string
		r    Resources
	}{{"guaranteed", s.Guaranteed}, {"limit", s.Limit}} {
		for _, f := range set.r.fields() {
			if f.v < 0 || f.v > MaxResource {
				errs = append(errs, field.Invalid(spec.Child(set.path, f.name), f.v, fmt.Sprintf("want 0 to %d", MaxResource)))
			}
		}
	}
	lim := s.Limit.fields()
	for i, g := range s.Guaranteed.fields() {
		if l := lim[i].v; l > 0 && g.v > l {
			errs = append(errs, field.Invalid(spec.Child("guaranteed", g.name), g.v, fmt.Sprintf("exceeds spec.limit.%s %d", g.name, l)))
		}
	}
	for _, m := range []struct {
		path string
		m    map[string]int64
	}{{"modelGuaranteed", s.ModelGuaranteed}, {"modelLimit", s.ModelLimit}} {
		p := spec.Child(m.path)
		if len(m.m) > MaxModels {
			errs = append(errs, field.TooMany(p, len(m.m), MaxModels))
			continue
		}
		for _, model := range sortedKeys(m.m) {
			v := m.m[model]
			switch {
			case model == "" || len(model) > maxNameLen:
				errs = append(errs, field.Invalid(p, model, fmt.Sprintf("a GPU model name of 1 to %d characters", maxNameLen)))
			case v < 0 || v > MaxResource:
				errs = append(errs, field.Invalid(p.Key(model), v, fmt.Sprintf("want 0 to %d milli-GPU", MaxResource)))
			}
		}
	}
	for _, model := range sortedKeys(s.ModelGuaranteed) {
		if l := s.ModelLimit[model]; l > 0 && s.ModelGuaranteed[model] > l {
			errs = append(errs, field.Invalid(spec.Child("modelGuaranteed").Key(model), s.ModelGuaranteed[model],
				fmt.Sprintf("exceeds spec.modelLimit[%s] %d", model, l)))
		}
	}
	errs = append(errs, validateReservations(spec.Child("reservations"), s.Reservations)...)
	errs = append(errs, validateObjectives(spec.Child("objectives"), s.Objectives)...)
	nsPath := spec.Child("namespaces")
	if len(s.Namespaces) > MaxNamespaces {
		errs = append(errs, field.TooMany(nsPath, len(s.Namespaces), MaxNamespaces))
	} else {
		seen := map[string]bool{}
		for i, ns := range s.Namespaces {
			if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
				errs = append(errs, field.Invalid(nsPath.Index(i), ns, fmt.Sprint(msgs)))
			} else if seen[ns] {
				errs = append(errs, field.Duplicate(nsPath.Index(i), ns))
			}
			seen[ns] = true
		}
	}
	return errs
}

func validateReservations(p *field.Path, rs []Reservation) field.ErrorList {
	var errs field.ErrorList
	if len(rs) > MaxReservations {
		return field.ErrorList{field.TooMany(p, len(rs), MaxReservations)}
	}
	seen := map[string]bool{}
	for i, r := range rs {
		rp := p.Index(i)
		switch {
		case r.Name == "" || len(r.Name) > maxNameLen:
			errs = append(errs, field.Invalid(rp.Child("name"), r.Name, fmt.Sprintf("a name of 1 to %d characters", maxNameLen)))
		case seen[r.Name]:
			errs = append(errs, field.Duplicate(rp.Child("name"), r.Name))
		}
		seen[r.Name] = true
		switch {
		case len(r.Nodes) == 0:
			errs = append(errs, field.Required(rp.Child("nodes"), "the nodes held"))
		case len(r.Nodes) > MaxNodes:
			errs = append(errs, field.TooMany(rp.Child("nodes"), len(r.Nodes), MaxNodes))
		default:
			for j, n := range r.Nodes {
				if msgs := validation.IsDNS1123Subdomain(n); len(msgs) > 0 {
					errs = append(errs, field.Invalid(rp.Child("nodes").Index(j), n, fmt.Sprint(msgs)))
				}
			}
		}
		if r.Start.IsZero() || r.End.IsZero() || !r.End.After(r.Start.Time) {
			errs = append(errs, field.Invalid(rp.Child("end"), r.End.UTC().Format("2006-01-02T15:04:05Z"), "want a start and an end after it"))
		}
	}
	return errs
}

func sortedKeys(m map[string]int64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
