package telemetry

import (
	"github.com/prometheus/client_golang/prometheus"
)

// field is one sampled value of a device.
type field uint8

// Fields, stored in DCGM's units (%, MiB, W, mJ, C, MHz, counts, ratios,
// bytes per second).
const (
	fGPUUtil field = iota
	fMemCopyUtil
	fFBUsed
	fFBFree
	fFBReserved
	fPower
	fEnergy
	fGPUTemp
	fMemTemp
	fSMClock
	fMemClock
	fPCIeReplay
	fNVLinkBandwidth
	fECCSBEVol
	fECCDBEVol
	fECCSBEAgg
	fECCDBEAgg
	fRemapCorrectable
	fRemapUncorrectable
	fRemapFailure
	fClocksEventReasons
	// GPM profiling fields (gpm.go), stored as ratios (0-1) and bytes per
	// second, as dcgm-exporter exports them.
	fProfGREngine
	fProfSMActive
	fProfSMOccupancy
	fProfTensor
	fProfDRAM
	fProfFP64
	fProfFP32
	fProfFP16
	fProfPCIeTX
	fProfPCIeRX
	fProfNVLinkTX
	fProfNVLinkRX
	numFields
)

// gpm reports whether f is a GPM profiling field.
func (f field) gpm() bool { return f >= fProfGREngine && f < numFields }

// fieldSpec names a field in both exports. scale converts the stored DCGM
// unit into the native metric's base unit.
type fieldSpec struct {
	dcgm, dcgmHelp     string
	dcgmType           prometheus.ValueType
	native, nativeHelp string
	nativeType         prometheus.ValueType
	scale              float64
}

const mib = 1 << 20

