package simnode

import (
	"encoding/binary"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func TestStableIdentity(t *testing.T) {
	a, b := NewBuiltin("dgx-h100"), NewBuiltin("dgx-h100")
	seen := map[string]bool{}
	for i := range 8 {
		da, _ := a.DeviceGetHandleByIndex(i)
		db, _ := b.DeviceGetHandleByIndex(i)
		ua, _ := da.GetUUID()
		ub, _ := db.GetUUID()
		if ua != ub {
			t.Fatalf("gpu %d UUID differs across starts: %s vs %s", i, ua, ub)
		}
		if seen[ua] {
			t.Fatalf("duplicate UUID %s", ua)
		}
		seen[ua] = true
		p, _ := da.GetPciInfo()
		if bus := busString(p.BusId[:]); !strings.HasPrefix(bus, "00000000:") || len(bus) != 16 {
			t.Fatalf("gpu %d bus ID %q", i, bus)
		}
	}
	other := NewBuiltin("dgx-a100")
	d, _ := other.DeviceGetHandleByIndex(0)
	if u, _ := d.GetUUID(); seen[u] {
		t.Fatal("different nodes share a UUID")
	}
}

func busString(b []int8) string {
	var s []byte
	for _, c := range b {
		if c == 0 {
			break
		}
		s = append(s, byte(c))
	}
	return string(s)
}

func TestUnmodeledCallsAreNotSupported(t *testing.T) {
	n := NewBuiltin("dgx-h100")
	d, _ := n.DeviceGetHandleByIndex(0)
	if _, ret := d.GetFanSpeed(); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Fatalf("GetFanSpeed = %v, want ERROR_NOT_SUPPORTED (not a panic)", ret)
	}
}

func TestMemoryFollowsProcesses(t *testing.T) {
	n := NewBuiltin("dgx-h100")
	d, _ := n.DeviceGetHandleByIndex(3)
	before, _ := d.GetMemoryInfo_v2()
	if before.Used != 0 || before.Free != before.Total-before.Reserved || before.Reserved == 0 {
		t.Fatalf("idle memory %+v", before)
	}
	if err := n.AddProcess(3, 1234, 10<<30); err != nil {
		t.Fatal(err)
	}
	after, _ := d.GetMemoryInfo_v2()
	if after.Used != 10<<30 || after.Free != before.Free-10<<30 {
		t.Fatalf("memory with a 10 GiB process %+v", after)
	}
	procs, _ := d.GetComputeRunningProcesses()
	if len(procs) != 1 || procs[0].Pid != 1234 || procs[0].UsedGpuMemory != 10<<30 {
		t.Fatalf("processes %+v", procs)
	}
	if err := n.AddProcess(3, 99, 200<<30); !errors.Is(err, nvml.ERROR_MEMORY) {
		t.Fatalf("oversized process: %v, want ERROR_MEMORY", err)
	}
}

