package mig

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Resolve turns the layout name of a file into each GPU's desired state,
// checking every GPU and profile name against what the GPUs offer. Errors
// name the layout, the entry, the GPU and the profile.
func (f LayoutFile) Resolve(name string, st State) (Desired, error) {
	entries, ok := f.MigConfigs[name]
	if !ok {
		return Desired{}, fmt.Errorf("%w: no mig-config named %q; the file has %s", ErrBadLayout, name, strings.Join(f.Names(), ", "))
	}
	d := Desired{Config: name, GPUs: map[int]GPUWants{}}
	owner := map[int]int{}
	var errs []error
	unknown := &groupedErrs{}
	for i, e := range entries {
		where := fmt.Sprintf("mig-configs %q entry %d", name, i)
		gpus, err := e.selectGPUs(st)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: %s: %w", ErrBadLayout, where, err))
			continue
		}
		wants, err := e.wants()
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: %s: %w", ErrBadLayout, where, err))
			continue
		}
		for _, g := range gpus {
			if prev, dup := owner[g.Index]; dup {
				errs = append(errs, fmt.Errorf("%w: %s: gpu %d is also in entry %d", ErrBadLayout, where, g.Index, prev))
				continue
			}
			owner[g.Index] = i
			if !g.MIGCapable {
				if e.MigEnabled {
					errs = append(errs, fmt.Errorf("%w: %s: gpu %d (%s) does not support MIG", ErrBadLayout, where, g.Index, g.Name))
				}
				continue
			}
			w := GPUWants{MIGEnabled: e.MigEnabled}
			for _, want := range wants {
				p, err := g.Catalog.Lookup(want.Profile)
				if err != nil {
					unknown.add(fmt.Sprintf("%s: %s (%s)", where, want.Profile, g.Name), g.Index,
						fmt.Errorf("%s: gpu %%s (%s): %w", where, g.Name, err))
					continue
				}
				if want.Start >= 0 && !slices.ContainsFunc(p.Placements, func(pl Placement) bool { return pl.Start == want.Start }) {
					errs = append(errs, fmt.Errorf("%w: %s: gpu %d: %s cannot start at memory slice %d; allowed starts: %s",
						ErrBadLayout, where, g.Index, p.Name, want.Start, starts(p.Placements)))
					continue
				}
				w.Slices = append(w.Slices, Want{Profile: p.Name, Start: want.Start})
			}
			d.GPUs[g.Index] = w
		}
	}
	if err := errors.Join(append(errs, unknown.errs()...)...); err != nil {
		return Desired{}, err
	}
	return d, nil
}

func starts(pls []Placement) string {
	s := make([]string, len(pls))
	for i, p := range pls {
		s[i] = strconv.Itoa(p.Start)
	}
	return strings.Join(s, ", ")
}

// selectGPUs returns the GPUs an entry names, after its device-filter.
func (e LayoutEntry) selectGPUs(st State) ([]GPUState, error) {
	all, sel, err := e.devices()
	if err != nil {
		return nil, err
	}
	filters, err := e.filters()
	if err != nil {
		return nil, err
	}
	match := func(g GPUState) bool { return len(filters) == 0 || slices.Contains(filters, g.PCIDeviceID) }
	var out []GPUState
	if all {
		for _, g := range st.GPUs {
			if match(g) {
				out = append(out, g)
			}
		}
		return out, nil
	}
	for _, s := range sel {
		g, err := findGPU(st, s)
		if err != nil {
			return nil, err
		}
		if match(g) {
			out = append(out, g)
		}
	}
	return out, nil
}

func findGPU(st State, key string) (GPUState, error) {
	if i, err := strconv.Atoi(key); err == nil {
		if g := st.GPU(i); g != nil {
			return *g, nil
		}
		return GPUState{}, fmt.Errorf("gpu %d: the node has %d GPUs (0 to %d)", i, len(st.GPUs), len(st.GPUs)-1)
	}
	for _, g := range st.GPUs {
		if g.UUID == key {
			return g, nil
		}
	}
	return GPUState{}, fmt.Errorf("gpu %q: no GPU with that UUID on this node", key)
}

// groupedErrs folds the same error on many GPUs into one line naming them
// all ("gpu 0,1,2 (...)"); the format has one %s for the GPU list.
type groupedErrs struct {
	keys  []string
	gpus  map[string][]string
	errs0 map[string]error
}

func (g *groupedErrs) add(key string, gpu int, err error) {
	if g.gpus == nil {
		g.gpus, g.errs0 = map[string][]string{}, map[string]error{}
	}
	if _, ok := g.gpus[key]; !ok {
		g.keys = append(g.keys, key)
		g.errs0[key] = err
	}
	if l := g.gpus[key]; len(l) == 0 || l[len(l)-1] != strconv.Itoa(gpu) {
		g.gpus[key] = append(l, strconv.Itoa(gpu))
	}
}

func (g *groupedErrs) errs() []error {
	out := make([]error, 0, len(g.keys))
	for _, k := range g.keys {
		e := g.errs0[k]
		out = append(out, &gpuListError{gpus: strings.Join(g.gpus[k], ","), err: e})
	}
	return out
}

// gpuListError fills the GPU list into a grouped error's message and keeps
// its chain for errors.Is.
type gpuListError struct {
	gpus string
	err  error
}

func (e *gpuListError) Error() string { return strings.Replace(e.err.Error(), "%s", e.gpus, 1) }
func (e *gpuListError) Unwrap() error { return e.err }
