package telemetry

import (
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/gpud/gpud/pkg/gpu"
)

// Snapshot is what one sweep of the [Sampler] saw. It is immutable once
// published: readers may keep it and read it from any goroutine.
type Snapshot struct {
	// Taken is when the sweep started (by Config.Clock); Duration is how
	// long it took, NVML calls and attribution included.
	Taken    time.Time
	Duration time.Duration
	// Sweeps counts sweeps since the sampler started, this one included.
	Sweeps uint64
	// Devices lists each GPU, followed by its MIG devices.
	Devices []DeviceSnapshot
	// Processes lists compute processes with the device they run on.
	Processes []ProcessSnapshot
	// Errors are the sampler's cumulative failure counts.
	Errors []ErrorCount
	// Xids counts Xid errors per GPU and code since the sampler started.
	Xids []XidCount
	// PodResourcesUp reports whether the last PodResources List worked.
	PodResourcesUp bool
	// AttributionErrors counts failures by source: "podresources",
	// "proc" (reading /proc/<pid>/cgroup) and "podlogs".
	AttributionErrors map[string]uint64
}

// DeviceSnapshot is one GPU or MIG device and its latest values.
type DeviceSnapshot struct {
	// GPUIndex, GPUUUID, PCIBusID, Minor and Model describe the physical
	// GPU (the parent, for a MIG device); UUID is the device's own.
	GPUIndex int
	GPUUUID  string
	UUID     string
	PCIBusID string
	Minor    int
	Model    string
	// MIG is true for a MIG device; GIProfile, GIID and CIID then name it.
	MIG       bool
	GIProfile string
	GIID      int
	CIID      int
	// MIGEnabled and MIGPending are the GPU's MIG mode (GPUs only).
	MIGEnabled bool
	MIGPending bool
	// MemoryBytes is the device's framebuffer size.
	MemoryBytes uint64
	// PlacementStart and PlacementSize are a MIG device's memory slices.
	PlacementStart int
	PlacementSize  int
	// Health and HealthReason come from the agent's inventory; a MIG
	// device has its own when an error hit it, else its GPU's.
	Health       gpu.Health
	HealthReason string
	// LastXid is the most recent Xid on the GPU; 0 when none was seen.
	LastXid uint64
	// GPM is true once the device's GPM profiling fields are computed
	// (GPM supported and two samples taken). Until then they are not
	// counted stale; without GPM support they are Unsupported.
	GPM bool

	// Values are in DCGM's units; At is when each was read (zero: never);
	// Unsupported marks fields the device does not have.
	Values      [numFields]float64
	At          [numFields]time.Time
	Unsupported [numFields]bool

	// Holders are the containers the kubelet assigned this device to
	// (directly, as a replica, or as a MIG device); Replicas counts the
	// replica IDs of this device that are assigned.
	Holders  []Holder
	Replicas int

	// lbl are the label values of this device's DCGM series, computed
	// once per sweep so a scrape does not build them.
	lbl []string
	// variant selects the label names lbl goes with.
	variant variant
	// idLbl are the values of gpud's per-device labels (gpu, UUID,
	// GPU_I_ID, Hostname).
	idLbl []string
	// lp are the device's label pairs for every family it appears in.
	lp devicePairs
}

// Holder is a container that holds a device.
type Holder struct {
	Namespace string
	Pod       string
	Container string
}

// ProcessSnapshot is one compute process on a device.
type ProcessSnapshot struct {
	GPUIndex int
	GPUUUID  string
	// DeviceUUID is the MIG device's UUID when the process runs on one,
	// else the GPU's; GIID is -1 on a whole GPU.
	DeviceUUID string
	GIID       int
	PID        uint32
	// UsedBytes is the framebuffer memory the process holds.
	UsedBytes uint64
	// SMUtil is the process's share of its GPU's SM time in [0,1] at its
	// latest NVML sample (GetProcessUtilization), when HasSMUtil: not in
	// MIG mode, where the driver keeps no per-process samples.
	SMUtil    float64
	HasSMUtil bool
	// PodUID and ContainerID come from the process's cgroup; Namespace,
	// Pod and Container from the kubelet (empty when unknown).
	PodUID      string
	ContainerID string
	Namespace   string
	Pod         string
	Container   string
	// At is when the process list was read.
	At time.Time

	lp []*dto.LabelPair
}

// ErrorCount is how often one NVML call failed on one device, by reason:
// an NVML error ("gpu_lost", "nvml_error", ...), "timeout" (still running
// when the sweep gave up on it) or "busy" (skipped: the previous call had
// not returned).
type ErrorCount struct {
	UUID   string
	Call   string
	Reason string
	Count  uint64
}

// XidCount is how many times a GPU reported one Xid.
type XidCount struct {
	GPUUUID string
	Xid     uint64
	Count   uint64
}

// Snapshot returns the latest published snapshot, or nil before the first
// sweep. It never blocks on NVML.
func (s *Sampler) Snapshot() *Snapshot { return s.snap.Load() }

// value returns a field of the device when it was read and is finite.
func (d *DeviceSnapshot) value(f field) (float64, bool) {
	if d.Unsupported[f] || d.At[f].IsZero() {
		return 0, false
	}
	v := d.Values[f]
	return v, v == v && v-v == 0 // not NaN, not ±Inf
}

// Typed accessors of the latest values, in DCGM's units, for readers of a
// [Snapshot] that must not depend on metric names. Each reports false
// when the value was never read, is unsupported, or is not finite.

// GPUUtilPercent is DCGM_FI_DEV_GPU_UTIL: time a kernel ran (0-100).
func (d *DeviceSnapshot) GPUUtilPercent() (float64, bool) { return d.value(fGPUUtil) }

// SMActiveRatio is DCGM_FI_PROF_SM_ACTIVE (GPM): SM cycles with a warp
// assigned (0-1); meaningful only once [DeviceSnapshot.GPM] is true.
func (d *DeviceSnapshot) SMActiveRatio() (float64, bool) { return d.value(fProfSMActive) }

// MemoryUsedMiB is DCGM_FI_DEV_FB_USED: framebuffer memory used, in MiB.
func (d *DeviceSnapshot) MemoryUsedMiB() (float64, bool) { return d.value(fFBUsed) }

// PowerWatts is DCGM_FI_DEV_POWER_USAGE: power draw, in watts.
func (d *DeviceSnapshot) PowerWatts() (float64, bool) { return d.value(fPower) }

// TemperatureCelsius is DCGM_FI_DEV_GPU_TEMP: GPU die temperature.
func (d *DeviceSnapshot) TemperatureCelsius() (float64, bool) { return d.value(fGPUTemp) }
