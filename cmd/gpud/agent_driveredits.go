package main

import (
	"flag"
	"log/slog"
	"path/filepath"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpud/gpud/pkg/driveredits"
	"github.com/gpud/gpud/pkg/simnode"
)

// driverEditsOptions are the flags of the driver files the agent's CDI
// specs carry (the driver root is --driver-root, shared with MPS).
type driverEditsOptions struct {
	hookPath       string
	hostDriverRoot string
}

func (o *driverEditsOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.hookPath, "nvidia-cdi-hook-path", driveredits.DefaultHookPath,
		"host path of the NVIDIA Container Toolkit's nvidia-cdi-hook, which the container runtime runs for the hooks (create-symlinks, update-ldcache, ...) the CDI specs carry with the driver's files")
	fs.StringVar(&o.hostDriverRoot, "host-driver-root", "",
		"where --driver-root is on the host, which the CDI specs' driver-file mounts name (an agent in a container sees the host's driver root mounted elsewhere); empty: --driver-root")
}

// validate checks that the paths the CDI specs will name are absolute:
// the runtime resolves them on the host.
func (o driverEditsOptions) validate() []error {
	var errs []error
	if !filepath.IsAbs(o.hookPath) {
		errs = append(errs, flagErr("nvidia-cdi-hook-path", "%q: want an absolute host path", o.hookPath))
	}
	if o.hostDriverRoot != "" && !filepath.IsAbs(o.hostDriverRoot) {
		errs = append(errs, flagErr("host-driver-root", "%q: want an absolute host path", o.hostDriverRoot))
	}
	return errs
}

// newDriverEdits returns the driver's user-space files (libraries,
// binaries, the toolkit's hooks) for every CDI spec the agent writes,
// generated once from NVML and driverRoot. A simulated node has no
// driver and gets none (said at Info); a driver nvcdi cannot find is said
// once at Warn and the specs go without: a container then needs a runtime
// that injects the driver (the nvidia RuntimeClass). It never fails the
// agent.
func newDriverEdits(o driverEditsOptions, lib nvml.Interface, sim *simnode.Node, driverRoot string, log *slog.Logger) cdispec.ContainerEdits {
	if sim != nil {
		log.Info("driver files not in CDI specs", "reason", "simulated node")
		return cdispec.ContainerEdits{}
	}
	edits, err := driveredits.Generate(lib, driveredits.Config{DriverRoot: driverRoot, HostDriverRoot: o.hostDriverRoot, HookPath: o.hookPath}, log)
	if err != nil {
		log.Warn("driver files not in CDI specs: containers need the nvidia RuntimeClass to get the driver (check --driver-root)",
			"driver_root", driverRoot, "err", err)
		return cdispec.ContainerEdits{}
	}
	log.Info("driver files in CDI specs", "driver_root", driverRoot, "host_driver_root", o.hostDriverRoot, "mounts", len(edits.Mounts), "hooks", len(edits.Hooks), "nvidia_cdi_hook", o.hookPath)
	return edits
}
