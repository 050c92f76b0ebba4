package dra

import (
	"log/slog"
	"sync"

	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/timeslice"
)

// Sharing is the sharing config at run time (a *timeslice.Runtime): its
// exclusive GPUs take no fractions, and a change republishes.
type Sharing interface {
	Sharing() timeslice.Config
	SharingChanged() <-chan struct{}
}

var _ Sharing = (*timeslice.Runtime)(nil)

// NodeStateConfig configures a [NodeStateSource].
type NodeStateConfig struct {
	// MIGCatalogs reads the catalog of each MIG-capable GPU, by UUID. It is
	// called while a MIG-capable GPU of the inventory has no catalog yet;
	// what it returns is kept (also beside an error, which is logged).
	// Catalogs without profiles are ignored. Nil: no dynamic MIG devices.
	MIGCatalogs func() (map[string]MIGCatalog, error)
	// PCIeRoot reads a GPU's PCIe root complex ("pci0000:00", see
	// [PCIeRoot]), once per GPU; nil: no pcieRoot attributes.
	PCIeRoot func(gpu.GPU) (string, error)
	// Sharing is the sharing config at run time; nil: no exclusive GPUs.
	Sharing Sharing
	// MemoryLimitModes returns each GPU's memory limit mode by UUID (the
	// agent's enforcement decides them: "driver", "mps", "watchdog"); nil,
	// or a GPU it leaves out: no memoryLimitMode attribute.
	MemoryLimitModes func() map[string]string
	// Log may be nil.
	Log *slog.Logger
}

// NodeStateSource completes an inventory into the slice builder's input
// ([Options].NodeState): each MIG-capable GPU's catalog, each GPU's PCIe
// root and the GPUs the sharing config keeps whole. Catalogs and roots do
// not change while a GPU is on the bus, so each is read once per GPU; a
// root that cannot be read is logged once and the GPU has no pcieRoot
// attribute. It is safe for concurrent use.
type NodeStateSource struct {
	cfg NodeStateConfig

	catMu sync.Mutex
	cats  map[string]MIGCatalog // by GPU UUID, LiveModeChange unset

	rootMu sync.Mutex
	roots  map[string]string // by GPU UUID; "" when it could not be read
}

// NewNodeStateSource returns a source that reads through cfg.
func NewNodeStateSource(cfg NodeStateConfig) *NodeStateSource {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &NodeStateSource{cfg: cfg, cats: map[string]MIGCatalog{}, roots: map[string]string{}}
}

// NodeState is inv's node state, inv included.
func (s *NodeStateSource) NodeState(inv gpu.Inventory) NodeState {
	st := NodeState{Inventory: inv, MIG: s.migCatalogs(inv), PCIeRoots: s.pcieRoots(inv)}
	if s.cfg.Sharing != nil {
		st.ExclusiveOnly = s.cfg.Sharing.Sharing().ExclusiveOnly(inv)
	}
	if s.cfg.MemoryLimitModes != nil {
		st.MemoryLimitModes = s.cfg.MemoryLimitModes()
	}
	return st
}

// migCatalogs returns the catalogs of inv's MIG-capable GPUs by UUID,
// reading them when one is missing.
func (s *NodeStateSource) migCatalogs(inv gpu.Inventory) map[string]MIGCatalog {
	s.catMu.Lock()
	defer s.catMu.Unlock()
	missing := false
	for _, g := range inv.GPUs {
		if _, ok := s.cats[g.UUID]; g.MIGCapable && !ok {
			missing = true
		}
	}
	if missing && s.cfg.MIGCatalogs != nil {
		cats, err := s.cfg.MIGCatalogs()
		if err != nil {
			s.cfg.Log.Warn("mig catalogs not read, no dynamic mig devices", "err", err)
		}
		for uuid, c := range cats {
			if len(c.Profiles) > 0 {
				s.cats[uuid] = c
			}
		}
	}
	out := map[string]MIGCatalog{}
	for _, g := range inv.GPUs {
		if c, ok := s.cats[g.UUID]; ok && g.MIGCapable {
			c.LiveModeChange = LiveMIGModeChange(g.Architecture)
			out[g.UUID] = c
		}
	}
	return out
}

// pcieRoots returns the roots of inv's GPUs by UUID.
func (s *NodeStateSource) pcieRoots(inv gpu.Inventory) map[string]string {
	s.rootMu.Lock()
	defer s.rootMu.Unlock()
	out := make(map[string]string, len(inv.GPUs))
	if s.cfg.PCIeRoot == nil {
		return out
	}
	for _, g := range inv.GPUs {
		root, ok := s.roots[g.UUID]
		if !ok {
			var err error
			if root, err = s.cfg.PCIeRoot(g); err != nil {
				s.cfg.Log.Warn("pcie root not read, no pcieRoot attribute", "gpu_uuid", g.UUID, "err", err)
				root = ""
			}
			s.roots[g.UUID] = root
		}
		if root != "" {
			out[g.UUID] = root
		}
	}
	return out
}
