package memlimit

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Sentinel errors.
var (
	// ErrBadFraction: a fraction without a request, with a limit below its
	// request, or on a GPU the manager was not given.
	ErrBadFraction = errors.New("memlimit: bad fraction")
	// ErrSet: the driver refused to set or clear a limit.
	ErrSet = errors.New("memlimit: driver limit not set")
)

// Device is what the manager needs of a whole GPU's NVML handle;
// nvml.Device has it.
type Device interface {
	GetUUID() (string, nvml.Return)
	GetIndex() (int, nvml.Return)
	GetMigMode() (current, pending int, ret nvml.Return)
	GetMemoryInfo() (nvml.Memory, nvml.Return)
	GetMemoryLimits_v1(namespace string) (nvml.MemoryLimits_v1, nvml.Return)
	SetMemoryLimits_v1(namespace string, soft, hard uint64) nvml.Return
}

var _ Device = nvml.Device(nil)

// Config configures a [Manager].
type Config struct {
	// CgroupRoot is the cgroup2 mount (/sys/fs/cgroup), an absolute path;
	// empty means the node has no cgroup v2, so no GPU gets [ModeDriver].
	CgroupRoot string
	// DriverVersion is NVML's SystemGetDriverVersion, for the reasons.
	DriverVersion string
	// MPS is true when fractions run under MPS daemons (--mps).
	MPS bool
	// Off turns driver limits off (--memory-limits=off): no GPU gets
	// [ModeDriver], whatever its driver has.
	Off bool
	// Devices are the node's GPUs, whole-GPU handles.
	Devices []Device
}

// Manager knows each GPU's mode and sets and clears containers' driver
// limits on the GPUs in [ModeDriver]. Modes are decided once, at [New]:
// a GPU that enters MIG mode later has its Set calls refused by the
// driver (ERROR_NOT_SUPPORTED, wrapped in [ErrSet]). Safe for concurrent
// use: it keeps no state beyond the decisions, and the driver serializes
// the limits.
type Manager struct {
	root      string
	decisions []Decision
	gpus      map[string]gpuEntry
}

type gpuEntry struct {
	dev  Device
	mode Mode
	// totalBytes is the GPU's memory, which caps a container's summed
	// hard limits; 0 when NVML did not say.
	totalBytes uint64
}

// New probes each GPU once: its MIG mode, and GetMemoryLimits_v1 on the
// cgroup2 mount (a cgroup that normally has no limits: ERROR_NOT_FOUND
// says the call works).
func New(cfg Config) (*Manager, error) {
	if cfg.CgroupRoot != "" && !filepath.IsAbs(cfg.CgroupRoot) {
		return nil, fmt.Errorf("memlimit: cgroup root %q: want the absolute path of the cgroup2 mount", cfg.CgroupRoot)
	}
	m := &Manager{root: cfg.CgroupRoot, gpus: map[string]gpuEntry{}}
	for i, dev := range cfg.Devices {
		uuid, ret := dev.GetUUID()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("memlimit: GPU %d of %d: read UUID: %w", i, len(cfg.Devices), ret)
		}
		f := Facts{UUID: uuid, DriverVersion: cfg.DriverVersion, CgroupV2: cfg.CgroupRoot != "", MPS: cfg.MPS, Off: cfg.Off}
		if cur, _, ret := dev.GetMigMode(); ret == nvml.SUCCESS {
			f.MIG = cur == nvml.DEVICE_MIG_ENABLE
		}
		if f.CgroupV2 && !f.Off {
			_, f.Probe = dev.GetMemoryLimits_v1(cfg.CgroupRoot)
		}
		d := Decide(f)
		d.Index = -1
		if idx, ret := dev.GetIndex(); ret == nvml.SUCCESS {
			d.Index = idx
		}
		m.decisions = append(m.decisions, d)
		e := gpuEntry{dev: dev, mode: d.Mode}
		if mem, ret := dev.GetMemoryInfo(); ret == nvml.SUCCESS {
			e.totalBytes = mem.Total
		}
		m.gpus[uuid] = e
	}
	sort.Slice(m.decisions, func(i, j int) bool { return m.decisions[i].UUID < m.decisions[j].UUID })
	return m, nil
}

// Decisions returns each GPU's mode and reason, sorted by UUID.
func (m *Manager) Decisions() []Decision { return append([]Decision(nil), m.decisions...) }

