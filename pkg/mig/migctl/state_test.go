package migctl

import (
	"io"
	"testing"

	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/nodelabels"
)

func inv(pending bool) gpu.Inventory {
	return gpu.Inventory{GPUs: []gpu.GPU{{UUID: "a"}, {UUID: "b", MIGPending: pending}}}
}

func TestConfigState(t *testing.T) {
	var m ConfigState
	refreshed := 0
	m.Notify(func() { refreshed++ })
	m.Set(stateOf(0, nil))
	m.Set(stateOf(0, nil))
	if got := m.Get(inv(false)); got != nodelabels.StateSuccess || refreshed != 1 {
		t.Errorf("state %q after success, %d refreshes; want success, 1", got, refreshed)
	}
	if got := m.Get(inv(true)); got != nodelabels.StatePending {
		t.Errorf("state %q with a GPU waiting for a reset, want pending", got)
	}
	m.Set(stateOf(2, nil))
	if got := m.Get(inv(false)); got != nodelabels.StatePending {
		t.Errorf("state %q with 2 GPUs pending, want pending", got)
	}
	m.Set(stateOf(0, io.EOF))
	if got := m.Get(inv(false)); got != nodelabels.StateFailed || refreshed != 3 {
		t.Errorf("state %q after an error, %d refreshes; want failed, 3", got, refreshed)
	}
}
