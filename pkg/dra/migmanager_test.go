package dra

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/pkg/mig"
)

// fakeMIG records creates and destroys; failCreate fails the n-th Create
// (1-based, 0 never).
type fakeMIG struct {
	mu         sync.Mutex
	created    []string // "uuid profile@start"
	destroyed  []string
	live       map[string]bool
	failCreate int
	calls      int
	// failDestroys fails that many Destroy calls first.
	failDestroys int
}

var _ MIGManager = (*fakeMIG)(nil)

func (f *fakeMIG) Create(_ context.Context, parent, profile string, start int) (CreatedMIG, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.calls == f.failCreate {
		return CreatedMIG{}, errors.New("injected create failure")
	}
	uuid := fmt.Sprintf("MIG-%s-%s-%d", parent, profile, start)
	if f.live == nil {
		f.live = map[string]bool{}
	}
	f.live[uuid] = true
	f.created = append(f.created, fmt.Sprintf("%s %s@%d", parent, profile, start))
	return CreatedMIG{UUID: uuid, GIID: 7 + start, CIID: 0}, nil
}

func (f *fakeMIG) Destroy(_ context.Context, uuid string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failDestroys > 0 {
		f.failDestroys--
		return errors.New("injected destroy failure")
	}
	delete(f.live, uuid)
	f.destroyed = append(f.destroyed, uuid)
	return nil
}

func (f *fakeMIG) liveCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.live)
}

// simMIG is the MIGManager the wiring builds, on pkg/mig's planner and
// applier (with its journal and rollback) over a simulated node.
type simMIG struct {
	lib     nvml.Interface
	applier *mig.Applier
	mu      sync.Mutex
}

var _ MIGManager = (*simMIG)(nil)

func newSimMIG(lib nvml.Interface, journal string) *simMIG {
	return &simMIG{lib: lib, applier: mig.NewApplier(lib, nil, mig.WithJournal(journal))}
}

// apply moves GPU uuid to its current layout changed by edit.
func (m *simMIG) apply(ctx context.Context, match func(g mig.GPUState) bool, edit func(w *mig.GPUWants, g mig.GPUState) error) (mig.State, int, error) {
	st, err := mig.ReadState(m.lib)
	if err != nil {
		return st, -1, err
	}
	for _, g := range st.GPUs {
		if !match(g) {
			continue
		}
		w := mig.GPUWants{MIGEnabled: g.MIGEnabled}
		for _, in := range g.Instances {
			w.Slices = append(w.Slices, mig.Want{Profile: in.Profile, Start: in.Placement.Start})
		}
		if err := edit(&w, g); err != nil {
			return st, g.Index, err
		}
		want := mig.Desired{Config: "dra", GPUs: map[int]mig.GPUWants{g.Index: w}}
		plan, err := mig.NewPlan(st, want, nil, mig.Options{})
		if err != nil {
			return st, g.Index, err
		}
		res, err := m.applier.Apply(ctx, st, want, plan)
		if err == nil && len(res.Pending) > 0 {
			err = fmt.Errorf("gpu %d: %s", g.Index, res.Pending[g.Index])
		}
		return res.State, g.Index, err
	}
	return st, -1, errors.New("not found")
}

func (m *simMIG) Create(ctx context.Context, parent, profile string, start int) (CreatedMIG, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st, idx, err := m.apply(ctx, func(g mig.GPUState) bool { return g.UUID == parent }, func(w *mig.GPUWants, _ mig.GPUState) error {
		w.MIGEnabled = true
		w.Slices = append(w.Slices, mig.Want{Profile: profile, Start: start})
		return nil
	})
	if err != nil {
		return CreatedMIG{}, err
	}
	if g := st.GPU(idx); g != nil {
		for _, in := range g.Instances {
			if in.Profile == profile && in.Placement.Start == start && in.Complete() {
				return CreatedMIG{UUID: in.CIs[0].UUID, GIID: in.GIID, CIID: in.CIs[0].ID}, nil
			}
		}
	}
	return CreatedMIG{}, errors.New("created instance not found")
}

func (m *simMIG) Destroy(ctx context.Context, uuid string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	owns := func(g mig.GPUState) bool {
		for _, in := range g.Instances {
			for _, ci := range in.CIs {
				if ci.UUID == uuid {
					return true
				}
			}
		}
		return false
	}
	_, idx, err := m.apply(ctx, owns, func(w *mig.GPUWants, g mig.GPUState) error {
		w.Slices = w.Slices[:0]
		for _, in := range g.Instances {
			if !owns(mig.GPUState{Instances: []mig.Instance{in}}) {
				w.Slices = append(w.Slices, mig.Want{Profile: in.Profile, Start: in.Placement.Start})
			}
		}
		return nil
	})
	if idx < 0 {
		return nil // gone already
	}
	return err
}
