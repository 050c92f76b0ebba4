// Package timeslice models GPU sharing: a GPU (or MIG device) split into
// replicas or fractional shares, each advertised to the kubelet as its own
// device `<uuid>::<n>`, with the MPS limits that make a share real; the
// sharing runtime acts on those models through interfaces and functions its
// callers pass in, and pkg/memwatch's memory watchdog checks pods against
// them. It does no I/O of its own and imports only the standard library,
// pkg/gpu and pkg/usage (the plain types of who uses a device, themselves
// standard-library only): `make purity` checks it.
package timeslice

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/gpud/gpud/pkg/gpu"
)

// replicaSep separates a device UUID from its share number in device IDs.
const replicaSep = "::"

// ReplicaID is the device-plugin ID of share n of the device uuid.
func ReplicaID(uuid string, n int) string { return uuid + replicaSep + strconv.Itoa(n) }

// ParseReplicaID splits `<uuid>::<n>`; ok is false for a plain device ID.
func ParseReplicaID(id string) (uuid string, n int, ok bool) {
	i := strings.LastIndex(id, replicaSep)
	if i < 0 {
		return id, 0, false
	}
	n, err := strconv.Atoi(id[i+len(replicaSep):])
	if err != nil || n < 0 {
		return id, 0, false
	}
	return id[:i], n, true
}

// Share is one slice of a shared device: a memory request and limit and a
// compute percentage, enforced through MPS (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT,
// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE), by the driver where it enforces
// memory limits (soft = MemoryMiB, hard = [Share.LimitMiB]) and watched by
// the memory watchdog.
type Share struct {
	// MemoryMiB is the share's framebuffer request: what it is guaranteed
	// (the shares' requests fit the device) and, without MemoryLimitMiB,
	// its limit; 0 means no limit.
	MemoryMiB uint64 `json:"memoryMiB,omitempty" yaml:"memoryMiB,omitempty"`
	// MemoryLimitMiB lets the share borrow above its request up to this
	// hard limit (the driver may evict a borrower under pressure): at least
	// MemoryMiB, which it needs, and at most the device's memory. 0 means
	// MemoryMiB.
	MemoryLimitMiB uint64 `json:"memoryLimitMiB,omitempty" yaml:"memoryLimitMiB,omitempty"`
	// ComputePercent is the share of SMs, 1 to 100; 0 means no limit.
	ComputePercent int `json:"computePercent,omitempty" yaml:"computePercent,omitempty"`
}

// Sharing says how one device is shared: either Replicas equal time-sliced
// copies, or an explicit list of Shares (unequal fractions allowed), or not
// at all with Exclusive.
type Sharing struct {
	// Replicas splits the device into this many equal shares (2 to 64).
	Replicas int `json:"replicas,omitempty" yaml:"replicas,omitempty"`
	// Shares lists unequal shares; their memory and compute must fit the device.
	Shares []Share `json:"shares,omitempty" yaml:"shares,omitempty"`
	// LimitMemory, with Replicas, gives each replica memory/Replicas as its
	// limit; without it replicas only time-slice, as NVIDIA's plugin does.
	LimitMemory bool `json:"limitMemory,omitempty" yaml:"limitMemory,omitempty"`
	// Exclusive keeps the device whole: no replicas or shares, and through
	// DRA no memory fractions (the GPU is not multi-allocatable). It
	// contradicts Replicas, Shares and LimitMemory. On the default it
	// applies to every whole GPU not listed under devices.
	Exclusive bool `json:"exclusive,omitempty" yaml:"exclusive,omitempty"`
}

// Config is the node's sharing: per device, keyed by GPU UUID, MIG UUID, or
// GPU index ("0"), with Default for every whole GPU not listed.
type Config struct {
	Default *Sharing           `json:"default,omitempty" yaml:"default,omitempty"`
	Devices map[string]Sharing `json:"devices,omitempty" yaml:"devices,omitempty"`
}

// MaxReplicas bounds the shares of one device.
const MaxReplicas = 64

// ErrInvalid is wrapped by every validation error.
var ErrInvalid = errors.New("timeslice: invalid sharing")

