package simnode

import (
	"encoding/binary"
	"hash/fnv"
	"math"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// loadPeriodSeconds is the period of the simulated load wave.
const loadPeriodSeconds = 120.0

// phase is a per-GPU offset of the load wave, from the profile's seed.
func (d *Device) phase() float64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte{byte(d.node.profile.Seed), byte(d.node.profile.Seed >> 8), byte(d.index)})
	return float64(h.Sum64()%1000) / 1000 * 2 * math.Pi
}

// utilAt is the SM utilization in [0,1] at t seconds after start: zero when
// no process runs, a slow wave between 0.15 and 0.95 otherwise.
func (d *Device) utilAt(t float64, busy bool) float64 {
	if !busy {
		return 0
	}
	return 0.55 + 0.4*math.Sin(2*math.Pi*t/loadPeriodSeconds+d.phase())
}

func (d *Device) busyLocked() bool { return len(d.procs) > 0 }

// sample returns utilization, power in mW and temperature in C now, and
// advances the energy counter. Callers hold no lock.
func (d *Device) sample() (util float64, powerMW uint32, tempC uint32, energyMJ uint64) {
	m := d.node.model
	t := d.node.elapsed().Seconds()
	d.node.mu.Lock()
	defer d.node.mu.Unlock()
	util = d.utilAt(t, d.busyLocked())
	watts := float64(m.idlePowerW) + util*(0.9*float64(m.powerLimitW)-float64(m.idlePowerW))
	if t > d.energyAt {
		d.energyMJ += watts * 1000 * (t - d.energyAt)
		// NVLink traffic follows load: a quarter of each link's 25 GB/s.
		d.nvlinkKiB += util * 0.25 * 25e9 / 1024 * float64(m.nvlinks) * (t - d.energyAt)
		d.energyAt = t
	}
	return util, uint32(watts * 1000), uint32(30 + float64(d.index%3) + 50*util), uint64(d.energyMJ)
}

func (d *Device) setTelemetryFuncs() {
	m := d.node.model
	d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		if r := d.lostOr("GetUtilizationRates"); r != nvml.SUCCESS {
			return nvml.Utilization{}, r
		}
		u, _, _, _ := d.sample()
		return nvml.Utilization{Gpu: uint32(math.Round(u * 100)), Memory: uint32(math.Round(u * 60))}, nvml.SUCCESS
	}
	d.GetPowerUsageFunc = func() (uint32, nvml.Return) {
		if r := d.lostOr("GetPowerUsage"); r != nvml.SUCCESS {
			return 0, r
		}
		_, p, _, _ := d.sample()
		return p, nvml.SUCCESS
	}
	d.GetTotalEnergyConsumptionFunc = func() (uint64, nvml.Return) {
		if r := d.lostOr("GetTotalEnergyConsumption"); r != nvml.SUCCESS {
			return 0, r
		}
		_, _, _, e := d.sample()
		return e, nvml.SUCCESS
	}
	d.GetTemperatureFunc = func(s nvml.TemperatureSensors) (uint32, nvml.Return) {
		if r := d.lostOr("GetTemperature"); r != nvml.SUCCESS {
			return 0, r
		}
		if s != nvml.TEMPERATURE_GPU {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		_, _, c, _ := d.sample()
		return c, nvml.SUCCESS
	}
	d.GetClockInfoFunc = func(c nvml.ClockType) (uint32, nvml.Return) {
		if r := d.lostOr("GetClockInfo"); r != nvml.SUCCESS {
			return 0, r
		}
		u, _, _, _ := d.sample()
		switch c {
		case nvml.CLOCK_SM, nvml.CLOCK_GRAPHICS:
			if u == 0 {
				return 345, nvml.SUCCESS
			}
			return m.maxSMClock, nvml.SUCCESS
		case nvml.CLOCK_MEM:
			return m.memClock, nvml.SUCCESS
		}
		return 0, nvml.ERROR_INVALID_ARGUMENT
	}
	d.GetTotalEccErrorsFunc = func(t nvml.MemoryErrorType, _ nvml.EccCounterType) (uint64, nvml.Return) {
		if r := d.lostOr("GetTotalEccErrors"); r != nvml.SUCCESS {
			return 0, r
		}
		d.node.mu.Lock()
		defer d.node.mu.Unlock()
		if t == nvml.MEMORY_ERROR_TYPE_UNCORRECTED {
			return d.dbe, nvml.SUCCESS
		}
		return d.sbe, nvml.SUCCESS
	}
	d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) {
		if r := d.lostOr("GetRemappedRows"); r != nvml.SUCCESS {
			return 0, 0, false, false, r
		}
		d.node.mu.Lock()
		defer d.node.mu.Unlock()
		return 0, int(d.dbe), d.dbe > 0, false, nvml.SUCCESS
	}
	d.GetPcieReplayCounterFunc = func() (int, nvml.Return) { return 0, d.lostOr("GetPcieReplayCounter") }
	d.GetFieldValuesFunc = func(values []nvml.FieldValue) nvml.Return {
		if r := d.lostOr("GetFieldValues"); r != nvml.SUCCESS {
			return r
		}
		_, _, tempC, _ := d.sample()
		d.node.mu.Lock()
		nvlinkKiB := uint64(d.nvlinkKiB)
		d.node.mu.Unlock()
		now := d.node.clock().UnixMicro()
		for i := range values {
			v := &values[i]
			v.Timestamp, v.NvmlReturn = now, uint32(nvml.SUCCESS)
			switch v.FieldId {
			case nvml.FI_DEV_MEMORY_TEMP:
				if m.maxMemTempC == 0 {
					v.NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
					continue
				}
				v.ValueType = uint32(nvml.VALUE_TYPE_UNSIGNED_INT)
				binary.LittleEndian.PutUint64(v.Value[:], uint64(tempC+6))
			case nvml.FI_DEV_NVLINK_BANDWIDTH_C0_TOTAL:
				if m.nvlinks == 0 || d.node.profile.Interconnect != "nvswitch" {
					v.NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
					continue
				}
				v.ValueType = uint32(nvml.VALUE_TYPE_UNSIGNED_LONG_LONG)
				binary.LittleEndian.PutUint64(v.Value[:], nvlinkKiB)
			default:
				v.NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
			}
		}
		return nvml.SUCCESS
	}
}
