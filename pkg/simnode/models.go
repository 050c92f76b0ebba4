package simnode

import (
	"maps"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
)

// model is a GPU model the simulator can build: go-nvml's mock config (name,
// architecture, memory, MIG profile tables) plus what the mock lacks.
type model struct {
	config gpus.Config
	// reservedMiB is the framebuffer the driver keeps for itself.
	reservedMiB uint64
	pcieGen     int
	pcieWidth   int
	// nvlinks is the number of NVLinks per GPU (0: none).
	nvlinks      int
	nvlinkVer    uint32
	powerLimitW  uint32
	idlePowerW   uint32
	maxSMClock   uint32
	memClock     uint32
	migResetReqd bool // enabling MIG needs a GPU reset (A100), not on Hopper
	maxMemTempC  uint32
	// sms is the whole GPU's streaming multiprocessor count, which an MPS
	// client's active-thread percentage divides.
	sms int
}

// l40s is not among go-nvml's mock configs; it is a PCIe Ada card without MIG.
var l40s = gpus.Config{
	Name:         "NVIDIA L40S",
	Architecture: nvml.DEVICE_ARCH_ADA,
	Brand:        nvml.BRAND_NVIDIA,
	MemoryMB:     46068,
	CudaMajor:    8,
	CudaMinor:    9,
	PciDeviceId:  0x26B910DE,
}

func withName(c gpus.Config, name string) gpus.Config {
	c.Name = name
	return c
}

// withMIGMemory replaces GPU-instance memory sizes. go-nvml's H200 table
// uses nominal sizes (18 GiB for 1g.18gb), from which the driver's naming
// rule (memory fraction rounded up to eighths) derives 1g.35gb; the real
// driver reports less than nominal, as these do.
func withMIGMemory(c gpus.Config, memMiB map[int]uint64) gpus.Config {
	profiles := make(map[int]nvml.GpuInstanceProfileInfo, len(c.MIGProfiles.GpuInstanceProfiles))
	for idx, info := range c.MIGProfiles.GpuInstanceProfiles {
		if m, ok := memMiB[idx]; ok {
			info.MemorySizeMB = m
		}
		profiles[idx] = info
	}
	c.MIGProfiles.GpuInstanceProfiles = profiles
	return c
}

// models maps the model names users write in a node profile.
var models = map[string]model{
	"A100-SXM4-40GB": {
		config:      withName(gpus.A100_SXM4_40GB, "NVIDIA A100-SXM4-40GB"),
		reservedMiB: 424, pcieGen: 4, pcieWidth: 16, nvlinks: 12, nvlinkVer: 3,
		powerLimitW: 400, idlePowerW: 55, maxSMClock: 1410, memClock: 1215, migResetReqd: true, maxMemTempC: 85, sms: 108,
	},
	"A100-SXM4-80GB": {
		config:      gpus.A100_SXM4_80GB,
		reservedMiB: 487, pcieGen: 4, pcieWidth: 16, nvlinks: 12, nvlinkVer: 3,
		powerLimitW: 400, idlePowerW: 60, maxSMClock: 1410, memClock: 1593, migResetReqd: true, maxMemTempC: 85, sms: 108,
	},
	"H100-SXM5-80GB": {
		config:      gpus.H100_SXM5_80GB,
		reservedMiB: 361, pcieGen: 5, pcieWidth: 16, nvlinks: 18, nvlinkVer: 4,
		powerLimitW: 700, idlePowerW: 70, maxSMClock: 1980, memClock: 2619, maxMemTempC: 95, sms: 132,
	},
	"H200-SXM5-141GB": {
		config: withMIGMemory(gpus.H200_SXM5_141GB, map[int]uint64{
			nvml.GPU_INSTANCE_PROFILE_1_SLICE:      16896,
			nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1: 16896,
			nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2: 33792,
			nvml.GPU_INSTANCE_PROFILE_2_SLICE:      33792,
			nvml.GPU_INSTANCE_PROFILE_3_SLICE:      69888,
			nvml.GPU_INSTANCE_PROFILE_4_SLICE:      69888,
			nvml.GPU_INSTANCE_PROFILE_7_SLICE:      139264,
		}),
		reservedMiB: 551, pcieGen: 5, pcieWidth: 16, nvlinks: 18, nvlinkVer: 4,
		powerLimitW: 700, idlePowerW: 75, maxSMClock: 1980, memClock: 3201, maxMemTempC: 95, sms: 132,
	},
	"L40S": {
		config:      l40s,
		reservedMiB: 578, pcieGen: 4, pcieWidth: 16,
		powerLimitW: 350, idlePowerW: 35, maxSMClock: 2520, memClock: 9001, maxMemTempC: 0, sms: 142,
	},
}

// ModelNames lists the GPU models a node profile may name, sorted.
func ModelNames() []string {
	return slices.Sorted(maps.Keys(models))
}

// nvmlProfileID maps go-nvml's profile index constants (what
// GetGpuInstanceProfileInfo takes) to the profile IDs real drivers report in
// GpuInstanceProfileInfo.Id, so code that confuses the two fails here too.
var nvmlProfileID = map[int]uint32{
	nvml.GPU_INSTANCE_PROFILE_1_SLICE:      19,
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1: 20,
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2: 15,
	nvml.GPU_INSTANCE_PROFILE_2_SLICE:      14,
	nvml.GPU_INSTANCE_PROFILE_3_SLICE:      9,
	nvml.GPU_INSTANCE_PROFILE_4_SLICE:      5,
	nvml.GPU_INSTANCE_PROFILE_7_SLICE:      0,
}

// placementRule is where a GPU-instance profile may start on the real GPU, in
// memory slices (8 per GPU), and how many it occupies. go-nvml's mock tables
// get some of these wrong (3g at {0,4}:3); these are what
// `nvidia-smi mig -lgipp` prints on A100 and H100.
type placementRule struct {
	starts []uint32
	size   uint32
}

var placementRules = map[int]placementRule{
	nvml.GPU_INSTANCE_PROFILE_1_SLICE:      {starts: []uint32{0, 1, 2, 3, 4, 5, 6}, size: 1},
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1: {starts: []uint32{0, 1, 2, 3, 4, 5, 6}, size: 1},
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2: {starts: []uint32{0, 2, 4, 6}, size: 2},
	nvml.GPU_INSTANCE_PROFILE_2_SLICE:      {starts: []uint32{0, 2, 4}, size: 2},
	nvml.GPU_INSTANCE_PROFILE_3_SLICE:      {starts: []uint32{0, 4}, size: 4},
	nvml.GPU_INSTANCE_PROFILE_4_SLICE:      {starts: []uint32{0}, size: 4},
	nvml.GPU_INSTANCE_PROFILE_7_SLICE:      {starts: []uint32{0}, size: 8},
}

const (
	// computeSlices is the number of compute slices on a MIG-capable GPU.
	computeSlices = 7
	// maxMigDevices is what GetMaxMigDeviceCount reports.
	maxMigDevices = 7
)