func TestTelemetryDeterministic(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	a := NewBuiltin("dgx-h100", WithClock(clock))
	b := NewBuiltin("dgx-h100", WithClock(clock))
	for _, n := range []*Node{a, b} {
		if err := n.AddProcess(0, 1, 1<<30); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Add(37 * time.Second)
	da, _ := a.DeviceGetHandleByIndex(0)
	db, _ := b.DeviceGetHandleByIndex(0)
	ua, _ := da.GetUtilizationRates()
	ub, _ := db.GetUtilizationRates()
	pa, _ := da.GetPowerUsage()
	pb, _ := db.GetPowerUsage()
	if ua != ub || pa != pb {
		t.Fatalf("same seed and clock differ: %v/%v, %d/%d", ua, ub, pa, pb)
	}
	if ua.Gpu < 15 || ua.Gpu > 95 {
		t.Fatalf("busy utilization %d outside 15..95", ua.Gpu)
	}
	e1, _ := da.GetTotalEnergyConsumption()
	now = now.Add(10 * time.Second)
	e2, _ := da.GetTotalEnergyConsumption()
	if e2 <= e1 {
		t.Fatalf("energy did not grow: %d then %d", e1, e2)
	}
	idle, _ := a.DeviceGetHandleByIndex(5)
	if u, _ := idle.GetUtilizationRates(); u.Gpu != 0 {
		t.Fatalf("idle GPU utilization %d", u.Gpu)
	}
}

func TestFaultInjection(t *testing.T) {
	n := NewBuiltin("dgx-h100")
	set, _ := n.EventSetCreate()
	for i := range 8 {
		d, _ := n.DeviceGetHandleByIndex(i)
		if ret := d.RegisterEvents(nvml.EventTypeXidCriticalError|nvml.EventTypeDoubleBitEccError, set); ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
	}
	if _, ret := set.Wait(10); ret != nvml.ERROR_TIMEOUT {
		t.Fatalf("Wait with no events = %v, want ERROR_TIMEOUT", ret)
	}
	if err := n.InjectXid(2, 48); err != nil {
		t.Fatal(err)
	}
	e, ret := set.Wait(1000)
	if ret != nvml.SUCCESS || e.EventType != nvml.EventTypeXidCriticalError || e.EventData != 48 {
		t.Fatalf("Xid event = %+v, %v", e, ret)
	}
	if idx, _ := e.Device.GetIndex(); idx != 2 {
		t.Fatalf("Xid on GPU %d, want 2", idx)
	}
	if err := n.InjectECC(4, true); err != nil {
		t.Fatal(err)
	}
	if e, _ := set.Wait(1000); e.EventType != nvml.EventTypeDoubleBitEccError {
		t.Fatalf("ECC event %+v", e)
	}
	d4, _ := n.DeviceGetHandleByIndex(4)
	if c, _ := d4.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC); c != 1 {
		t.Fatalf("uncorrected ECC count %d", c)
	}

	if err := n.FallOffBus(6); err != nil {
		t.Fatal(err)
	}
	if e, _ := set.Wait(1000); e.EventData != XidGPUFallenOffBus {
		t.Fatalf("lost GPU event %+v, want Xid 79", e)
	}
	d6, _ := n.DeviceGetHandleByIndex(6)
	if _, ret := d6.GetMemoryInfo(); ret != nvml.ERROR_GPU_IS_LOST {
		t.Fatalf("lost GPU memory = %v", ret)
	}
	if _, ret := d6.GetUUID(); ret != nvml.SUCCESS {
		t.Fatalf("lost GPU identity = %v, want the cached UUID", ret)
	}
	if err := n.InjectXid(99, 1); !errors.Is(err, ErrUnknownGPU) {
		t.Fatalf("unknown GPU: %v", err)
	}

	gpu := 1
	n.InjectFault("GetPowerUsage", FaultSpec{GPU: &gpu, After: 1, Times: 2, Return: nvml.ERROR_UNKNOWN})
	d1, _ := n.DeviceGetHandleByIndex(1)
	var got []nvml.Return
	for range 4 {
		_, ret := d1.GetPowerUsage()
		got = append(got, ret)
	}
	want := []nvml.Return{nvml.SUCCESS, nvml.ERROR_UNKNOWN, nvml.ERROR_UNKNOWN, nvml.SUCCESS}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("GetPowerUsage results %v, want %v", got, want)
		}
	}
}

func TestTopologyAnswers(t *testing.T) {
	n := NewBuiltin("pcie-l40s")
	d0, _ := n.DeviceGetHandleByIndex(0)
	d1, _ := n.DeviceGetHandleByIndex(1)
	d2, _ := n.DeviceGetHandleByIndex(2)
	if l, _ := d0.GetTopologyCommonAncestor(d1); l != nvml.TOPOLOGY_SINGLE {
		t.Fatalf("0-1 = %v, want SINGLE (one PCIe switch)", l)
	}
	if l, _ := d0.GetTopologyCommonAncestor(d2); l != nvml.TOPOLOGY_SYSTEM {
		t.Fatalf("0-2 = %v, want SYSTEM (across sockets)", l)
	}
	if _, ret := d0.GetNvLinkState(0); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Fatalf("L40S NVLink = %v, want NOT_SUPPORTED", ret)
	}
	h := NewBuiltin("dgx-h100")
	hd, _ := h.DeviceGetHandleByIndex(0)
	if s, ret := hd.GetNvLinkState(17); ret != nvml.SUCCESS || s != nvml.FEATURE_ENABLED {
		t.Fatalf("H100 link 17 = %v, %v", s, ret)
	}
	if _, ret := hd.GetNvLinkState(18); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Fatalf("H100 link 18 = %v, want INVALID_ARGUMENT", ret)
	}
}

