// Package discovery reads a GPU node through NVML into a gpu.Inventory: GPUs,
// MIG devices, PCI and NUMA placement, and the links between GPUs. It reads
// only; changing MIG state belongs to pkg/mig.
//
// It is the node's one owner of what NVML reports: [Store] holds the
// published inventory with the health on top and wakes its subscribers
// (device plugin, HTTP, telemetry); [HealthMonitor] is the one NVML event
// pump, turning events into health and fanning Xids out; [ProcessReader]
// is the one reader of GPU processes (memory watchdog, MIG service).
//
// The nvml.Interface is injected: the real library from cmd/gpud, or the
// simulated node in tests. A field a GPU does not support is left out; a GPU
// that fell off the bus is reported as Lost and the others are still read.
package discovery

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/pkg/gpu"
)

// Discoverer reads inventories from one NVML instance. It is safe for
// concurrent use as long as the nvml.Interface is.
type Discoverer struct {
	lib      nvml.Interface
	devlib   device.Interface
	nodeName string
	log      *slog.Logger
}

// New returns a Discoverer for an initialized NVML. nodeName is reported as
// the inventory's node name; log may be nil.
func New(lib nvml.Interface, nodeName string, log *slog.Logger) *Discoverer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Discoverer{lib: lib, devlib: device.New(lib), nodeName: nodeName, log: log}
}

// nvmlErr turns an NVML return code into an error, nil for SUCCESS.
// errors.Is(err, nvml.ERROR_...) works on the result and on wrappers of it.
func nvmlErr(ret nvml.Return) error {
	if ret == nvml.SUCCESS {
		return nil
	}
	return ret
}

// optional reports whether an error means "leave the field out": the GPU
// does not support it, or the call failed in a way that is not fatal.
func (d *Discoverer) optional(uuid, field string, ret nvml.Return) bool {
	if ret == nvml.SUCCESS {
		return false
	}
	if ret != nvml.ERROR_NOT_SUPPORTED {
		d.log.Debug("nvml field unavailable", "gpu_uuid", uuid, "field", field, "err", ret.Error())
	}
	return true
}

// Inventory reads the whole node.
func (d *Discoverer) Inventory() (gpu.Inventory, error) {
	inv := gpu.Inventory{Node: gpu.Node{Name: d.nodeName}, GPUs: []gpu.GPU{}, Links: []gpu.Link{}}
	if v, ret := d.lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		inv.Node.DriverVersion = v
	}
	if v, ret := d.lib.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS {
		inv.Node.CUDADriverVersion = fmt.Sprintf("%d.%d", v/1000, v%1000/10)
	}
	count, ret := d.lib.DeviceGetCount()
	if err := nvmlErr(ret); err != nil {
		return inv, fmt.Errorf("discovery: count GPUs: %w", err)
	}
	handles := make([]nvml.Device, 0, count)
	for i := range count {
		h, ret := d.lib.DeviceGetHandleByIndex(i)
		if ret == nvml.ERROR_GPU_IS_LOST {
			inv.GPUs = append(inv.GPUs, gpu.GPU{Index: i, NUMANode: -1, Health: gpu.Lost, HealthReason: "gpu lost", MIGDevices: []gpu.MIGDevice{}})
			continue
		}
		if err := nvmlErr(ret); err != nil {
			return inv, fmt.Errorf("discovery: gpu %d handle: %w", i, err)
		}
		g, err := d.readGPU(i, h)
		if err != nil {
			return inv, err
		}
		inv.GPUs = append(inv.GPUs, g)
		if g.Health != gpu.Lost {
			handles = append(handles, h)
		}
	}
	links, err := d.readLinks(handles)
	if err != nil {
		return inv, err
	}
	inv.Links = links
	return inv, nil
}

