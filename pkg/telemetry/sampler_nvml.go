package telemetry

import (
	"encoding/binary"
	"math"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// reading is what one NVML call returned: the fields it filled.
type reading struct {
	vals [numFields]float64
	ok   [numFields]bool
	// throttleOnly is set for a driver library without
	// nvmlDeviceGetCurrentClocksEventReasons (before R535): the deprecated
	// nvmlDeviceGetCurrentClocksThrottleReasons returns the same bits.
	throttleOnly bool
}

func (r *reading) set(f field, v float64) { r.vals[f], r.ok[f] = v, true }

// call is one NVML query. name is the NVML method (the op simnode's
// InjectFault and gpud_sampler_errors_total use). fields are what it fills;
// a field it leaves unset after SUCCESS is unsupported on that device.
type call struct {
	name   string
	onMIG  bool // also asked of MIG device handles
	onGPU  bool // asked of whole GPUs
	fields []field
	read   func(d nvml.Device, r *reading) nvml.Return
}

// calls are the queries of one sweep, per device.
var calls = [numCalls]call{
	{name: "GetUtilizationRates", onGPU: true, fields: []field{fGPUUtil, fMemCopyUtil},
		read: func(d nvml.Device, r *reading) nvml.Return {
			u, ret := d.GetUtilizationRates()
			if ret == nvml.SUCCESS {
				r.set(fGPUUtil, float64(u.Gpu))
				r.set(fMemCopyUtil, float64(u.Memory))
			}
			return ret
		}},
	{name: "GetMemoryInfo", onGPU: true, onMIG: true, fields: []field{fFBUsed, fFBFree, fFBReserved},
		read: func(d nvml.Device, r *reading) nvml.Return {
			m, ret := d.GetMemoryInfo_v2()
			if ret == nvml.SUCCESS {
				// DCGM reports whole MiB.
				r.set(fFBUsed, float64(m.Used/mib))
				r.set(fFBFree, float64(m.Free/mib))
				r.set(fFBReserved, float64(m.Reserved/mib))
			}
			return ret
		}},
	{name: "GetPowerUsage", onGPU: true, fields: []field{fPower},
		read: func(d nvml.Device, r *reading) nvml.Return {
			mw, ret := d.GetPowerUsage()
			if ret == nvml.SUCCESS {
				r.set(fPower, float64(mw)/1000)
			}
			return ret
		}},
	{name: "GetTotalEnergyConsumption", onGPU: true, fields: []field{fEnergy},
		read: func(d nvml.Device, r *reading) nvml.Return {
			mj, ret := d.GetTotalEnergyConsumption()
			if ret == nvml.SUCCESS {
				r.set(fEnergy, float64(mj))
			}
			return ret
		}},
	{name: "GetTemperature", onGPU: true, fields: []field{fGPUTemp},
		read: func(d nvml.Device, r *reading) nvml.Return {
			c, ret := d.GetTemperature(nvml.TEMPERATURE_GPU)
			if ret == nvml.SUCCESS {
				r.set(fGPUTemp, float64(c))
			}
			return ret
		}},
	{name: "GetClockInfo", onGPU: true, fields: []field{fSMClock, fMemClock},
		read: func(d nvml.Device, r *reading) nvml.Return {
			sm, ret := d.GetClockInfo(nvml.CLOCK_SM)
			if ret != nvml.SUCCESS {
				return ret
			}
			r.set(fSMClock, float64(sm))
			mem, ret := d.GetClockInfo(nvml.CLOCK_MEM)
			if ret == nvml.SUCCESS {
				r.set(fMemClock, float64(mem))
			}
			return ret
		}},
	{name: "GetCurrentClocksEventReasons", onGPU: true, fields: []field{fClocksEventReasons},
		read: func(d nvml.Device, r *reading) nvml.Return {
			get := d.GetCurrentClocksEventReasons
			if r.throttleOnly {
				get = d.GetCurrentClocksThrottleReasons
			}
			mask, ret := get()
			if ret == nvml.SUCCESS {
				r.set(fClocksEventReasons, float64(mask))
			}
			return ret
		}},
	{name: "GetPcieReplayCounter", onGPU: true, fields: []field{fPCIeReplay},
		read: func(d nvml.Device, r *reading) nvml.Return {
			n, ret := d.GetPcieReplayCounter()
			if ret == nvml.SUCCESS {
				r.set(fPCIeReplay, float64(n))
			}
			return ret
		}},
	{name: "GetTotalEccErrors", onGPU: true, fields: []field{fECCSBEVol, fECCDBEVol, fECCSBEAgg, fECCDBEAgg},
		read: func(d nvml.Device, r *reading) nvml.Return {
			for _, q := range []struct {
				f   field
				typ nvml.MemoryErrorType
				ctr nvml.EccCounterType
			}{
				{fECCSBEVol, nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.VOLATILE_ECC},
				{fECCDBEVol, nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC},
				{fECCSBEAgg, nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.AGGREGATE_ECC},
				{fECCDBEAgg, nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.AGGREGATE_ECC},
			} {
				n, ret := d.GetTotalEccErrors(q.typ, q.ctr)
				if ret != nvml.SUCCESS {
					return ret
				}
				r.set(q.f, float64(n))
			}
			return nvml.SUCCESS
		}},
	{name: "GetRemappedRows", onGPU: true, fields: []field{fRemapCorrectable, fRemapUncorrectable, fRemapFailure},
		read: func(d nvml.Device, r *reading) nvml.Return {
			corr, unc, _, failed, ret := d.GetRemappedRows()
			if ret == nvml.SUCCESS {
				r.set(fRemapCorrectable, float64(corr))
				r.set(fRemapUncorrectable, float64(unc))
				r.set(fRemapFailure, b2f(failed))
			}
			return ret
		}},
	{name: "GetFieldValues", onGPU: true, fields: []field{fMemTemp, fNVLinkBandwidth},
		read: func(d nvml.Device, r *reading) nvml.Return {
			vals := []nvml.FieldValue{{FieldId: nvml.FI_DEV_MEMORY_TEMP}, {FieldId: nvml.FI_DEV_NVLINK_BANDWIDTH_C0_TOTAL, ScopeId: ^uint32(0)}}
			if ret := d.GetFieldValues(vals); ret != nvml.SUCCESS {
				return ret
			}
			for i, f := range []field{fMemTemp, fNVLinkBandwidth} {
				if nvml.Return(vals[i].NvmlReturn) == nvml.SUCCESS {
					r.set(f, fieldValue(vals[i]))
				}
			}
			return nvml.SUCCESS
		}},
}

// numCalls is the number of per-device queries in calls.
const numCalls = 11

// callProcesses is the name of the process-list query (per whole GPU; it
// covers the GPU's MIG devices through each process's GPU instance ID).
const callProcesses = "GetComputeRunningProcesses"

// throttleOnly reports whether lib lacks nvmlDeviceGetCurrentClocksEventReasons
// (drivers before R535), where calling it would fault. A library without
// symbol lookup (go-nvml's mocks, the simulated node) has every method.
func throttleOnly(lib nvml.Interface) bool {
	ext := lib.Extensions()
	if ext == nil {
		return false
	}
	return ext.LookupSymbol("nvmlDeviceGetCurrentClocksEventReasons") != nil
}

// fieldValue decodes an NVML field value by its type.
func fieldValue(v nvml.FieldValue) float64 {
	u64 := binary.LittleEndian.Uint64(v.Value[:])
	switch nvml.ValueType(v.ValueType) {
	case nvml.VALUE_TYPE_DOUBLE:
		return math.Float64frombits(u64)
	case nvml.VALUE_TYPE_UNSIGNED_INT:
		return float64(uint32(u64))
	case nvml.VALUE_TYPE_SIGNED_INT:
		return float64(int32(uint32(u64)))
	case nvml.VALUE_TYPE_SIGNED_LONG_LONG:
		return float64(int64(u64))
	}
	return float64(u64)
}

// reason names an NVML failure for gpud_sampler_errors_total.
func reason(ret nvml.Return) string {
	switch ret {
	case nvml.ERROR_GPU_IS_LOST:
		return "gpu_lost"
	case nvml.ERROR_TIMEOUT:
		return "nvml_timeout"
	case nvml.ERROR_NOT_FOUND:
		return "not_found"
	case nvml.ERROR_UNINITIALIZED:
		return "uninitialized"
	case nvml.ERROR_NO_PERMISSION:
		return "no_permission"
	case nvml.ERROR_UNKNOWN:
		return "unknown"
	}
	return "nvml_error"
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