// fieldSpecs follow dcgm-exporter's etc/default-counters.csv (names, types,
// help) and gpud's naming rules (units in names, base units).
var fieldSpecs = [numFields]fieldSpec{
	fGPUUtil: {"DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", prometheus.GaugeValue,
		"gpud_gpu_utilization_ratio", "Fraction of time a kernel ran on the GPU over the last sample period (0-1).", prometheus.GaugeValue, 0.01},
	fMemCopyUtil: {"DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", prometheus.GaugeValue,
		"gpud_memory_copy_utilization_ratio", "Fraction of time device memory was read or written over the last sample period (0-1).", prometheus.GaugeValue, 0.01},
	fFBUsed: {"DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", prometheus.GaugeValue,
		"gpud_memory_used_bytes", "Framebuffer memory used, in bytes.", prometheus.GaugeValue, mib},
	fFBFree: {"DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", prometheus.GaugeValue,
		"gpud_memory_free_bytes", "Framebuffer memory free, in bytes.", prometheus.GaugeValue, mib},
	fFBReserved: {"DCGM_FI_DEV_FB_RESERVED", "Framebuffer memory reserved (in MiB).", prometheus.GaugeValue,
		"gpud_memory_reserved_bytes", "Framebuffer memory reserved by the driver, in bytes.", prometheus.GaugeValue, mib},
	fPower: {"DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", prometheus.GaugeValue,
		"gpud_power_usage_watts", "Power draw, in watts.", prometheus.GaugeValue, 1},
	fEnergy: {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "Total energy consumption since boot (in mJ).", prometheus.CounterValue,
		"gpud_energy_consumption_joules_total", "Energy consumed since the driver loaded, in joules.", prometheus.CounterValue, 0.001},
	fGPUTemp: {"DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", prometheus.GaugeValue,
		"gpud_gpu_temperature_celsius", "GPU die temperature, in degrees Celsius.", prometheus.GaugeValue, 1},
	fMemTemp: {"DCGM_FI_DEV_MEMORY_TEMP", "Memory temperature (in C).", prometheus.GaugeValue,
		"gpud_memory_temperature_celsius", "HBM temperature, in degrees Celsius.", prometheus.GaugeValue, 1},
	fSMClock: {"DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", prometheus.GaugeValue,
		"gpud_sm_clock_hertz", "SM clock frequency, in hertz.", prometheus.GaugeValue, 1e6},
	fMemClock: {"DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", prometheus.GaugeValue,
		"gpud_memory_clock_hertz", "Memory clock frequency, in hertz.", prometheus.GaugeValue, 1e6},
	fPCIeReplay: {"DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "Total number of PCIe retries.", prometheus.CounterValue,
		"gpud_pcie_replays_total", "PCIe replays (retries) since the driver loaded.", prometheus.CounterValue, 1},
	fNVLinkBandwidth: {"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "Total number of NVLink bandwidth counters for all lanes.", prometheus.CounterValue,
		"gpud_nvlink_bandwidth_total", "NVLink bandwidth counter summed over all links (counter set 0).", prometheus.CounterValue, 1},
	fECCSBEVol: {"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "Total number of single-bit volatile ECC errors.", prometheus.CounterValue,
		"gpud_ecc_sbe_volatile_errors_total", "Single-bit ECC errors since the driver loaded.", prometheus.CounterValue, 1},
	fECCDBEVol: {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "Total number of double-bit volatile ECC errors.", prometheus.CounterValue,
		"gpud_ecc_dbe_volatile_errors_total", "Double-bit ECC errors since the driver loaded.", prometheus.CounterValue, 1},
	fECCSBEAgg: {"DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "Total number of single-bit persistent ECC errors.", prometheus.CounterValue,
		"gpud_ecc_sbe_aggregate_errors_total", "Single-bit ECC errors over the GPU's life.", prometheus.CounterValue, 1},
	fECCDBEAgg: {"DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "Total number of double-bit persistent ECC errors.", prometheus.CounterValue,
		"gpud_ecc_dbe_aggregate_errors_total", "Double-bit ECC errors over the GPU's life.", prometheus.CounterValue, 1},
	fRemapCorrectable: {"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for correctable errors", prometheus.CounterValue,
		"gpud_remapped_rows_correctable_total", "Memory rows remapped for correctable errors.", prometheus.CounterValue, 1},
	fRemapUncorrectable: {"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for uncorrectable errors", prometheus.CounterValue,
		"gpud_remapped_rows_uncorrectable_total", "Memory rows remapped for uncorrectable errors.", prometheus.CounterValue, 1},
	fRemapFailure: {"DCGM_FI_DEV_ROW_REMAP_FAILURE", "Whether remapping of rows has failed", prometheus.GaugeValue,
		"gpud_remapped_rows_failed", "1 when row remapping failed (the GPU needs service), else 0.", prometheus.GaugeValue, 1},
	// A bitmask of NVML's nvmlClocksEventReason* bits (0x1 idle, 0x4 SW power
	// cap, 0x8 HW slowdown, 0x20 SW thermal, 0x40 HW thermal, 0x80 HW power
	// brake, ...), as dcgm-exporter exports DCGM field 112. DCGM 3.3 renamed
	// the field DCGM_FI_DEV_CLOCKS_EVENT_REASONS: dcgmAliases exports both.
	fClocksEventReasons: {"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "Current clock throttle reasons (bitmask of DCGM_CLOCKS_THROTTLE_REASON_*).", prometheus.GaugeValue,
		"gpud_clocks_event_reasons", "Why the GPU's clocks are below their maximum: a bitmask of NVML's clocks event reasons (0x1 idle, 0x4 SW power cap, 0x8 HW slowdown, 0x20 SW thermal slowdown, 0x40 HW thermal slowdown, 0x80 HW power brake).", prometheus.GaugeValue, 1},
	// dcgm-exporter's etc/dcp-metrics-included.csv; gpud reads them through
	// NVML GPM, between two samples one Interval apart.
	fProfGREngine: {"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active.", prometheus.GaugeValue,
		"gpud_gpm_graphics_engine_active_ratio", "Fraction of time the graphics or compute engine was active between the last two GPM samples (0-1).", prometheus.GaugeValue, 1},
	fProfSMActive: {"DCGM_FI_PROF_SM_ACTIVE", "The ratio of cycles an SM has at least 1 warp assigned.", prometheus.GaugeValue,
		"gpud_gpm_sm_active_ratio", "Fraction of SM cycles with at least one warp assigned, between the last two GPM samples (0-1).", prometheus.GaugeValue, 1},
	fProfSMOccupancy: {"DCGM_FI_PROF_SM_OCCUPANCY", "The ratio of number of warps resident on an SM.", prometheus.GaugeValue,
		"gpud_gpm_sm_occupancy_ratio", "Resident warps against the SMs' maximum, between the last two GPM samples (0-1).", prometheus.GaugeValue, 1},
	fProfTensor: {"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "Ratio of cycles the tensor (HMMA) pipe is active.", prometheus.GaugeValue,
		"gpud_gpm_tensor_pipe_active_ratio", "Fraction of cycles any tensor pipe was active, between the last two GPM samples (0-1).", prometheus.GaugeValue, 1},
	fProfDRAM: {"DCGM_FI_PROF_DRAM_ACTIVE", "Ratio of cycles the device memory interface is active sending or receiving data.", prometheus.GaugeValue,
		"gpud_gpm_dram_active_ratio", "DRAM bandwidth used against its maximum, between the last two GPM samples (0-1).", prometheus.GaugeValue, 1},
	fProfFP64: {"DCGM_FI_PROF_PIPE_FP64_ACTIVE", "Ratio of cycles the fp64 pipes are active.", prometheus.GaugeValue,
		"gpud_gpm_fp64_pipe_active_ratio", "Fraction of cycles the FP64 (non-tensor) pipes were active, between the last two GPM samples (0-1).", prometheus.GaugeValue, 1},
	fProfFP32: {"DCGM_FI_PROF_PIPE_FP32_ACTIVE", "Ratio of cycles the fp32 pipes are active.", prometheus.GaugeValue,
		"gpud_gpm_fp32_pipe_active_ratio", "Fraction of cycles the FP32 (non-tensor) pipes were active, between the last two GPM samples (0-1).", prometheus.GaugeValue, 1},
	fProfFP16: {"DCGM_FI_PROF_PIPE_FP16_ACTIVE", "Ratio of cycles the fp16 pipes are active.", prometheus.GaugeValue,
		"gpud_gpm_fp16_pipe_active_ratio", "Fraction of cycles the FP16 (non-tensor) pipes were active, between the last two GPM samples (0-1).", prometheus.GaugeValue, 1},
	fProfPCIeTX: {"DCGM_FI_PROF_PCIE_TX_BYTES", "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second.", prometheus.GaugeValue,
		"gpud_gpm_pcie_transmit_bytes_per_second", "PCIe traffic from the GPU, headers included, in bytes per second, between the last two GPM samples.", prometheus.GaugeValue, 1},
	fProfPCIeRX: {"DCGM_FI_PROF_PCIE_RX_BYTES", "The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes per second.", prometheus.GaugeValue,
		"gpud_gpm_pcie_receive_bytes_per_second", "PCIe traffic to the GPU, headers included, in bytes per second, between the last two GPM samples.", prometheus.GaugeValue, 1},
	fProfNVLinkTX: {"DCGM_FI_PROF_NVLINK_TX_BYTES", "The rate of data transmitted over NVLink, not including protocol headers, in bytes per second.", prometheus.GaugeValue,
		"gpud_gpm_nvlink_transmit_bytes_per_second", "NVLink traffic from the GPU over all links, in bytes per second, between the last two GPM samples.", prometheus.GaugeValue, 1},
	fProfNVLinkRX: {"DCGM_FI_PROF_NVLINK_RX_BYTES", "The rate of data received over NVLink, not including protocol headers, in bytes per second.", prometheus.GaugeValue,
		"gpud_gpm_nvlink_receive_bytes_per_second", "NVLink traffic to the GPU over all links, in bytes per second, between the last two GPM samples.", prometheus.GaugeValue, 1},
}

