package migctl

import (
	"sync"

	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/nodelabels"
)

// ConfigState is the configured MIG layout's state as mig-manager names
// it (nvidia.com/mig.config.state): the controller sets it (through
// [Config].State), the node labels read it and are refreshed when it
// changes. The zero value is empty (no layout configured) and ready to
// use; it is safe for concurrent use.
type ConfigState struct {
	mu       sync.Mutex
	state    string
	onChange func()
}

// Set records s and calls the Notify function when s differs from the
// state before.
func (m *ConfigState) Set(s string) {
	m.mu.Lock()
	changed := m.state != s
	m.state = s
	f := m.onChange
	m.mu.Unlock()
	if changed && f != nil {
		f()
	}
}

// Get is the state, pending while a GPU of inv waits for a reset.
func (m *ConfigState) Get(inv gpu.Inventory) string {
	m.mu.Lock()
	s := m.state
	m.mu.Unlock()
	if s == nodelabels.StateSuccess {
		for _, g := range inv.GPUs {
			if g.MIGPending {
				return nodelabels.StatePending
			}
		}
	}
	return s
}

// Notify makes f the function Set calls on a change.
func (m *ConfigState) Notify(f func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.onChange = f
}
