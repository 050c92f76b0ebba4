// Package devnodes names the NVIDIA device files a container with a GPU
// gets (/dev/nvidiactl, /dev/nvidia<minor>, MIG access caps) and where each
// is on the host, for the CDI specs of the device plugin and the DRA
// driver. On a GPU node they are the driver's files in the host's /dev.
// A simulated node has no driver: its files are fake character nodes gpud
// creates under a root it is given ([Create]), or none, and a spec then
// names only the files that exist, so a container runtime that stats every
// CDI device node (containerd 2: "failed to stat CDI host device") still
// starts the container.
package devnodes

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// GPUMajor is the character major of /dev/nvidia<minor> and /dev/nvidiactl.
const GPUMajor = 195

// CtlMinor is /dev/nvidiactl's minor.
const CtlMinor = 255

// The simulated node's majors for nvidia-uvm and nvidia-caps, which the
// driver allocates dynamically (see /proc/devices): two of Linux's majors
// for local and experimental use (60-63), which no driver registers, so a
// fake node opens nothing real.
const (
	SimUVMMajor  = 60
	SimCapsMajor = 61
)

// Files maps the device files a container sees to the host's. The zero
// value is a GPU node: the host's /dev, every file listed.
type Files struct {
	// Root is the host directory laid out as /dev is ("" is /dev itself).
	Root string
	// OnlyExisting leaves out of a spec the files absent under Root.
	OnlyExisting bool
}

// commonPaths are the files every container with a GPU needs.
var commonPaths = []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}

// Common returns the files every container with a GPU gets.
func (f Files) Common() []*cdispec.DeviceNode { return f.nodes(commonPaths...) }

// GPU returns a whole GPU's file, /dev/nvidia<minor>.
func (f Files) GPU(minor int) []*cdispec.DeviceNode {
	return f.nodes(fmt.Sprintf("/dev/nvidia%d", minor))
}

// MIG returns a MIG device's files: its GPU's and the access caps of its
// GPU instance and compute instance.
func (f Files) MIG(gpuMinor, gi, ci int) []*cdispec.DeviceNode {
	giMinor, ciMinor := CapMinors(gpuMinor, gi, ci)
	return f.nodes(fmt.Sprintf("/dev/nvidia%d", gpuMinor),
		fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", giMinor),
		fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", ciMinor))
}

// CapMinors returns the minors of /dev/nvidia-caps/nvidia-cap<N> that grant
// access to a GPU instance and its compute instance, as the driver numbers
// them in /proc/driver/nvidia-caps/mig-minors: config is 1, monitor 2, then
// per GPU 15 GPU instances of one access node and 8 compute instance nodes
// each.
func CapMinors(gpuMinor, gi, ci int) (giMinor, ciMinor int) {
	const perGI, perGPU = 9, 15 * 9
	giMinor = 3 + gpuMinor*perGPU + gi*perGI
	return giMinor, giMinor + 1 + ci
}

// HostPath is where the container's file p (/dev/...) is on the host.
func (f Files) HostPath(p string) string {
	if f.Root == "" {
		return p
	}
	return filepath.Join(f.Root, strings.TrimPrefix(p, "/dev/"))
}

func (f Files) nodes(paths ...string) []*cdispec.DeviceNode {
	out := make([]*cdispec.DeviceNode, 0, len(paths))
	for _, p := range paths {
		host := f.HostPath(p)
		if f.OnlyExisting {
			if _, err := os.Stat(host); err != nil {
				continue
			}
		}
		n := &cdispec.DeviceNode{Path: p}
		if host != p {
			n.HostPath = host
		}
		out = append(out, n)
	}
	return out
}

// Create makes a simulated node's device files under root: nvidiactl and
// nvidia<minor> for each GPU minor (major 195, as the driver's),
// nvidia-uvm and nvidia-uvm-tools, and nvidia-caps/nvidia-cap<N> for every
// MIG access cap of those GPUs ([SimUVMMajor], [SimCapsMajor]). With no
// NVIDIA driver loaded, opening one fails with ENXIO, and a device filter
// that refuses it gives EPERM: what a container may open is observable
// without a GPU. Files already right are kept. It needs CAP_MKNOD (root);
// the error says so.
func Create(root string, gpuMinors []int) error {
	want := map[string]uint64{
		"nvidiactl":        unix.Mkdev(GPUMajor, CtlMinor),
		"nvidia-uvm":       unix.Mkdev(SimUVMMajor, 0),
		"nvidia-uvm-tools": unix.Mkdev(SimUVMMajor, 1),
	}
	for _, m := range gpuMinors {
		if m < 0 || m >= CtlMinor-1 { // 254 is nvidia-modeset
			return fmt.Errorf("gpu minor %d: want 0-253", m)
		}
		want[fmt.Sprintf("nvidia%d", m)] = unix.Mkdev(GPUMajor, uint32(m))
		for gi := range 15 {
			for ci := range 8 {
				giMinor, ciMinor := CapMinors(m, gi, ci)
				want[fmt.Sprintf("nvidia-caps/nvidia-cap%d", giMinor)] = unix.Mkdev(SimCapsMajor, uint32(giMinor))
				want[fmt.Sprintf("nvidia-caps/nvidia-cap%d", ciMinor)] = unix.Mkdev(SimCapsMajor, uint32(ciMinor))
			}
		}
	}
	if err := os.MkdirAll(filepath.Join(root, "nvidia-caps"), 0o755); err != nil {
		return fmt.Errorf("device files root %s: %w", root, err)
	}
	for name, dev := range want {
		if err := mknod(filepath.Join(root, name), dev); err != nil {
			return err
		}
	}
	return nil
}

// mknod makes the character device p, or keeps it when it is already dev.
func mknod(p string, dev uint64) error {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err == nil {
		if st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == dev {
			return nil
		}
		return fmt.Errorf("%s exists and is not character device %d:%d; remove it", p, unix.Major(dev), unix.Minor(dev))
	}
	if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(dev)); err != nil {
		if errors.Is(err, unix.EPERM) {
			return fmt.Errorf("create %s: %w (creating device files needs root, CAP_MKNOD)", p, err)
		}
		return fmt.Errorf("create %s: %w", p, err)
	}
	if err := os.Chmod(p, 0o666); err != nil { // mknod's mode is masked by the umask
		return fmt.Errorf("chmod %s: %w", p, err)
	}
	return nil
}

// FillEmpty gives a device whose edits are empty (a simulated node without
// device files; CDI refuses a device that edits nothing) one environment
// variable, GPUD_SIM_<NAME>=<name>, so the container can still tell which
// simulated devices it got.
func FillEmpty(edits *cdispec.ContainerEdits, name string) {
	if len(edits.DeviceNodes)+len(edits.Env)+len(edits.Mounts)+len(edits.Hooks) > 0 {
		return
	}
	key := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			return r
		}
		return '_'
	}, name)
	edits.Env = append(edits.Env, "GPUD_SIM_"+key+"="+name)
}
