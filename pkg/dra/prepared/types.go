// Package prepared is the DRA driver's record of what it prepared: the
// claims, their devices as published, and the checkpoint file that keeps
// them across restarts (versioned, checksummed, written atomically). It
// reads and writes files only; preparing is pkg/dra's.
package prepared

// Values of a device's "type" attribute.
const (
	TypeGPU = "gpu"
	TypeMIG = "mig"
)

// Claim states in the checkpoint.
const (
	// StatePreparing: prepare started (MIG devices may be half-created);
	// a retry resumes it and unprepare cleans it up.
	StatePreparing = "Preparing"
	StatePrepared  = "Prepared"
)

// Placement is where a MIG GPU instance sits: memory slices
// [Start, Start+Size).
type Placement struct {
	Start int `json:"start"`
	Size  int `json:"size"`
}

// DeviceRef is what a published device is on this node: what prepare needs
// to deliver it.
type DeviceRef struct {
	Name     string `json:"name"`
	Type     string `json:"type"` // TypeGPU or TypeMIG
	GPUUUID  string `json:"gpuUUID"`
	GPUIndex int    `json:"gpuIndex"`
	GPUMinor int    `json:"gpuMinor"`
	// MemoryBytes is the device's memory: the GPU's, or the MIG slice's.
	MemoryBytes uint64 `json:"memoryBytes"`
	// Shareable is true for a whole GPU that takes fractions.
	Shareable bool `json:"shareable,omitempty"`
	// MIG devices only.
	Profile   string    `json:"profile,omitempty"`
	Placement Placement `json:"placement"`
	// MIGUUID, GIID and CIID are set when the MIG device exists; a
	// dynamic one is created at prepare.
	MIGUUID string `json:"migUUID,omitempty"`
	GIID    int    `json:"giID,omitempty"`
	CIID    int    `json:"ciID,omitempty"`
}

// Dynamic reports whether the device is a MIG placement that does not exist
// yet.
func (d DeviceRef) Dynamic() bool { return d.Type == TypeMIG && d.MIGUUID == "" }

// Device is one allocated device of a prepared claim.
type Device struct {
	// Requests are the claim's requests the device serves.
	Requests []string `json:"requests"`
	// Device is the device as published; for a MIG device prepare created,
	// MIGUUID is filled in.
	Device DeviceRef `json:"device"`
	// Created is true for a MIG device this claim's prepare creates (or
	// created): unprepare destroys it.
	Created bool `json:"created,omitempty"`
	// Creating is set while the driver's MIG create runs for it: after a crash
	// there, the device may exist without its UUID recorded.
	Creating bool `json:"creating,omitempty"`
	// EnablesMIGMode is set for a MIG device whose GPU had MIG mode off
	// when prepare went to create it: its Create turns MIG mode on (the
	// GPU's owner is then recorded in the checkpoint, see
	// Checkpoint.MIGModeOwners).
	EnablesMIGMode bool `json:"enablesMIGMode,omitempty"`
	// ShareID identifies one allocation of a multi-allocatable GPU.
	ShareID string `json:"shareID,omitempty"`
	// MemoryBytes and CoresPercent are the consumed capacity of a whole
	// GPU: all the memory for an exclusive GPU, less for a fraction;
	// cores 0 means no compute limit.
	MemoryBytes  uint64 `json:"memoryBytes,omitempty"`
	CoresPercent int    `json:"coresPercent,omitempty"`
	// MemoryLimitBytes is a fraction's hard memory limit, from the claim's
	// opaque configuration (memoryLimit): at least MemoryBytes (the
	// request, the soft limit) and at most the GPU's memory. 0 means the
	// request: no borrowing. Checkpoint version 3 and later.
	MemoryLimitBytes uint64 `json:"memoryLimitBytes,omitempty"`
	// CDIDeviceIDs are what the container runtime gets.
	CDIDeviceIDs []string `json:"cdiDeviceIDs"`
}

// Fraction reports whether the device is part of a whole GPU.
func (d Device) Fraction() bool {
	return d.Device.Type == TypeGPU && (d.MemoryBytes < d.Device.MemoryBytes || (d.CoresPercent > 0 && d.CoresPercent < 100))
}

// LimitBytes is the device's hard memory limit: MemoryLimitBytes, or the
// request when there is none.
func (d Device) LimitBytes() uint64 { return max(d.MemoryLimitBytes, d.MemoryBytes) }

// Claim is one claim in the checkpoint.
type Claim struct {
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	State     string   `json:"state"`
	Devices   []Device `json:"devices"`
}
