package main

import (
	"flag"
	"log/slog"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/pkg/dra"
	"github.com/gpud/gpud/pkg/mps"
	"github.com/gpud/gpud/pkg/mps/mpsctl"
	"github.com/gpud/gpud/pkg/timeslice"
)

// mpsOptions are the MPS supervisor's flags.
type mpsOptions struct {
	enabled    bool
	driverRoot string
	root       string
}

func (o *mpsOptions) register(fs *flag.FlagSet) {
	fs.BoolVar(&o.enabled, "mps", true, "run and supervise one MPS control daemon per shared GPU (where <driver-root>/"+mps.ControlBinary+" exists; otherwise the agent says so once and runs without)")
	fs.StringVar(&o.driverRoot, "driver-root", "/", "the host driver's root, where the MPS control program is")
	fs.StringVar(&o.root, "mps-root", mps.DefaultRoot, "each shared GPU's MPS pipe and log directories go to <dir>/<gpu-uuid>/{pipe,log}, the daemons' shared memory to <dir>/shm; containers mount them from the host, so the agent must see this dir at the host's path, and <dir>/shm at its /dev/shm")
}

// newMPSAgent builds the MPS controller from the flags (see
// [mpsctl.Controller] for when it is off).
func newMPSAgent(o *mpsOptions, simulated bool, lib nvml.Interface, sharing *timeslice.Runtime, store mpsctl.Inventory, log *slog.Logger) (*mpsctl.Controller, error) {
	return mpsctl.New(mpsctl.Config{Enabled: o.enabled, DriverRoot: o.driverRoot, Root: o.root, Simulated: simulated,
		NVML: lib, Sharing: sharing, Inventory: store, Log: log})
}

// preparedFractions lists the GPUs (UUIDs) that DRA fractions were
// prepared on: each needs its MPS daemon.
func preparedFractions(p *dra.Preparer) func() []string {
	return func() []string {
		var out []string
		for _, c := range p.Prepared() {
			for _, d := range c.Devices {
				if d.Fraction() {
					out = append(out, d.Device.GPUUUID)
				}
			}
		}
		return out
	}
}