// dcgmAlias is a second DCGM name a field is exported under, with the
// same labels and value: DCGM renamed field 112 and dashboards query
// either name.
type dcgmAlias struct{ name, help string }

var dcgmAliases = map[field]dcgmAlias{
	fClocksEventReasons: {"DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "Current clock event reasons (bitmask of DCGM_CLOCKS_EVENT_REASON_*)."},
}

// Clocks event reason bits (NVML's nvmlClocksEventReason*), for tests and
// the alerts in deploy/monitoring.
const (
	ClocksEventGPUIdle      uint64 = 0x1
	ClocksEventSWPowerCap   uint64 = 0x4
	ClocksEventHWSlowdown   uint64 = 0x8
	ClocksEventSWThermal    uint64 = 0x20
	ClocksEventHWThermal    uint64 = 0x40
	ClocksEventHWPowerBrake uint64 = 0x80
)

// FieldName returns the DCGM name of the i-th value in
// DeviceSnapshot.Values (for tests and tools reading a [Snapshot]); code
// reads the values it needs through DeviceSnapshot's typed accessors
// ([DeviceSnapshot.MemoryUsedMiB], ...), not by name.
func FieldName(i int) string {
	if i < 0 || i >= int(numFields) {
		return ""
	}
	return fieldSpecs[i].dcgm
}
