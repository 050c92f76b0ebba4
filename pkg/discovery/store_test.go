package discovery

import (
	"testing"

	"github.com/gpud/gpud/pkg/gpu"
)

// TestStoreHealthOverrides checks that health set by the monitor shows in
// the inventory for GPUs and single MIG devices, survives rediscovery, and
// clears when the device heals.
func TestStoreHealthOverrides(t *testing.T) {
	fresh := func() gpu.Inventory {
		return gpu.Inventory{GPUs: []gpu.GPU{
			{UUID: "GPU-a", Health: gpu.Healthy, MIGDevices: []gpu.MIGDevice{{UUID: "MIG-1"}, {UUID: "MIG-2"}}},
			{UUID: "GPU-b", Health: gpu.Healthy},
		}}
	}
	s := NewStore(nil, nil)
	if _, ok := s.Inventory(); ok {
		t.Fatal("a new store says it has an inventory")
	}
	s.SetHealth("GPU-b", gpu.Unhealthy, "xid 79 before the first read")
	s.Set(fresh())
	changed := s.InventoryChanged()
	s.SetHealth("MIG-2", gpu.Unhealthy, "xid 48 on GPU instance 2")
	select {
	case <-changed:
	default:
		t.Fatal("a health change did not wake inventory watchers")
	}
	check := func(when string, gpuB, mig2 gpu.Health) {
		t.Helper()
		inv, _ := s.Inventory()
		a0 := inv.GPUs[0]
		if a0.Health != gpu.Healthy || a0.MIGDevices[0].Health != "" {
			t.Errorf("%s: GPU-a %s, MIG-1 %q: want both untouched", when, a0.Health, a0.MIGDevices[0].Health)
		}
		if got, _ := a0.MIGDevices[1].EffectiveHealth(&a0); got != mig2 {
			t.Errorf("%s: MIG-2 %s, want %s", when, got, mig2)
		}
		if inv.GPUs[1].Health != gpuB {
			t.Errorf("%s: GPU-b %s, want %s", when, inv.GPUs[1].Health, gpuB)
		}
	}
	check("after the errors", gpu.Unhealthy, gpu.Unhealthy)
	if s.Set(fresh()) { // rediscovery reports everything Healthy
		t.Error("rediscovering the same node reported a change")
	}
	check("after rediscovery", gpu.Unhealthy, gpu.Unhealthy)
	s.SetHealth("MIG-2", gpu.Healthy, "")
	s.SetHealth("GPU-b", gpu.Healthy, "")
	check("after healing", gpu.Healthy, gpu.Healthy)
}

func TestStoreRediscoverWithoutDiscoverer(t *testing.T) {
	if _, err := NewStore(nil, nil).Rediscover(); err == nil {
		t.Fatal("Rediscover without a discoverer succeeded")
	}
}
