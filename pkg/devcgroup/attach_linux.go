package devcgroup

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Probe reports whether this kernel runs cgroup device programs and this
// process may load them. A nil error means [Attach] can work; otherwise
// the error wraps [ErrUnsupported] and says why ("not available: ...").
func Probe() error {
	err := features.HaveProgramType(ebpf.CGroupDevice)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ebpf.ErrNotSupported):
		return fmt.Errorf("%w: the kernel has no BPF_PROG_TYPE_CGROUP_DEVICE (%w); use cgroup v1 devices.deny or a kernel >= 4.15 with CONFIG_CGROUP_BPF", ErrUnsupported, err)
	case errors.Is(err, unix.EPERM), errors.Is(err, os.ErrPermission):
		return fmt.Errorf("%w: loading BPF programs was refused (%w); run the agent as root or with CAP_BPF and CAP_SYS_ADMIN", ErrUnsupported, err)
	}
	return fmt.Errorf("%w: probing BPF_PROG_TYPE_CGROUP_DEVICE failed: %w", ErrUnsupported, err)
}

// Handle is one device filter attached to one cgroup. Close detaches it;
// Update swaps its rule in place (no moment without a filter). A Handle is
// safe for concurrent use.
type Handle struct {
	dir string

	mu      sync.Mutex
	allowed Allowed
	prog    *ebpf.Program
	link    link.Link // bpf_link, when the kernel has it
	cgroup  *os.File  // legacy PROG_ATTACH: the cgroup it is attached to
	closed  bool
}

// Attach loads the filter for a and attaches it to the cgroup v2 directory
// dir (an absolute path under the cgroup2 mount) so that it runs next to
// the programs already there (bpf_link, or BPF_PROG_ATTACH with
// BPF_F_ALLOW_MULTI on kernels before 5.7). It never replaces the
// runtime's program: if that program was attached exclusively, Attach
// fails and says so.
func Attach(dir string, a Allowed) (*Handle, error) {
	prog, err := load(a)
	if err != nil {
		return nil, fmt.Errorf("devcgroup: %s: %w", dir, err)
	}
	h := &Handle{dir: dir, allowed: a.Normalize(), prog: prog}
	if err := h.attach(); err != nil {
		prog.Close()
		return nil, err
	}
	return h, nil
}

func load(a Allowed) (*ebpf.Program, error) {
	insns, err := Program(a)
	if err != nil {
		return nil, err
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "gpud_devices",
		Type:         ebpf.CGroupDevice,
		License:      "Apache-2.0",
		Instructions: insns,
	})
	if err != nil {
		return nil, fmt.Errorf("load device program (%s): %w", a, err)
	}
	return prog, nil
}

func (h *Handle) attach() error {
	f, err := os.Open(h.dir)
	if err != nil {
		return fmt.Errorf("devcgroup: open cgroup %s: %w (is it a cgroup v2 directory that still exists?)", h.dir, err)
	}
	l, err := link.AttachRawLink(link.RawLinkOptions{Target: int(f.Fd()), Program: h.prog, Attach: ebpf.AttachCGroupDevice})
	if err == nil {
		f.Close()
		h.link = l
		return nil
	}
	if !errors.Is(err, link.ErrNotSupported) {
		f.Close()
		return fmt.Errorf("devcgroup: attach to cgroup %s: %w (a program attached without BPF_F_ALLOW_MULTI there or above refuses others: check the runtime's cgroup driver)", h.dir, err)
	}
	err = link.RawAttachProgram(link.RawAttachProgramOptions{Target: int(f.Fd()), Program: h.prog, Attach: ebpf.AttachCGroupDevice, Flags: unix.BPF_F_ALLOW_MULTI})
	if err != nil {
		f.Close()
		return fmt.Errorf("devcgroup: attach to cgroup %s with BPF_F_ALLOW_MULTI: %w (a program attached exclusively there or above refuses others)", h.dir, err)
	}
	h.cgroup = f
	return nil
}

// Dir is the cgroup directory the filter is attached to.
func (h *Handle) Dir() string { return h.dir }

// Allowed is the rule the filter enforces now.
func (h *Handle) Allowed() Allowed {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.allowed
}

// Update replaces the filter's rule with a: the new program is attached
// before the old one goes, so the cgroup is never unfiltered.
func (h *Handle) Update(a Allowed) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return fmt.Errorf("devcgroup: update %s: handle closed", h.dir)
	}
	if h.allowed.Equal(a) {
		return nil
	}
	prog, err := load(a)
	if err != nil {
		return fmt.Errorf("devcgroup: %s: %w", h.dir, err)
	}
	if h.link != nil {
		if err := h.link.Update(prog); err != nil {
			prog.Close()
			return fmt.Errorf("devcgroup: update program on cgroup %s: %w", h.dir, err)
		}
	} else {
		err := link.RawAttachProgram(link.RawAttachProgramOptions{Target: int(h.cgroup.Fd()), Program: prog, Attach: ebpf.AttachCGroupDevice, Flags: unix.BPF_F_ALLOW_MULTI})
		if err != nil {
			prog.Close()
			return fmt.Errorf("devcgroup: attach new program to cgroup %s: %w", h.dir, err)
		}
		if err := detachRaw(h.cgroup, h.prog); err != nil {
			// Both run now; the new rule holds (both must allow), so
			// report it without undoing.
			h.prog.Close()
			h.prog, h.allowed = prog, a.Normalize()
			return fmt.Errorf("devcgroup: detach old program from cgroup %s: %w", h.dir, err)
		}
	}
	h.prog.Close()
	h.prog, h.allowed = prog, a.Normalize()
	return nil
}

// Close detaches the filter. A cgroup that was removed already (the
// container ended) is not an error. Close is idempotent.
func (h *Handle) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	h.closed = true
	defer h.prog.Close()
	if h.link != nil {
		if err := h.link.Close(); err != nil {
			return fmt.Errorf("devcgroup: detach from cgroup %s: %w", h.dir, err)
		}
		return nil
	}
	defer h.cgroup.Close()
	if err := detachRaw(h.cgroup, h.prog); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("devcgroup: detach from cgroup %s: %w", h.dir, err)
	}
	return nil
}

func detachRaw(cgroup *os.File, prog *ebpf.Program) error {
	return link.RawDetachProgram(link.RawDetachProgramOptions{Target: int(cgroup.Fd()), Program: prog, Attach: ebpf.AttachCGroupDevice})
}
