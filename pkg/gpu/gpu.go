// Package gpu is the shared model of a GPU node: the inventory that discovery
// produces and every other package reads. It imports the standard library
// only, so the pure packages (topology, allocator, timeslice) stay pure.
//
// The JSON form of [Inventory] is a documented, stable contract: it is what
// `gpud inventory -o json` prints and what the agent serves on /inventory.
package gpu

// Inventory is everything discovered on one node at one moment.
type Inventory struct {
	Node  Node   `json:"node"`
	GPUs  []GPU  `json:"gpus"`
	Links []Link `json:"links"`
}

// Node describes the host and its driver.
type Node struct {
	Name              string `json:"name"`
	DriverVersion     string `json:"driverVersion,omitempty"`
	CUDADriverVersion string `json:"cudaDriverVersion,omitempty"`
}

// Health is a device's health as the device plugin reports it.
type Health string

// Health values. A GPU that fell off the bus is Lost and never heals.
const (
	Healthy   Health = "Healthy"
	Unhealthy Health = "Unhealthy"
	Lost      Health = "Lost"
)

// GPU is one physical GPU. Fields NVML does not support on a device are
// left at their zero value and omitted from JSON.
type GPU struct {
	Index               int    `json:"index"`
	UUID                string `json:"uuid"`
	Minor               int    `json:"minor"`
	Name                string `json:"name"`
	Brand               string `json:"brand,omitempty"`
	Architecture        string `json:"architecture,omitempty"`
	ComputeCapability   string `json:"computeCapability,omitempty"`
	MemoryBytes         uint64 `json:"memoryBytes"`
	MemoryReservedBytes uint64 `json:"memoryReservedBytes,omitempty"`
	PCIBusID            string `json:"pciBusID"`
	PCIeGeneration      int    `json:"pcieGeneration,omitempty"`
	PCIeWidth           int    `json:"pcieWidth,omitempty"`
	// NUMANode is the host NUMA node closest to the GPU; -1 when unknown.
	NUMANode int `json:"numaNode"`
	// CPUAffinity lists the host CPUs local to the GPU.
	CPUAffinity     []int  `json:"cpuAffinity,omitempty"`
	PowerLimitWatts uint32 `json:"powerLimitWatts,omitempty"`
	MIGCapable      bool   `json:"migCapable"`
	MIGEnabled      bool   `json:"migEnabled"`
	// MIGPending is true when a MIG mode change waits for a GPU reset: the
	// pending mode differs from the current one.
	MIGPending bool        `json:"migPending,omitempty"`
	MIGDevices []MIGDevice `json:"migDevices"`
	Health     Health      `json:"health"`
	// HealthReason says why a GPU is not Healthy (the Xid, "gpu lost", ...).
	HealthReason string `json:"healthReason,omitempty"`
}

// MIGDevice is one MIG slice: a GPU instance with one compute instance.
type MIGDevice struct {
	UUID              string `json:"uuid"`
	Profile           string `json:"profile"`
	MemoryBytes       uint64 `json:"memoryBytes"`
	GPUInstanceID     int    `json:"gpuInstanceID"`
	ComputeInstanceID int    `json:"computeInstanceID"`
	SMCount           int    `json:"smCount,omitempty"`
	// PlacementStart and PlacementSize are the memory slices the GPU
	// instance occupies, as NVML reports its placement.
	PlacementStart int `json:"placementStart"`
	PlacementSize  int `json:"placementSize"`
	// Health is set when an error was attributed to this slice alone (an
	// Xid on its GPU instance); empty means it shares its GPU's health.
	Health       Health `json:"health,omitempty"`
	HealthReason string `json:"healthReason,omitempty"`
}

// EffectiveHealth is a MIG device's health: its own when an error hit it,
// else its GPU's (a lost or unhealthy GPU takes its slices with it).
func (m MIGDevice) EffectiveHealth(g *GPU) (Health, string) {
	if g.Health != Healthy && g.Health != "" {
		return g.Health, g.HealthReason
	}
	if m.Health != "" {
		return m.Health, m.HealthReason
	}
	return Healthy, ""
}

// Link is the interconnect between two GPUs, as `nvidia-smi topo -m` shows it.
type Link struct {
	A     string    `json:"a"`
	B     string    `json:"b"`
	Level LinkLevel `json:"level"`
	// NVLinks is the number of active NVLinks between A and B; 0 without NVLink.
	NVLinks int `json:"nvlinks"`
}

// GPUByUUID returns the GPU with the given UUID, or nil.
func (inv *Inventory) GPUByUUID(uuid string) *GPU {
	for i := range inv.GPUs {
		if inv.GPUs[i].UUID == uuid {
			return &inv.GPUs[i]
		}
	}
	return nil
}
