package simnode

import (
	"fmt"
	"sort"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// Device is one simulated GPU. Its state is guarded by the Node's mutex.
type Device struct {
	mock.Device
	node       *Node
	index      int
	uuid       string
	busID      string
	bus        uint32
	numa       int
	pcieSwitch int

	migCurrent int
	migPending int
	gis        map[int]*gpuInstance // by GPU instance ID
	procs      map[uint32]process
	lost       bool
	sbe, dbe   uint64 // single- and double-bit ECC error counts
	energyMJ   float64
	nvlinkKiB  float64 // NVLink traffic counter
	energyAt   float64 // seconds since start of the last energy update
	// clocksInjected are clocks event reasons set by InjectClocksEvent.
	clocksInjected uint64
	computeMode    nvml.ComputeMode
	// memLimits are the per-cgroup memory limits on the GPU, by cgroup
	// path (memlimits.go).
	memLimits map[string]memLimit
}

type process struct {
	memBytes uint64
	gi, ci   int // -1 when not on a MIG device
	// mps is true for an MPS client; limitBytes (its pinned memory limit)
	// and threadPct (its active-thread percentage) are 0 when unlimited.
	mps        bool
	limitBytes uint64
	threadPct  int
	// cgroup is the process's cgroup path ("" for none): the per-cgroup
	// memory limits on the GPU that apply to it.
	cgroup string
}

var _ nvml.Device = (*Device)(nil)

// dgxBuses are the PCI bus numbers of the GPUs in a DGX H100, lowest first;
// smaller nodes take an even spread of them.
var dgxBuses = []uint32{0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb}

func newDevice(n *Node, i int) *Device {
	p := n.profile
	bus := uint32(0x10 + 0x10*i)
	if p.Count <= len(dgxBuses) {
		bus = dgxBuses[i*len(dgxBuses)/p.Count]
	}
	d := &Device{
		node:       n,
		index:      i,
		uuid:       n.uuid("GPU", i),
		busID:      fmt.Sprintf("00000000:%02X:00.0", bus),
		bus:        bus,
		numa:       i * p.NUMANodes / p.Count,
		pcieSwitch: i / p.GPUsPerPCIeSwitch,
		gis:        map[int]*gpuInstance{},
		procs:      map[uint32]process{},
		memLimits:  map[string]memLimit{},
	}
	d.setFuncs()
	return d
}

// UUID returns the GPU's UUID.
func (d *Device) UUID() string { return d.uuid }

// lostOr returns ERROR_GPU_IS_LOST for a GPU that fell off the bus, then any
// injected fault for op, else SUCCESS. Callers hold no lock.
func (d *Device) lostOr(op string) nvml.Return {
	d.node.mu.Lock()
	lost := d.lost
	d.node.mu.Unlock()
	if lost {
		return nvml.ERROR_GPU_IS_LOST
	}
	return d.node.fault(op, d.index)
}

func (d *Device) setFuncs() {
	m := d.node.model
	cfg := m.config
	// Identity comes from the driver's cache and still answers on a lost GPU.
	d.GetIndexFunc = func() (int, nvml.Return) { return d.index, nvml.SUCCESS }
	d.GetMinorNumberFunc = func() (int, nvml.Return) { return d.index, nvml.SUCCESS }
	d.GetUUIDFunc = func() (string, nvml.Return) { return d.uuid, nvml.SUCCESS }
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return d.pciInfo(), nvml.SUCCESS }
	d.IsMigDeviceHandleFunc = func() (bool, nvml.Return) { return false, nvml.SUCCESS }

	d.GetNameFunc = func() (string, nvml.Return) { return cfg.Name, d.lostOr("GetName") }
	d.GetBrandFunc = func() (nvml.BrandType, nvml.Return) { return cfg.Brand, d.lostOr("GetBrand") }
	d.GetArchitectureFunc = func() (nvml.DeviceArchitecture, nvml.Return) {
		return cfg.Architecture, d.lostOr("GetArchitecture")
	}
	d.GetCudaComputeCapabilityFunc = func() (int, int, nvml.Return) {
		return cfg.CudaMajor, cfg.CudaMinor, d.lostOr("GetCudaComputeCapability")
	}
	d.GetNumaNodeIdFunc = func() (int, nvml.Return) { return d.numa, d.lostOr("GetNumaNodeId") }
	d.GetCpuAffinityFunc = func(words int) ([]uint, nvml.Return) {
		if r := d.lostOr("GetCpuAffinity"); r != nvml.SUCCESS {
			return nil, r
		}
		return d.cpuMask(words), nvml.SUCCESS
	}
	d.GetMaxPcieLinkGenerationFunc = func() (int, nvml.Return) { return m.pcieGen, d.lostOr("GetMaxPcieLinkGeneration") }
	d.GetCurrPcieLinkGenerationFunc = func() (int, nvml.Return) { return m.pcieGen, d.lostOr("GetCurrPcieLinkGeneration") }
	d.GetMaxPcieLinkWidthFunc = func() (int, nvml.Return) { return m.pcieWidth, d.lostOr("GetMaxPcieLinkWidth") }
	d.GetCurrPcieLinkWidthFunc = func() (int, nvml.Return) { return m.pcieWidth, d.lostOr("GetCurrPcieLinkWidth") }
	d.GetPowerManagementLimitFunc = func() (uint32, nvml.Return) {
		return m.powerLimitW * 1000, d.lostOr("GetPowerManagementLimit")
	}
	d.GetEnforcedPowerLimitFunc = func() (uint32, nvml.Return) {
		return m.powerLimitW * 1000, d.lostOr("GetEnforcedPowerLimit")
	}
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		if r := d.lostOr("GetMemoryInfo"); r != nvml.SUCCESS {
			return nvml.Memory{}, r
		}
		v2 := d.memory()
		return nvml.Memory{Total: v2.Total, Used: v2.Used + v2.Reserved, Free: v2.Free}, nvml.SUCCESS
	}
	d.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) {
		if r := d.lostOr("GetMemoryInfo"); r != nvml.SUCCESS {
			return nvml.Memory_v2{}, r
		}
		return d.memory(), nvml.SUCCESS
	}
	d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		if r := d.lostOr("GetComputeRunningProcesses"); r != nvml.SUCCESS {
			return nil, r
		}
		return d.processes(-1), nvml.SUCCESS
	}
	d.setTopologyFuncs()
	d.setTelemetryFuncs()
	d.setProcessUtilizationFunc()
	d.setMIGFuncs()
	d.setEventFuncs()
	d.setGPMFuncs()
	d.setClocksFuncs()
	d.setComputeModeFuncs()
	d.setMemoryLimitsFuncs()
	fillUnsupported(&d.Device)
}