func TestFieldValues(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	n := NewBuiltin("dgx-h100", WithClock(func() time.Time { return now }))
	if err := n.AddProcess(0, 1, 1<<30); err != nil {
		t.Fatal(err)
	}
	d, _ := n.DeviceGetHandleByIndex(0)
	read := func() []nvml.FieldValue {
		vals := []nvml.FieldValue{{FieldId: nvml.FI_DEV_MEMORY_TEMP}, {FieldId: nvml.FI_DEV_NVLINK_BANDWIDTH_C0_TOTAL}, {FieldId: nvml.FI_DEV_PCIE_REPLAY_COUNTER}}
		if ret := d.GetFieldValues(vals); ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
		return vals
	}
	first := read()
	if first[0].NvmlReturn != uint32(nvml.SUCCESS) || first[0].Value[0] < 30 {
		t.Fatalf("memory temperature %+v", first[0])
	}
	if first[2].NvmlReturn != uint32(nvml.ERROR_NOT_SUPPORTED) {
		t.Fatalf("unmodeled field %+v, want NOT_SUPPORTED", first[2])
	}
	now = now.Add(10 * time.Second)
	second := read()
	if second[1].NvmlReturn != uint32(nvml.SUCCESS) || binary.LittleEndian.Uint64(second[1].Value[:]) <= binary.LittleEndian.Uint64(first[1].Value[:]) {
		t.Fatalf("NVLink counter did not grow on a busy GPU: %d then %d", binary.LittleEndian.Uint64(first[1].Value[:]), binary.LittleEndian.Uint64(second[1].Value[:]))
	}
	l40s, _ := NewBuiltin("pcie-l40s").DeviceGetHandleByIndex(0)
	vals := []nvml.FieldValue{{FieldId: nvml.FI_DEV_NVLINK_BANDWIDTH_C0_TOTAL}}
	l40s.GetFieldValues(vals)
	if vals[0].NvmlReturn != uint32(nvml.ERROR_NOT_SUPPORTED) {
		t.Fatal("L40S reports NVLink bandwidth")
	}
}

// TestPCIeRootFollowsTopology: GPUs share a PCIe root exactly when NVML
// puts them under one switch (SINGLE); each root is a sysfs root complex
// name whose bus is at most its GPUs' buses.
func TestPCIeRootFollowsTopology(t *testing.T) {
	big := builtins["dgx-h100"]
	big.Name, big.Count = "big", MaxGPUs
	nodes := map[string]*Node{}
	for _, name := range BuiltinNames() {
		nodes[name] = NewBuiltin(name)
	}
	n, err := New(big)
	if err != nil {
		t.Fatal(err)
	}
	nodes[big.Name] = n
	rootName := regexp.MustCompile(`^pci0000:[0-9a-f]{2}$`)
	for name, n := range nodes {
		t.Run(name, func(t *testing.T) {
			defer n.Close()
			count, _ := n.DeviceGetCount()
			roots := make([]string, count)
			for i := range count {
				r, err := n.PCIeRoot(i)
				if err != nil || !rootName.MatchString(r) {
					t.Fatalf("PCIeRoot(%d) = %q, %v", i, r, err)
				}
				roots[i] = r
				d, _ := n.DeviceGetHandleByIndex(i)
				pci, _ := d.GetPciInfo()
				if rb, _ := strconv.ParseUint(r[len("pci0000:"):], 16, 32); uint32(rb) > pci.Bus {
					t.Errorf("gpu %d on bus %#x under root %s, a higher bus", i, pci.Bus, r)
				}
			}
			for i := range count {
				di, _ := n.DeviceGetHandleByIndex(i)
				for j := range count {
					dj, _ := n.DeviceGetHandleByIndex(j)
					l, ret := di.GetTopologyCommonAncestor(dj)
					if ret != nvml.SUCCESS {
						t.Fatalf("%d-%d: %v", i, j, ret)
					}
					shared := l == nvml.TOPOLOGY_SINGLE || l == nvml.TOPOLOGY_INTERNAL
					if (roots[i] == roots[j]) != shared {
						t.Errorf("gpu %d (%s) and %d (%s) at level %v: same root %v, want %v", i, roots[i], j, roots[j], l, roots[i] == roots[j], shared)
					}
				}
			}
			if _, err := n.PCIeRoot(count); !errors.Is(err, ErrUnknownGPU) {
				t.Errorf("PCIeRoot(%d) = %v, want ErrUnknownGPU", count, err)
			}
		})
	}
}