// readGPU reads one GPU. A lost GPU comes back with its identity and Lost.
func (d *Discoverer) readGPU(index int, h nvml.Device) (gpu.GPU, error) {
	g := gpu.GPU{Index: index, Minor: index, NUMANode: -1, Health: gpu.Healthy, MIGDevices: []gpu.MIGDevice{}}
	uuid, ret := h.GetUUID()
	if err := nvmlErr(ret); err != nil {
		if errors.Is(err, nvml.ERROR_GPU_IS_LOST) {
			g.Health, g.HealthReason = gpu.Lost, "gpu lost"
			return g, nil
		}
		return g, fmt.Errorf("discovery: gpu %d uuid: %w", index, err)
	}
	g.UUID = uuid
	if m, ret := h.GetMinorNumber(); ret == nvml.SUCCESS {
		g.Minor = m
	}
	if p, ret := h.GetPciInfo(); ret == nvml.SUCCESS {
		g.PCIBusID = busID(p.BusId[:])
	}
	name, ret := h.GetName()
	if ret == nvml.ERROR_GPU_IS_LOST {
		g.Health, g.HealthReason = gpu.Lost, "gpu lost"
		return g, nil
	}
	if !d.optional(uuid, "name", ret) {
		g.Name = name
	}
	if b, ret := h.GetBrand(); !d.optional(uuid, "brand", ret) {
		g.Brand = brandName(b)
	}
	if a, ret := h.GetArchitecture(); !d.optional(uuid, "architecture", ret) {
		g.Architecture = archName(a)
	}
	if major, minor, ret := h.GetCudaComputeCapability(); !d.optional(uuid, "computeCapability", ret) {
		g.ComputeCapability = strconv.Itoa(major) + "." + strconv.Itoa(minor)
	}
	if m, ret := h.GetMemoryInfo_v2(); !d.optional(uuid, "memory", ret) {
		g.MemoryBytes, g.MemoryReservedBytes = m.Total, m.Reserved
	} else if m, ret := h.GetMemoryInfo(); !d.optional(uuid, "memory", ret) {
		g.MemoryBytes = m.Total
	}
	if v, ret := h.GetCurrPcieLinkGeneration(); !d.optional(uuid, "pcieGeneration", ret) {
		g.PCIeGeneration = v
	}
	if v, ret := h.GetCurrPcieLinkWidth(); !d.optional(uuid, "pcieWidth", ret) {
		g.PCIeWidth = v
	}
	if v, ret := h.GetNumaNodeId(); !d.optional(uuid, "numaNode", ret) {
		g.NUMANode = v
	}
	if mask, ret := h.GetCpuAffinity(cpuMaskWords); !d.optional(uuid, "cpuAffinity", ret) {
		g.CPUAffinity = cpusOf(mask)
	}
	if v, ret := h.GetPowerManagementLimit(); !d.optional(uuid, "powerLimit", ret) {
		g.PowerLimitWatts = v / 1000
	}
	if err := d.readMIG(h, &g); err != nil {
		return g, err
	}
	return g, nil
}

// cpuMaskWords is how many 64-bit words of CPU affinity to read (4096 CPUs).
const cpuMaskWords = 64

func cpusOf(mask []uint) []int {
	var cpus []int
	for w, bits := range mask {
		for b := range 64 {
			if bits&(1<<b) != 0 {
				cpus = append(cpus, w*64+b)
			}
		}
	}
	return cpus
}

func busID(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}

func brandName(b nvml.BrandType) string {
	switch b {
	case nvml.BRAND_NVIDIA:
		return "NVIDIA"
	case nvml.BRAND_TESLA:
		return "Tesla"
	case nvml.BRAND_QUADRO:
		return "Quadro"
	case nvml.BRAND_GEFORCE:
		return "GeForce"
	case nvml.BRAND_NVIDIA_RTX:
		return "NVIDIA RTX"
	}
	return fmt.Sprintf("brand-%d", b)
}

func archName(a nvml.DeviceArchitecture) string {
	switch a {
	case nvml.DEVICE_ARCH_VOLTA:
		return "Volta"
	case nvml.DEVICE_ARCH_TURING:
		return "Turing"
	case nvml.DEVICE_ARCH_AMPERE:
		return "Ampere"
	case nvml.DEVICE_ARCH_ADA:
		return "Ada Lovelace"
	case nvml.DEVICE_ARCH_HOPPER:
		return "Hopper"
	case nvml.DEVICE_ARCH_BLACKWELL:
		return "Blackwell"
	}
	return fmt.Sprintf("arch-%d", a)
}