func (d *Device) pciInfo() nvml.PciInfo {
	var p nvml.PciInfo
	p.Bus = d.bus
	p.PciDeviceId = d.node.model.config.PciDeviceId
	p.PciSubSystemId = 0x16C110DE
	copy8(p.BusId[:], d.busID)
	copy8(p.BusIdLegacy[:], d.busID[4:])
	return p
}

func copy8(dst []int8, s string) {
	for i := 0; i < len(s) && i < len(dst)-1; i++ {
		dst[i] = int8(s[i])
	}
}

// cpuMask is the GPU's NUMA-local CPUs as NVML's array of 64-bit words.
func (d *Device) cpuMask(words int) []uint {
	per := d.node.profile.CPUsPerNUMANode
	mask := make([]uint, words)
	for c := d.numa * per; c < (d.numa+1)*per; c++ {
		if c/64 < words {
			mask[c/64] |= 1 << (c % 64)
		}
	}
	return mask
}

// memory is the framebuffer as NVML's v2 struct: used is what processes hold,
// reserved is the driver's share.
func (d *Device) memory() nvml.Memory_v2 {
	d.node.mu.Lock()
	defer d.node.mu.Unlock()
	return d.memoryLocked()
}

// memoryLocked is memory with the node's lock held.
func (d *Device) memoryLocked() nvml.Memory_v2 {
	total := d.node.model.config.MemoryMB << 20
	reserved := d.node.model.reservedMiB << 20
	var used uint64
	for _, p := range d.procs {
		used += p.memBytes
	}
	free := uint64(0)
	if total > reserved+used {
		free = total - reserved - used
	}
	return nvml.Memory_v2{Version: nvml.STRUCT_VERSION(nvml.Memory_v2{}, 2), Total: total, Reserved: reserved, Used: used, Free: free}
}

// processes lists running compute processes, all of them (gi < 0) or those
// on one GPU instance, sorted by pid.
func (d *Device) processes(gi int) []nvml.ProcessInfo {
	d.node.mu.Lock()
	defer d.node.mu.Unlock()
	out := []nvml.ProcessInfo{}
	for pid, p := range d.procs {
		if gi >= 0 && p.gi != gi {
			continue
		}
		info := nvml.ProcessInfo{Pid: pid, UsedGpuMemory: p.memBytes, GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF}
		if p.gi >= 0 {
			info.GpuInstanceId, info.ComputeInstanceId = uint32(p.gi), uint32(p.ci)
		}
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pid < out[j].Pid })
	return out
}
