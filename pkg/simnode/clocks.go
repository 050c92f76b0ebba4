package simnode

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// The simulated clocks event reasons follow the load model in telemetry.go:
// an idle GPU reports GpuIdle; near the top of the load wave the power draw
// reaches the software power cap and the die the software thermal slowdown
// threshold, as a busy air-cooled GPU does. HW slowdown bits (HW thermal,
// HW power brake, external slowdown) only come from [Node.InjectClocksEvent].
const (
	// swPowerCapFraction is the share of the power limit above which the
	// driver caps clocks (SW power cap).
	swPowerCapFraction = 0.84
	// swThermalC is the die temperature from which the driver slows the
	// clocks (SW thermal slowdown).
	swThermalC = 77
)

// clocksEventReasons is the GPU's current nvmlClocksEventReason* bitmask.
func (d *Device) clocksEventReasons() uint64 {
	util, powerMW, tempC, _ := d.sample()
	var mask uint64
	if util == 0 {
		mask |= nvml.ClocksEventReasonGpuIdle
	}
	if float64(powerMW) >= swPowerCapFraction*float64(d.node.model.powerLimitW)*1000 {
		mask |= nvml.ClocksEventReasonSwPowerCap
	}
	if tempC >= swThermalC {
		mask |= nvml.ClocksEventReasonSwThermalSlowdown
	}
	d.node.mu.Lock()
	defer d.node.mu.Unlock()
	return mask | d.clocksInjected
}

func (d *Device) setClocksFuncs() {
	get := func(op string) func() (uint64, nvml.Return) {
		return func() (uint64, nvml.Return) {
			if r := d.lostOr(op); r != nvml.SUCCESS {
				return 0, r
			}
			return d.clocksEventReasons(), nvml.SUCCESS
		}
	}
	d.GetCurrentClocksEventReasonsFunc = get("GetCurrentClocksEventReasons")
	d.GetCurrentClocksThrottleReasonsFunc = get("GetCurrentClocksThrottleReasons")
	supported := func(op string) func() (uint64, nvml.Return) {
		return func() (uint64, nvml.Return) {
			return nvml.ClocksEventReasonGpuIdle | nvml.ClocksEventReasonApplicationsClocksSetting |
				nvml.ClocksEventReasonSwPowerCap | nvml.ClocksThrottleReasonHwSlowdown |
				nvml.ClocksEventReasonSyncBoost | nvml.ClocksEventReasonSwThermalSlowdown |
				nvml.ClocksThrottleReasonHwThermalSlowdown | nvml.ClocksThrottleReasonHwPowerBrakeSlowdown, d.lostOr(op)
		}
	}
	d.GetSupportedClocksEventReasonsFunc = supported("GetSupportedClocksEventReasons")
	d.GetSupportedClocksThrottleReasonsFunc = supported("GetSupportedClocksThrottleReasons")
}

// InjectClocksEvent adds reasons (nvmlClocksEventReason* bits, e.g.
// nvml.ClocksThrottleReasonHwSlowdown) to what GPU index reports, on top of
// the load model's, until cleared with mask 0.
func (n *Node) InjectClocksEvent(index int, mask uint64) error {
	return n.withDevice(index, func(d *Device) { d.clocksInjected = mask })
}
