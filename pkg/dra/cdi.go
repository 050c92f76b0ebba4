package dra

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/gpud/gpud/pkg/devnodes"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"k8s.io/apimachinery/pkg/types"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpud/gpud/internal/fileio"
	"github.com/gpud/gpud/pkg/mps"
	"github.com/gpud/gpud/pkg/timeslice"
)

// CDIKind is the CDI kind of the devices prepared claims get; the device
// IDs are CDIKind=<claim UID>-<device>[-<share ID>].
const CDIKind = "k8s.gpu.gpud.io/claim"

// cdiSpecPath is the one CDI spec file of a claim.
func cdiSpecPath(dir string, claimUID types.UID) string {
	return filepath.Join(dir, "gpud-dra-"+string(claimUID)+".json")
}

// cdiDeviceName is a prepared device's name in the claim's spec.
func cdiDeviceName(claimUID types.UID, d PreparedDevice) string {
	n := string(claimUID) + "-" + d.Device.Name
	if d.ShareID != "" {
		n += "-" + d.ShareID
	}
	return n
}

// migCapMinor is [devnodes.CapMinors] (pkg/deviceplugin numbers them
// the same).
var migCapMinor = devnodes.CapMinors

// buildCDISpec is a claim's spec: one CDI device per prepared device with
// its device nodes, and for a fraction its MPS limits as environment and,
// with mpsRoot set (the agent's --mps-root, where the GPUs' MPS daemons
// run), its GPU's pipe directory mounted at [mps.ContainerPipeDir] with
// CUDA_MPS_PIPE_DIRECTORY pointing there, and the daemons' shared memory
// ([mps.ShmDir]) at /dev/shm. files says where the device files are on
// the host. driverEdits (the driver's libraries, binaries and hooks, see
// [PreparerConfig.DriverEdits]) go at spec level, as in nvidia-ctk's
// specs: once per container, whatever number of the claim's devices it
// gets.
func buildCDISpec(claimUID types.UID, devs []PreparedDevice, mpsRoot string, files devnodes.Files, driverEdits cdispec.ContainerEdits) (*cdispec.Spec, error) {
	spec := &cdispec.Spec{Version: cdispec.CurrentVersion, Kind: CDIKind}
	spec.ContainerEdits = driverEdits
	spec.ContainerEdits.DeviceNodes = append(files.Common(), driverEdits.DeviceNodes...)
	for _, d := range devs {
		name := cdiDeviceName(claimUID, d)
		if err := parser.ValidateDeviceName(name); err != nil {
			return nil, fmt.Errorf("cdi device name %q: %w", name, err)
		}
		edits := cdispec.ContainerEdits{DeviceNodes: files.GPU(d.Device.GPUMinor)}
		if d.Device.Type == TypeMIG {
			edits.DeviceNodes = files.MIG(d.Device.GPUMinor, d.Device.GIID, d.Device.CIID)
		}
		if d.Fraction() {
			// MPS's pinned memory limit is a hard one: the fraction's limit.
			env := timeslice.Share{MemoryMiB: d.LimitBytes() >> 20, ComputePercent: d.CoresPercent}.MPSEnv(0)
			names := make([]string, 0, len(env))
			for k := range env {
				names = append(names, k)
			}
			sort.Strings(names)
			for _, k := range names {
				edits.Env = append(edits.Env, k+"="+env[k])
			}
			if mpsRoot != "" {
				opts := []string{"rbind", "rw", "nosuid", "nodev"}
				edits.Mounts = append(edits.Mounts,
					&cdispec.Mount{HostPath: mps.PipeDir(mpsRoot, d.Device.GPUUUID), ContainerPath: mps.ContainerPipeDir, Type: "bind", Options: opts},
					&cdispec.Mount{HostPath: mps.ShmDir(mpsRoot), ContainerPath: mps.ContainerShmDir, Type: "bind", Options: opts})
				edits.Env = append(edits.Env, mps.EnvPipeDirectory+"="+mps.ContainerPipeDir)
			}
		}
		devnodes.FillEmpty(&edits, name)
		spec.Devices = append(spec.Devices, cdispec.Device{Name: name, ContainerEdits: edits})
	}
	if v, err := cdispec.MinimumRequiredVersion(spec); err == nil {
		spec.Version = v
	}
	return spec, nil
}

// mkMPSPipeDirs creates the MPS directories a claim's fractions mount,
// if their daemons have not yet: a bind mount of a missing directory
// fails the container.
func mkMPSPipeDirs(mpsRoot string, devs []PreparedDevice) error {
	if mpsRoot == "" {
		return nil
	}
	for _, d := range devs {
		if !d.Fraction() {
			continue
		}
		for _, dir := range []string{mps.PipeDir(mpsRoot, d.Device.GPUUUID), mps.ShmDir(mpsRoot)} {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("device %q: create MPS directory %s (check --mps-root): %w", d.Device.Name, dir, err)
			}
		}
	}
	return nil
}

// writeCDISpec writes a claim's spec atomically (fileio.WriteFile), readable
// by runtimes running as another user. A spec with devices is checked
// with the CDI library's own parser and validation, as a runtime will
// read it: one it rejects fails the prepare rather than the container's
// start, and is removed. (A claim without devices of this driver has a
// spec without devices, which no container names.)
func writeCDISpec(dir string, claimUID types.UID, spec *cdispec.Spec) error {
	data, err := json.Marshal(spec)
	if err != nil {
		return fmt.Errorf("cdi: encode spec: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("cdi: create dir %s: %w", dir, err)
	}
	path := cdiSpecPath(dir, claimUID)
	if err := fileio.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("cdi: %w", err)
	}
	if len(spec.Devices) == 0 {
		return nil
	}
	if _, err := cdi.ReadSpec(path, 0); err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("cdi: invalid spec: %w", err)
	}
	return nil
}

// removeStaleCDITemps removes the temp files of claim spec writes a kill
// cut short (fileio.WriteFile's .gpud-dra-<claim UID>.json.tmp). Runtimes
// ignore them, but nothing else would ever remove them; the specs
// themselves are whole (written by rename).
func removeStaleCDITemps(dir string) error {
	stale, err := filepath.Glob(filepath.Join(dir, ".gpud-dra-*.json.tmp"))
	if err != nil {
		return fmt.Errorf("cdi: %w", err)
	}
	for _, p := range stale {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("cdi: remove stale temp file: %w", err)
		}
	}
	return nil
}

// removeCDISpec removes a claim's spec; a missing one is fine.
func removeCDISpec(dir string, claimUID types.UID) error {
	if err := os.Remove(cdiSpecPath(dir, claimUID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("cdi: remove spec: %w", err)
	}
	return nil
}
