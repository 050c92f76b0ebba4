package memlimit_test

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/pkg/memlimit"
)

// A GPU's mode follows from what NVML answered: an r615 driver that knows
// the call (no limits on the cgroup mount yet: ERROR_NOT_FOUND) limits
// containers itself; an older one leaves MPS.
func ExampleDecide() {
	for _, f := range []memlimit.Facts{
		{UUID: "GPU-a", DriverVersion: "615.40.01", CgroupV2: true, Probe: nvml.ERROR_NOT_FOUND, MPS: true},
		{UUID: "GPU-b", DriverVersion: "550.54.15", CgroupV2: true, Probe: nvml.ERROR_NOT_SUPPORTED, MPS: true},
		{UUID: "GPU-c", DriverVersion: "615.40.01", CgroupV2: true, MIG: true, Probe: nvml.ERROR_NOT_SUPPORTED},
	} {
		d := memlimit.Decide(f)
		fmt.Printf("%s %s: %s\n", d.UUID, d.Mode, d.Reason)
	}
	// Output:
	// GPU-a driver: driver 615.40.01 limits GPU memory per cgroup
	// GPU-b mps: no driver memory limits (driver 550.54.15 predates r615); MPS pinned-memory limits
	// GPU-c watchdog: no driver memory limits (MIG mode on) and no MPS
}