// Validate checks one device's sharing against its memory (0: unknown).
func (s Sharing) Validate(memoryMiB uint64) error {
	switch {
	case s.Exclusive && (s.Replicas != 0 || len(s.Shares) != 0 || s.LimitMemory):
		return fmt.Errorf("%w: exclusive keeps the device whole, which contradicts replicas, shares and limitMemory: set exclusive or those", ErrInvalid)
	case s.Replicas != 0 && len(s.Shares) != 0:
		return fmt.Errorf("%w: set replicas or shares, not both", ErrInvalid)
	case s.Replicas < 0 || s.Replicas == 1 || s.Replicas > MaxReplicas:
		return fmt.Errorf("%w: replicas %d, want 2 to %d", ErrInvalid, s.Replicas, MaxReplicas)
	case len(s.Shares) > MaxReplicas:
		return fmt.Errorf("%w: %d shares, want at most %d", ErrInvalid, len(s.Shares), MaxReplicas)
	}
	var mem uint64
	compute := 0
	for i, sh := range s.Shares {
		if sh.ComputePercent < 0 || sh.ComputePercent > 100 {
			return fmt.Errorf("%w: share %d: computePercent %d, want 0 to 100", ErrInvalid, i, sh.ComputePercent)
		}
		if sh.MemoryMiB > MaxMemoryMiB {
			return fmt.Errorf("%w: share %d: memoryMiB %d is more than any GPU has (at most %d)", ErrInvalid, i, sh.MemoryMiB, MaxMemoryMiB)
		}
		if err := sh.validateLimit(memoryMiB); err != nil {
			return fmt.Errorf("%w: share %d: %w", ErrInvalid, i, err)
		}
		var ok bool
		if mem, ok = sumMiB(mem, sh.MemoryMiB); !ok {
			return fmt.Errorf("%w: share %d: the shares' memoryMiB overflows", ErrInvalid, i)
		}
		compute += sh.ComputePercent
	}
	if memoryMiB > 0 && mem > memoryMiB {
		return fmt.Errorf("%w: shares ask for %d MiB, the device has %d MiB", ErrInvalid, mem, memoryMiB)
	}
	if compute > 100 {
		return fmt.Errorf("%w: shares ask for %d%% compute, more than 100%%", ErrInvalid, compute)
	}
	return nil
}

// validateLimit checks the share's memoryLimitMiB against its request and
// the device's memory (0: unknown).
func (sh Share) validateLimit(memoryMiB uint64) error {
	switch l := sh.MemoryLimitMiB; {
	case l == 0:
		return nil
	case sh.MemoryMiB == 0:
		return fmt.Errorf("memoryLimitMiB %d without memoryMiB: set the request it borrows above", l)
	case l < sh.MemoryMiB:
		return fmt.Errorf("memoryLimitMiB %d is below memoryMiB %d: set it to at least the request, or leave it out", l, sh.MemoryMiB)
	case l > MaxMemoryMiB:
		return fmt.Errorf("memoryLimitMiB %d is more than any GPU has (at most %d)", l, MaxMemoryMiB)
	case memoryMiB > 0 && l > memoryMiB:
		return fmt.Errorf("memoryLimitMiB %d is more than the device has (%d MiB)", l, memoryMiB)
	}
	return nil
}

// LimitMiB is the share's hard memory limit: MemoryLimitMiB, or MemoryMiB
// when it has none (0: no limit).
func (sh Share) LimitMiB() uint64 { return max(sh.MemoryLimitMiB, sh.MemoryMiB) }

// Validate checks every entry; each problem is a [*KeyError]. memoryMiB
// maps device keys (GPU UUID, GPU index, MIG UUID) to their memory; when it
// is not nil, keys it lacks are refused and the default must fit the
// largest device. Nil checks syntax and bounds only. [Config.ValidateFor]
// is the precise check against an inventory.
func (c Config) Validate(memoryMiB map[string]uint64) error {
	if memoryMiB == nil {
		return errors.Join(c.validate(nil)...)
	}
	var largest uint64
	for _, m := range memoryMiB {
		largest = max(largest, m)
	}
	errs := c.validate(memoryMiB)
	if c.Default != nil && largest > 0 {
		if err := c.Default.Validate(largest); err != nil {
			errs = append(errs, &KeyError{Err: err})
		}
	}
	return errors.Join(errs...)
}

