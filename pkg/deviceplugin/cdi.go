package deviceplugin

import (
	"fmt"
	"github.com/gpud/gpud/pkg/devnodes"
	"os"
	"path/filepath"
	"sort"

	"tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpud/gpud/pkg/mps"
)

// CDISpecName is the file the plugin writes in the CDI directory. It is not
// nvidia-ctk's name, so the two do not overwrite each other.
const CDISpecName = "gpud-nvidia.com-gpu.json"

// cdiName is the fully qualified CDI device name of a unit.
func cdiName(unit string) string { return CDIKind + "=" + unit }

// migCapMinor is [devnodes.CapMinors].
var migCapMinor = devnodes.CapMinors

// buildCDISpec returns the spec naming every unit advertised by sets, or
// nil when there is none (CDI rejects a spec without devices). With
// mpsRoot set, a shared unit's device also mounts its MPS pipe directory
// and sets CUDA_MPS_PIPE_DIRECTORY (see [mpsEdits]). files says where the
// device files are on the host. driverEdits (the driver's libraries,
// binaries and hooks, [Config.DriverEdits]) go at spec level, as in
// nvidia-ctk's specs: once per container, whatever number of units it
// gets.
func buildCDISpec(sets map[string]*deviceSet, mpsRoot string, files devnodes.Files, driverEdits cdispec.ContainerEdits) *cdispec.Spec {
	units := map[string]*device{}
	shared := map[string]bool{}
	for _, s := range sets {
		for _, d := range s.devices {
			if _, ok := units[d.Unit]; !ok {
				units[d.Unit] = d
			}
			if d.Replica >= 0 {
				shared[d.Unit] = true
			}
		}
	}
	if len(units) == 0 {
		return nil
	}
	names := make([]string, 0, len(units))
	for u := range units {
		names = append(names, u)
	}
	sort.Strings(names)
	spec := &cdispec.Spec{Version: cdispec.CurrentVersion, Kind: CDIKind}
	spec.ContainerEdits = driverEdits
	spec.ContainerEdits.DeviceNodes = append(files.Common(), driverEdits.DeviceNodes...)
	for _, u := range names {
		d := units[u]
		edits := cdispec.ContainerEdits{DeviceNodes: files.GPU(d.Minor)}
		if d.MIG != nil {
			edits.DeviceNodes = files.MIG(d.Minor, d.MIG.GPUInstanceID, d.MIG.ComputeInstanceID)
		}
		if shared[u] && mpsRoot != "" {
			mpsEdits(&edits, mpsRoot, u)
		}
		devnodes.FillEmpty(&edits, u)
		spec.Devices = append(spec.Devices, cdispec.Device{Name: u, ContainerEdits: edits})
	}
	if v, err := cdispec.MinimumRequiredVersion(spec); err == nil {
		spec.Version = v
	}
	return spec
}

// mpsEdits mounts a GPU's MPS pipe directory (read-write: clients create
// their sockets there) at [mps.ContainerPipeDir] and the daemons' shared
// memory at /dev/shm, and sets CUDA_MPS_PIPE_DIRECTORY, so a container's
// CUDA_MPS_* limits reach the GPU's control daemon.
func mpsEdits(edits *cdispec.ContainerEdits, mpsRoot, uuid string) {
	opts := []string{"rbind", "rw", "nosuid", "nodev"}
	edits.Mounts = append(edits.Mounts,
		&cdispec.Mount{HostPath: mps.PipeDir(mpsRoot, uuid), ContainerPath: mps.ContainerPipeDir, Type: "bind", Options: opts},
		&cdispec.Mount{HostPath: mps.ShmDir(mpsRoot), ContainerPath: mps.ContainerShmDir, Type: "bind", Options: opts})
	edits.Env = append(edits.Env, mps.EnvPipeDirectory+"="+mps.ContainerPipeDir)
}

// writeCDISpec validates spec with the CDI library's own parser and
// validation and writes it atomically (temp file, rename) into dir. A nil
// spec removes the file.
func writeCDISpec(dir string, spec *cdispec.Spec) error {
	if spec == nil {
		if err := os.Remove(filepath.Join(dir, CDISpecName)); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("cdi: remove stale spec: %w", err)
		}
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("cdi: create dir %s (set --cdi-dir to a writable dir): %w", dir, err)
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		return fmt.Errorf("cdi: open spec dir %s: %w", dir, err)
	}
	if err := cache.WriteSpec(spec, CDISpecName); err != nil {
		return fmt.Errorf("cdi: write spec %s: %w", filepath.Join(dir, CDISpecName), err)
	}
	// WriteSpec creates the file 0600; runtimes that read it as another
	// user need it readable.
	if err := os.Chmod(filepath.Join(dir, CDISpecName), 0o644); err != nil {
		return fmt.Errorf("cdi: chmod spec: %w", err)
	}
	return nil
}
