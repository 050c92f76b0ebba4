package discovery

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/simnode"
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

// TestStoreRunRediscovers checks that Run rereads the node each interval
// (a MIG mode change made behind its back shows up) and stops with ctx.
func TestStoreRunRediscovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := simnode.NewBuiltin("dgx-h100")
		s := NewStore(New(n, "node", nil), nil)
		inv, err := s.Rediscover()
		if err != nil {
			t.Fatal(err)
		}
		if inv.GPUs[0].MIGEnabled {
			t.Fatal("gpu 0 starts in MIG mode")
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx, 30*time.Second) }()
		changed := s.InventoryChanged()
		dev, _ := n.DeviceGetHandleByIndex(0)
		if ret, _ := dev.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
			t.Fatalf("SetMigMode: %v", ret)
		}
		time.Sleep(29 * time.Second)
		synctest.Wait()
		select {
		case <-changed:
			t.Fatal("the store changed before the interval")
		default:
		}
		time.Sleep(time.Second)
		synctest.Wait()
		select {
		case <-changed:
		default:
			t.Fatal("the store did not reread the node after the interval")
		}
		if inv, _ := s.Inventory(); !inv.GPUs[0].MIGEnabled && !inv.GPUs[0].MIGPending {
			t.Error("the reread inventory does not show gpu 0's MIG mode change")
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run() = %v", err)
		}
	})
}