// For returns the sharing of a device by UUID or index key, and false when
// the device is not shared.
func (c Config) For(uuid string, index int) (Sharing, bool) {
	if s, ok := c.Devices[uuid]; ok {
		return s, s.Count() > 0
	}
	if s, ok := c.Devices[strconv.Itoa(index)]; ok {
		return s, s.Count() > 0
	}
	if c.Default != nil && !strings.HasPrefix(uuid, "MIG-") {
		return *c.Default, c.Default.Count() > 0
	}
	return Sharing{}, false
}

// ExclusiveOnly returns the GPUs of inv (by UUID) the config keeps whole:
// those whose entry, by UUID, else by index, else the default, says
// exclusive, as [Config.For] resolves entries. MIG devices are never
// shared through DRA and are not listed.
func (c Config) ExclusiveOnly(inv gpu.Inventory) map[string]bool {
	out := map[string]bool{}
	for _, g := range inv.GPUs {
		s, ok := c.Devices[g.UUID]
		if !ok {
			s, ok = c.Devices[strconv.Itoa(g.Index)]
		}
		if !ok && c.Default != nil {
			s = *c.Default
		}
		if s.Exclusive {
			out[g.UUID] = true
		}
	}
	return out
}

// HasMemoryLimits reports whether any share has a memory limit, that is,
// whether the memory watchdog has anything to check.
func (c Config) HasMemoryLimits() bool {
	all := make([]Sharing, 0, len(c.Devices)+1)
	if c.Default != nil {
		all = append(all, *c.Default)
	}
	for _, s := range c.Devices {
		all = append(all, s)
	}
	for _, s := range all {
		if s.Replicas > 0 && s.LimitMemory {
			return true
		}
		for _, sh := range s.Shares {
			if sh.MemoryMiB > 0 {
				return true
			}
		}
	}
	return false
}

// Count is the number of devices the sharing advertises.
func (s Sharing) Count() int {
	if len(s.Shares) > 0 {
		return len(s.Shares)
	}
	return s.Replicas
}

// ShareOf returns share n of a device with memoryMiB of framebuffer:
// the listed share, or an equal split of compute (and of memory with
// LimitMemory) for replicas.
func (s Sharing) ShareOf(n int, memoryMiB uint64) (Share, error) {
	if n < 0 || n >= s.Count() {
		return Share{}, fmt.Errorf("%w: share %d of %d", ErrInvalid, n, s.Count())
	}
	if len(s.Shares) > 0 {
		return s.Shares[n], nil
	}
	sh := Share{ComputePercent: max(1, 100/s.Replicas)}
	if s.LimitMemory {
		sh.MemoryMiB = memoryMiB / uint64(s.Replicas)
	}
	return sh, nil
}

// The MPS environment variables [Share.MPSEnv] sets, for the device plugin
// and anything else that reads or merges them.
const (
	EnvMPSActiveThreadPercentage = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
	EnvMPSPinnedDeviceMemLimit   = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
)

// MPSEnv is the container environment that enforces a share through MPS.
// deviceIndex is the device's index in the container (its
// NVIDIA_VISIBLE_DEVICES order), used by the per-device memory limit.
// MPS's pinned memory limit is a hard one, so it is [Share.LimitMiB].
func (sh Share) MPSEnv(deviceIndex int) map[string]string {
	env := map[string]string{}
	if sh.ComputePercent > 0 {
		env[EnvMPSActiveThreadPercentage] = strconv.Itoa(sh.ComputePercent)
	}
	if l := sh.LimitMiB(); l > 0 {
		env[EnvMPSPinnedDeviceMemLimit] = fmt.Sprintf("%d=%dM", deviceIndex, l)
	}
	return env
}
