// Package migdra is pkg/mig as the DRA driver sees it: the slice manager
// as a [dra.MIGManager] and the GPUs' MIG catalogs as [dra.MIGCatalog]
// plain data. It sits between them because pkg/dra imports no go-nvml (so
// not pkg/mig) and pkg/mig imports nothing kubelet-facing.
package migdra

import (
	"context"

	"github.com/gpud/gpud/pkg/dra"
	"github.com/gpud/gpud/pkg/mig"
)

// Manager is the DRA driver's MIG manager: pkg/mig's slice manager, whose
// changes go through the MIG service (its lock, the applier's journal and
// rollback) and make the inventory rediscover.
type Manager struct {
	// Slices creates, finds and destroys slices. Required.
	Slices *mig.Slices
}

var _ dra.MIGManager = Manager{}

// Create creates a slice of profile at placementStart on the GPU
// parentUUID.
func (m Manager) Create(ctx context.Context, parentUUID, profile string, placementStart int) (dra.CreatedMIG, error) {
	s, err := m.Slices.Create(ctx, parentUUID, profile, placementStart)
	if err != nil {
		return dra.CreatedMIG{}, err
	}
	return dra.CreatedMIG{UUID: s.UUID, GIID: s.GIID, CIID: s.CIID, ModeEnabled: s.ModeEnabled}, nil
}

// Lookup finds the slice of profile at placementStart on the GPU
// parentUUID, and says whether the GPU's MIG mode is on.
func (m Manager) Lookup(_ context.Context, parentUUID, profile string, placementStart int) (dra.MIGLookup, error) {
	s, found, on, err := m.Slices.Find(parentUUID, profile, placementStart)
	if err != nil || !found {
		return dra.MIGLookup{ModeOn: on}, err
	}
	return dra.MIGLookup{Device: dra.CreatedMIG{UUID: s.UUID, GIID: s.GIID, CIID: s.CIID}, ModeOn: on}, nil
}

// Destroy destroys the slice migUUID on the GPU parentUUID (one already
// gone is no error); with restoreMode it turns MIG mode off when no slice
// is left, and it reports whether MIG mode is off when it returns.
func (m Manager) Destroy(ctx context.Context, parentUUID, migUUID string, restoreMode bool) (bool, error) {
	return m.Slices.Destroy(ctx, parentUUID, migUUID, restoreMode)
}

// Catalogs returns a [dra.NodeStateConfig] MIGCatalogs reader: the
// catalogs of the MIG-capable GPUs of the state read returns, by UUID
// (with the state's error, beside what it read).
func Catalogs(read func() (mig.State, error)) func() (map[string]dra.MIGCatalog, error) {
	return func() (map[string]dra.MIGCatalog, error) {
		st, err := read()
		out := map[string]dra.MIGCatalog{}
		for _, g := range st.GPUs {
			if g.MIGCapable {
				out[g.UUID] = Catalog(g.Catalog)
			}
		}
		return out, err
	}
}

// Catalog is c as the slice builder's plain data; LiveModeChange is left
// to the caller (it depends on the GPU's architecture).
func Catalog(c mig.Catalog) dra.MIGCatalog {
	out := dra.MIGCatalog{MemorySlices: c.MemorySlices, ComputeSlices: c.ComputeSlices}
	for _, p := range c.Profiles {
		mp := dra.MIGProfile{Name: p.Name, ComputeSlices: p.Slices, MemoryBytes: p.MemoryMiB << 20}
		for _, pl := range p.Placements {
			mp.Placements = append(mp.Placements, dra.Placement{Start: pl.Start, Size: pl.Size})
		}
		out.Profiles = append(out.Profiles, mp)
	}
	return out
}