// ModeNames returns each GPU's mode by UUID, as the strings the DRA
// driver publishes (its memoryLimitMode attribute).
func (m *Manager) ModeNames() map[string]string {
	out := make(map[string]string, len(m.decisions))
	for _, d := range m.decisions {
		out[d.UUID] = string(d.Mode)
	}
	return out
}

// Fraction is a container's share of one GPU's memory.
type Fraction struct {
	GPUUUID string
	// RequestBytes is the claim's memory capacity: the soft limit, what
	// is guaranteed. Required.
	RequestBytes uint64
	// LimitBytes is the hard limit, at least RequestBytes; 0 means
	// RequestBytes (no borrowing).
	LimitBytes uint64
}

// Set sets a container's limits on the GPUs of its fractions that are in
// [ModeDriver]; cgroup is the container's path in the cgroup2 hierarchy
// ("/kubepods.slice/..."). Fractions of one GPU add up. It returns the
// UUIDs it set, sorted. The summed hard limit of one GPU is capped at its
// memory (several fractions may each borrow up to the whole GPU, and the
// driver refuses a hard limit past it). Bad fractions fail before any
// limit is set; when
// the driver refuses one GPU, the limits this call set are cleared again,
// so the container is limited on all of its driver-mode GPUs or on none.
func (m *Manager) Set(cgroup string, fractions []Fraction) ([]string, error) {
	type sum struct{ soft, hard uint64 }
	per := map[string]sum{}
	for _, f := range fractions {
		g, ok := m.gpus[f.GPUUUID]
		switch {
		case !ok:
			return nil, fmt.Errorf("%w: GPU %s is not on this node", ErrBadFraction, f.GPUUUID)
		case f.RequestBytes == 0:
			return nil, fmt.Errorf("%w: GPU %s: no memory request", ErrBadFraction, f.GPUUUID)
		case f.LimitBytes != 0 && f.LimitBytes < f.RequestBytes:
			return nil, fmt.Errorf("%w: GPU %s: limit %d bytes is below the request of %d; set the limit to at least the request, or leave it out", ErrBadFraction, f.GPUUUID, f.LimitBytes, f.RequestBytes)
		case g.mode != ModeDriver:
			continue
		}
		hard := f.LimitBytes
		if hard == 0 {
			hard = f.RequestBytes
		}
		s := per[f.GPUUUID]
		s.soft += f.RequestBytes
		s.hard += hard
		per[f.GPUUUID] = s
	}
	uuids := make([]string, 0, len(per))
	for u := range per {
		uuids = append(uuids, u)
	}
	sort.Strings(uuids)
	ns := m.namespace(cgroup)
	for i, u := range uuids {
		s := per[u]
		if total := m.gpus[u].totalBytes; total > 0 && s.hard > total {
			s.hard = max(total, s.soft)
		}
		if ret := m.gpus[u].dev.SetMemoryLimits_v1(ns, s.soft, s.hard); ret != nvml.SUCCESS {
			err := fmt.Errorf("%w: GPU %s, cgroup %s, soft %d, hard %d bytes: %w", ErrSet, u, ns, s.soft, s.hard, ret)
			if cerr := m.Clear(cgroup, uuids[:i]); cerr != nil {
				err = fmt.Errorf("%w; clearing the GPUs already set failed too: %w", err, cerr)
			}
			return nil, err
		}
	}
	return uuids, nil
}

// Clear removes a container's limits from the given GPUs (those not in
// [ModeDriver] or not on the node are skipped). A cgroup that is gone has
// no limits left, so that is not an error.
func (m *Manager) Clear(cgroup string, uuids []string) error {
	ns := m.namespace(cgroup)
	var errs []error
	for _, u := range uuids {
		g, ok := m.gpus[u]
		if !ok || g.mode != ModeDriver {
			continue
		}
		switch ret := g.dev.SetMemoryLimits_v1(ns, 0, nvml.DEVICE_MEMORY_LIMIT_MAX); ret {
		case nvml.SUCCESS, nvml.ERROR_OPERATING_SYSTEM:
		default:
			errs = append(errs, fmt.Errorf("%w: clear GPU %s, cgroup %s: %w", ErrSet, u, ns, ret))
		}
	}
	return errors.Join(errs...)
}

// namespace is the driver's name for a container: its cgroup directory
// under the mount. The path is kept under the mount whatever it holds.
func (m *Manager) namespace(cgroup string) string {
	return filepath.Join(m.root, filepath.Clean("/"+cgroup))
}
