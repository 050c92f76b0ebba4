package timeslice

import (
	"errors"
	"fmt"
	"math/bits"
	"sort"
	"strconv"
	"strings"

	"github.com/gpud/gpud/pkg/gpu"
)

// Bounds on a sharing config. They are far above any real node and keep a
// config from a user or a peer from costing the agent more than a few
// microseconds per device.
const (
	// MaxDeviceKeys bounds the entries under devices: a node has at most a
	// few dozen GPUs and a handful of MIG devices each.
	MaxDeviceKeys = 1024
	// MaxMemoryMiB bounds one share's memory (16 TiB): no GPU has more.
	MaxMemoryMiB = 16 << 20
)

// KeyError is a validation error of one entry of a [Config]: Device is the
// key under devices, or empty for the default. It wraps ErrInvalid.
type KeyError struct {
	Device string
	Err    error
}

func (e *KeyError) Error() string {
	if e.Device == "" {
		return "default: " + e.Err.Error()
	}
	return fmt.Sprintf("device %q: %v", e.Device, e.Err)
}

func (e *KeyError) Unwrap() error { return e.Err }

// ValidateFor checks the config against the devices of inv: every device
// key must name a GPU (UUID or index) or MIG device of inv, every device's
// shares must fit its memory, and the default must fit every whole GPU it
// applies to. Errors wrap ErrInvalid and name the key.
func (c Config) ValidateFor(inv gpu.Inventory) error {
	known := map[string]uint64{}
	for _, g := range inv.GPUs {
		known[g.UUID] = g.MemoryBytes >> 20
		known[strconv.Itoa(g.Index)] = g.MemoryBytes >> 20
		for _, m := range g.MIGDevices {
			known[m.UUID] = m.MemoryBytes >> 20
		}
	}
	var defaultTargets []gpu.GPU
	if c.Default != nil {
		for _, g := range inv.GPUs {
			_, byUUID := c.Devices[g.UUID]
			_, byIndex := c.Devices[strconv.Itoa(g.Index)]
			if !byUUID && !byIndex {
				defaultTargets = append(defaultTargets, g)
			}
		}
	}
	errs := c.validate(known)
	if c.Default != nil {
		for _, g := range defaultTargets {
			if err := c.Default.Validate(g.MemoryBytes >> 20); err != nil {
				errs = append(errs, &KeyError{Err: fmt.Errorf("applied to GPU %d %s: %w; shrink the default or list that GPU under devices", g.Index, g.UUID, err)})
				break
			}
		}
	}
	return errors.Join(errs...)
}

// validate checks the config's syntax and bounds and, when known (device
// key to memory in MiB, 0 unknown) is not nil, that every device key is
// known and its shares fit its memory.
func (c Config) validate(known map[string]uint64) []error {
	var errs []error
	if c.Default != nil {
		if err := c.Default.Validate(0); err != nil {
			errs = append(errs, &KeyError{Err: err})
		}
	}
	if len(c.Devices) > MaxDeviceKeys {
		// Say so once instead of checking (and reporting) every key.
		return append(errs, fmt.Errorf("%w: %d device keys, want at most %d: list only the GPUs and MIG devices of this node",
			ErrInvalid, len(c.Devices), MaxDeviceKeys))
	}
	keys := make([]string, 0, len(c.Devices))
	for k := range c.Devices {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := checkKey(k, known); err != nil {
			errs = append(errs, &KeyError{Device: k, Err: err})
			continue
		}
		if err := c.Devices[k].Validate(known[k]); err != nil {
			errs = append(errs, &KeyError{Device: k, Err: err})
		}
	}
	return errs
}

// checkKey checks that a device key is a GPU UUID, MIG UUID or GPU index
// and, when known is not nil, that the node has that device.
func checkKey(k string, known map[string]uint64) error {
	isUUID := strings.HasPrefix(k, "GPU-") || strings.HasPrefix(k, "MIG-")
	if !isUUID {
		n, err := strconv.Atoi(k)
		if err != nil || n < 0 || strconv.Itoa(n) != k {
			return fmt.Errorf("%w: want a GPU UUID (GPU-...), a MIG UUID (MIG-...) or a GPU index (0, 1, ...)", ErrInvalid)
		}
	}
	if known == nil {
		return nil
	}
	if _, ok := known[k]; !ok {
		what := "GPU"
		if strings.HasPrefix(k, "MIG-") {
			what = "MIG device"
		}
		return fmt.Errorf("%w: no %s %s on this node; `gpud inventory` lists its UUIDs and indexes", ErrInvalid, what, k)
	}
	return nil
}

// sumMiB adds memory sizes, reporting overflow.
func sumMiB(a, b uint64) (uint64, bool) {
	s, carry := bits.Add64(a, b, 0)
	return s, carry == 0
}
