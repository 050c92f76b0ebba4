// Package usage holds the plain types that say who uses a device: the
// compute processes NVML reports, the containers and pods they run in, and
// the kubelet's device allocations. One reader produces each (pkg/discovery
// the processes, pkg/procattr the containers and pods, pkg/podresources the
// allocations) and every consumer (telemetry, the memory watchdog, the MIG
// service, the sharing runtime) reads the same values, without adapters.
//
// It imports only the standard library.
package usage

// Process is a compute process on a GPU or a MIG device.
type Process struct {
	PID uint32 `json:"pid"`
	// GPU is the physical GPU's NVML index.
	GPU int `json:"gpu"`
	// GPUUUID is the physical GPU; DeviceUUID is the MIG device the process
	// runs on, or GPUUUID when MIG is off.
	GPUUUID    string `json:"gpuUUID"`
	DeviceUUID string `json:"deviceUUID"`
	UsedBytes  uint64 `json:"usedBytes"`
}

// Container identifies where a process runs: the pod's UID (dashed, as the
// API server shows it) and the container runtime's 64-hex container ID.
type Container struct {
	PodUID      string
	ContainerID string
}

// PodRef names a pod: what a pod UID means to people and to the
// PodResources API (which reports names, not UIDs).
type PodRef struct {
	Namespace string
	Name      string
	UID       string
}

// Assignment is one container's devices of one resource, as the kubelet
// reports them: DeviceIDs are the IDs the device plugin advertised (GPU
// UUIDs, MIG UUIDs, replica IDs such as "GPU-x::3").
type Assignment struct {
	Namespace    string
	Pod          string
	Container    string
	ResourceName string
	DeviceIDs    []string
}
