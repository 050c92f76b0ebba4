// Package devcgroup confines a container to the NVIDIA devices it was
// allocated: a BPF_PROG_TYPE_CGROUP_DEVICE program (cilium/ebpf) attached
// to the container's cgroup v2 directory next to the runtime's own program,
// or, on cgroup v1, lines written to the cgroup's devices.deny.
//
// The rule ([Allowed]) is: character devices of major 195 (/dev/nvidia*)
// are refused except the allocated GPU minors and nvidiactl (195:255);
// character devices of the nvidia-caps major (MIG capabilities) are refused
// except the allocated slices' caps; every other device is left to the
// runtime's rules. The program only ever refuses: attached with
// BPF_F_ALLOW_MULTI semantics, the kernel runs it and the runtime's program
// and a device opens only when both allow it, so it never widens what the
// runtime allows.
//
// The program is built by a pure function ([Program]) and attached by
// [Attach]; [Probe] says whether this kernel can run it. The package reads
// and writes only the cgroup directories and files it is given. It imports
// cilium/ebpf and golang.org/x/sys, and no NVML: callers map allocations to
// minors (see [CapMinor] for MIG caps).
package devcgroup

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// GPUMajor is the character major of /dev/nvidia[0-9]*, /dev/nvidiactl
// (minor [CtlMinor]) and /dev/nvidia-modeset (254), fixed by the driver.
const GPUMajor = 195

// CtlMinor is /dev/nvidiactl's minor, which every CUDA process opens.
const CtlMinor = 255

// Allowed is what one container may open of the NVIDIA devices. The zero
// value allows no GPU minor and no MIG cap (nvidiactl and every non-NVIDIA
// device stay open): the rule for a container that was allocated no GPU.
type Allowed struct {
	// GPUMinors are the 195:N minors of the container's GPUs (a MIG
	// slice's parent GPU included).
	GPUMinors []uint32
	// CapsMajor is the major of /dev/nvidia-caps/* ("nvidia-caps" in
	// /proc/devices); 0 when the driver has no MIG caps, and then caps are
	// not filtered.
	CapsMajor uint32
	// CapMinors are the caps of the container's MIG slices (the GI and CI
	// access caps, see [CapMinor]).
	CapMinors []uint32
	// UVMMajor is nvidia-uvm's major ("nvidia-uvm" in /proc/devices), 0
	// when unknown. The program allows it explicitly; it is never refused,
	// since CUDA needs it for any allocated GPU.
	UVMMajor uint32
}

// Validate refuses majors that would make the program refuse or allow the
// wrong devices.
func (a Allowed) Validate() error {
	var errs []error
	if a.CapsMajor == GPUMajor {
		errs = append(errs, fmt.Errorf("devcgroup: caps major %d is the GPU major: read it from /proc/devices (nvidia-caps)", a.CapsMajor))
	}
	if a.UVMMajor == GPUMajor || (a.UVMMajor != 0 && a.UVMMajor == a.CapsMajor) {
		errs = append(errs, fmt.Errorf("devcgroup: uvm major %d collides with the GPU or caps major: read it from /proc/devices (nvidia-uvm)", a.UVMMajor))
	}
	return errors.Join(errs...)
}

// Normalize returns a with minors sorted and deduplicated, so equal rules
// compare equal.
func (a Allowed) Normalize() Allowed {
	a.GPUMinors = sortedUnique(a.GPUMinors)
	a.CapMinors = sortedUnique(a.CapMinors)
	return a
}

// Equal reports whether a and b are the same rule.
func (a Allowed) Equal(b Allowed) bool {
	a, b = a.Normalize(), b.Normalize()
	return a.CapsMajor == b.CapsMajor && a.UVMMajor == b.UVMMajor &&
		slices.Equal(a.GPUMinors, b.GPUMinors) && slices.Equal(a.CapMinors, b.CapMinors)
}

// String is a short form for logs: "gpus=[1 3] caps=[12 13]".
func (a Allowed) String() string {
	a = a.Normalize()
	return fmt.Sprintf("gpus=%v caps=%v", a.GPUMinors, a.CapMinors)
}

func sortedUnique(in []uint32) []uint32 {
	out := slices.Clone(in)
	slices.Sort(out)
	return slices.Compact(out)
}

// Majors are the NVIDIA majors the kernel assigned at driver load.
type Majors struct {
	UVM  uint32 // nvidia-uvm; 0 when not loaded
	Caps uint32 // nvidia-caps; 0 when not loaded
}

// ParseProcDevices reads /proc/devices ("Character devices:" section) for
// the nvidia-uvm and nvidia-caps majors. Missing entries stay 0 (the
// driver is not loaded, as on a machine without GPUs).
func ParseProcDevices(r io.Reader) (Majors, error) {
	var m Majors
	sc := bufio.NewScanner(r)
	char := false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "Character devices:":
			char = true
			continue
		case strings.HasSuffix(line, "devices:"):
			char = false
			continue
		}
		if !char {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		n, err := strconv.ParseUint(f[0], 10, 32)
		if err != nil {
			return Majors{}, fmt.Errorf("devcgroup: /proc/devices line %q: %w", line, err)
		}
		switch f[1] {
		case "nvidia-uvm":
			m.UVM = uint32(n)
		case "nvidia-caps":
			m.Caps = uint32(n)
		}
	}
	if err := sc.Err(); err != nil {
		return Majors{}, fmt.Errorf("devcgroup: read /proc/devices: %w", err)
	}
	return m, nil
}

// CapMinor returns the nvidia-caps minor of a MIG access capability, as
// the driver numbers them in /proc/driver/nvidia-caps/mig-minors: 1 and 2
// are config and monitor, then per GPU minor g 15 GPU instances of 9 caps
// each (the GI's access cap, then its 8 compute instances'). ci < 0 means
// the GI's own cap ("gpu<g>/gi<gi>/access"); otherwise
// "gpu<g>/gi<gi>/ci<ci>/access".
func CapMinor(gpuMinor, gi, ci int) uint32 {
	const perGI, perGPU = 9, 15 * 9
	m := 3 + gpuMinor*perGPU + gi*perGI
	if ci >= 0 {
		m += 1 + ci
	}
	return uint32(m)
}

// ParseMIGMinors reads /proc/driver/nvidia-caps/mig-minors ("gpu0/gi1/access
// 12" per line) into a map from the path to the minor, for nodes whose
// driver numbers caps differently from [CapMinor].
func ParseMIGMinors(r io.Reader) (map[string]uint32, error) {
	out := map[string]uint32{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		n, err := strconv.ParseUint(f[1], 10, 32)
		if err != nil {
			return nil, fmt.Errorf("devcgroup: mig-minors line %q: %w", sc.Text(), err)
		}
		out[f[0]] = uint32(n)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("devcgroup: read mig-minors: %w", err)
	}
	return out, nil
}
