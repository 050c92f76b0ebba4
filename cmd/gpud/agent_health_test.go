package main

import (
	"testing"

	"github.com/gpud/gpud/pkg/gpu"
)

// TestAgentHealthOverrides checks that health set by the monitor shows in
// the inventory for GPUs and single MIG devices, survives rediscovery, and
// clears when the device heals.
func TestAgentHealthOverrides(t *testing.T) {
	fresh := func() gpu.Inventory {
		return gpu.Inventory{GPUs: []gpu.GPU{
			{UUID: "GPU-a", Health: gpu.Healthy, MIGDevices: []gpu.MIGDevice{{UUID: "MIG-1"}, {UUID: "MIG-2"}}},
			{UUID: "GPU-b", Health: gpu.Healthy},
		}}
	}
	a := &agent{changed: make(chan struct{})}
	a.setInventory(fresh())
	changed := a.InventoryChanged()
	a.SetHealth("MIG-2", gpu.Unhealthy, "xid 48 on GPU instance 2")
	a.SetHealth("GPU-b", gpu.Unhealthy, "xid 79")
	select {
	case <-changed:
	default:
		t.Fatal("a health change did not wake inventory watchers")
	}
	check := func(when string, gpuB, mig2 gpu.Health) {
		t.Helper()
		inv, _ := a.Inventory()
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
	a.setInventory(fresh()) // rediscovery reports everything Healthy
	check("after rediscovery", gpu.Unhealthy, gpu.Unhealthy)
	a.SetHealth("MIG-2", gpu.Healthy, "")
	a.SetHealth("GPU-b", gpu.Healthy, "")
	check("after healing", gpu.Healthy, gpu.Healthy)
}
