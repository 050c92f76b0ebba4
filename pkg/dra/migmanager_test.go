package dra

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/mig"
)

// fakeMIG records creates and destroys; failCreate fails the n-th Create
// (1-based, 0 never). It keeps each GPU's MIG mode as the hardware would.
type fakeMIG struct {
	mu         sync.Mutex
	created    []string // "uuid profile@start"
	destroyed  []string
	live       map[string]string // MIG UUID -> parent
	modeOn     map[string]bool
	failCreate int
	calls      int
	// failDestroys fails that many Destroy calls first.
	failDestroys int
}

var _ MIGManager = (*fakeMIG)(nil)

func fakeUUID(parent, profile string, start int) string {
	return fmt.Sprintf("MIG-%s-%s-%d", parent, profile, start)
}

func (f *fakeMIG) Create(_ context.Context, parent, profile string, start int) (CreatedMIG, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.calls == f.failCreate {
		return CreatedMIG{}, errors.New("injected create failure")
	}
	uuid := fakeUUID(parent, profile, start)
	if f.live == nil {
		f.live, f.modeOn = map[string]string{}, map[string]bool{}
	}
	enabled := !f.modeOn[parent]
	f.modeOn[parent] = true
	f.live[uuid] = parent
	f.created = append(f.created, fmt.Sprintf("%s %s@%d", parent, profile, start))
	return CreatedMIG{UUID: uuid, GIID: 7 + start, CIID: 0, ModeEnabled: enabled}, nil
}

func (f *fakeMIG) Lookup(_ context.Context, parent, profile string, start int) (MIGLookup, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	uuid := fakeUUID(parent, profile, start)
	if _, ok := f.live[uuid]; ok {
		return MIGLookup{Device: CreatedMIG{UUID: uuid, GIID: 7 + start}, ModeOn: f.modeOn[parent]}, nil
	}
	return MIGLookup{ModeOn: f.modeOn[parent]}, nil
}

func (f *fakeMIG) Destroy(_ context.Context, parent, uuid string, restore bool) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failDestroys > 0 {
		f.failDestroys--
		return false, errors.New("injected destroy failure")
	}
	if _, ok := f.live[uuid]; ok {
		delete(f.live, uuid)
		f.destroyed = append(f.destroyed, uuid)
	}
	left := 0
	for _, p := range f.live {
		if p == parent {
			left++
		}
	}
	if restore && left == 0 {
		f.modeOn[parent] = false
	}
	return !f.modeOn[parent], nil
}

func (f *fakeMIG) liveCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.live)
}

// simMIG is the MIGManager the wiring builds (cmd/gpud's draMIG): pkg/mig's
// slice manager on a MIG service (planner, applier with its journal and
// rollback) over a simulated node.
type simMIG struct {
	s   *mig.Slices
	svc *mig.Service
}

var _ MIGManager = (*simMIG)(nil)

func newSimMIG(lib nvml.Interface, journal string) *simMIG {
	svc, err := mig.NewService(mig.ServiceConfig{Lib: lib, Applier: mig.NewApplier(lib, nil, mig.WithJournal(journal)),
		Processes: discovery.ProcessReader{Lib: lib}})
	if err != nil {
		panic(err) // only on a nil Lib
	}
	return &simMIG{s: mig.NewSlices(svc), svc: svc}
}

func (m *simMIG) Create(ctx context.Context, parent, profile string, start int) (CreatedMIG, error) {
	s, err := m.s.Create(ctx, parent, profile, start)
	if err != nil {
		return CreatedMIG{}, err
	}
	return CreatedMIG{UUID: s.UUID, GIID: s.GIID, CIID: s.CIID, ModeEnabled: s.ModeEnabled}, nil
}

func (m *simMIG) Lookup(_ context.Context, parent, profile string, start int) (MIGLookup, error) {
	s, found, on, err := m.s.Find(parent, profile, start)
	if err != nil || !found {
		return MIGLookup{ModeOn: on}, err
	}
	return MIGLookup{Device: CreatedMIG{UUID: s.UUID, GIID: s.GIID, CIID: s.CIID}, ModeOn: on}, nil
}

func (m *simMIG) Destroy(ctx context.Context, parent, uuid string, restore bool) (bool, error) {
	return m.s.Destroy(ctx, parent, uuid, restore)
}
