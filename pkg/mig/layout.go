package mig

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/gpud/gpud/internal/fileio"
	"github.com/gpud/gpud/internal/strictyaml"
)

// Bounds on a layout file, checked at parse time. A GPU holds at most 7 MIG
// slices; the others are far above any real file and keep a bad one from
// costing the planner more than milliseconds.
const (
	// MaxSlicesPerGPU is the most MIG slices one entry may ask of a GPU.
	MaxSlicesPerGPU = 7
	// MaxLayoutConfigs bounds the named layouts under mig-configs.
	MaxLayoutConfigs = 1024
	// MaxLayoutEntries bounds the entries of one named layout.
	MaxLayoutEntries = 64
	// MaxLayoutDevices bounds the GPUs (or filters) one entry lists.
	MaxLayoutDevices = 256
)

// LayoutFile is a mig-parted configuration file:
//
//	version: v1
//	mig-configs:
//	  all-1g.5gb:
//	    - devices: all
//	      mig-enabled: true
//	      mig-devices: {"1g.5gb": 7}
//
// Besides mig-parted's fields an entry may name GPUs by UUID in devices and
// pin placements with mig-placements: ["3g.20gb@4", "1g.5gb@0"] (the
// per-GPU form).
type LayoutFile struct {
	Version    string                   `yaml:"version" json:"version"`
	MigConfigs map[string][]LayoutEntry `yaml:"mig-configs" json:"mig-configs"`
}

// LayoutEntry is one item of a named layout: which GPUs, and what they hold.
type LayoutEntry struct {
	// Devices is "all", or a list of GPU indices or UUIDs.
	Devices any `yaml:"devices" json:"devices"`
	// DeviceFilter limits the entry to GPUs with these PCI device IDs
	// ("0x20B010DE"), as in mig-parted; a string or a list.
	DeviceFilter any  `yaml:"device-filter,omitempty" json:"device-filter,omitempty"`
	MigEnabled   bool `yaml:"mig-enabled" json:"mig-enabled"`
	// MigDevices is how many instances of each profile the GPU holds.
	MigDevices map[string]int `yaml:"mig-devices,omitempty" json:"mig-devices,omitempty"`
	// MigPlacements lists instances with fixed placements, "PROFILE@START".
	MigPlacements []string `yaml:"mig-placements,omitempty" json:"mig-placements,omitempty"`
}

// Desired is a resolved layout: what each named GPU should hold. GPUs the
// layout does not mention are absent and left untouched.
type Desired struct {
	Config string           `json:"config"`
	GPUs   map[int]GPUWants `json:"gpus"`
}

// GPUWants is one GPU's desired MIG mode and slices.
type GPUWants struct {
	MIGEnabled bool   `json:"migEnabled"`
	Slices     []Want `json:"slices,omitempty"`
}

// Want is one desired slice; Start < 0 means anywhere it fits.
type Want struct {
	Profile string `json:"profile"`
	Start   int    `json:"start"`
}

func (w Want) String() string {
	if w.Start < 0 {
		return w.Profile
	}
	return fmt.Sprintf("%s@%d", w.Profile, w.Start)
}

// LoadLayoutFile reads (at most [fileio.MaxConfigBytes]) and parses a
// layout file; errors name the file.
func LoadLayoutFile(path string) (LayoutFile, error) {
	data, err := fileio.ReadFile(path, fileio.MaxConfigBytes)
	if err != nil {
		return LayoutFile{}, fmt.Errorf("mig: read layout file: %w", err)
	}
	f, err := ParseLayoutFile(data)
	if err != nil {
		return LayoutFile{}, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// ParseLayoutFile decodes a layout file strictly: unknown fields, a wrong
// version, counts that are not whole numbers, more slices than fit on a GPU
// ([MaxSlicesPerGPU]), too many configs or entries, and malformed entries
// are errors naming the field or config.
func ParseLayoutFile(data []byte) (LayoutFile, error) {
	var f LayoutFile
	if err := strictyaml.Unmarshal(data, &f); err != nil {
		return LayoutFile{}, fmt.Errorf("%w: %w", ErrBadLayout, err)
	}
	if f.Version != "v1" {
		return LayoutFile{}, fmt.Errorf("%w: version %q, want v1", ErrBadLayout, f.Version)
	}
	if len(f.MigConfigs) == 0 {
		return LayoutFile{}, fmt.Errorf("%w: no mig-configs", ErrBadLayout)
	}
	if len(f.MigConfigs) > MaxLayoutConfigs {
		return LayoutFile{}, fmt.Errorf("%w: %d mig-configs, want at most %d", ErrBadLayout, len(f.MigConfigs), MaxLayoutConfigs)
	}
	var errs []error
	for _, name := range f.Names() {
		if n := len(f.MigConfigs[name]); n > MaxLayoutEntries {
			errs = append(errs, fmt.Errorf("%w: mig-configs %q: %d entries, want at most %d", ErrBadLayout, name, n, MaxLayoutEntries))
			continue
		}
		for i, e := range f.MigConfigs[name] {
			if err := e.check(); err != nil {
				errs = append(errs, fmt.Errorf("%w: mig-configs %q entry %d: %w", ErrBadLayout, name, i, err))
			}
		}
	}
	return f, errors.Join(errs...)
}

// Names lists the layout names, sorted.
func (f LayoutFile) Names() []string {
	out := make([]string, 0, len(f.MigConfigs))
	for n := range f.MigConfigs {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (e LayoutEntry) check() error {
	if _, _, err := e.devices(); err != nil {
		return err
	}
	if _, err := e.filters(); err != nil {
		return err
	}
	if !e.MigEnabled && (len(e.MigDevices) > 0 || len(e.MigPlacements) > 0) {
		return errors.New("mig-devices given with mig-enabled: false")
	}
	if len(e.MigDevices) > 0 && len(e.MigPlacements) > 0 {
		return errors.New("give mig-devices or mig-placements, not both")
	}
	_, err := e.wants()
	return err
}

// devices returns the entry's GPU selection: all, or indices and UUIDs.
func (e LayoutEntry) devices() (all bool, sel []string, err error) {
	switch v := e.Devices.(type) {
	case string:
		if v == "all" {
			return true, nil, nil
		}
		return false, nil, fmt.Errorf("devices %q: want all or a list of GPU indices or UUIDs", v)
	case []any:
		if len(v) > MaxLayoutDevices {
			return false, nil, fmt.Errorf("devices lists %d GPUs, want at most %d", len(v), MaxLayoutDevices)
		}
		for _, d := range v {
			switch x := d.(type) {
			case uint64, int64, int:
				sel = append(sel, fmt.Sprint(x))
			case string:
				sel = append(sel, x)
			default:
				return false, nil, fmt.Errorf("devices item %v: want a GPU index or UUID", d)
			}
		}
		return false, sel, nil
	case nil:
		return false, nil, errors.New("devices is required: all or a list of GPU indices or UUIDs")
	}
	return false, nil, fmt.Errorf("devices %v: want all or a list of GPU indices or UUIDs", e.Devices)
}

func (e LayoutEntry) filters() ([]uint32, error) {
	var raw []string
	switch v := e.DeviceFilter.(type) {
	case nil:
		return nil, nil
	case string:
		raw = []string{v}
	case []any:
		if len(v) > MaxLayoutDevices {
			return nil, fmt.Errorf("device-filter lists %d IDs, want at most %d", len(v), MaxLayoutDevices)
		}
		for _, x := range v {
			raw = append(raw, fmt.Sprint(x))
		}
	default:
		return nil, fmt.Errorf("device-filter %v: want a PCI device ID like 0x20B010DE or a list", v)
	}
	out := make([]uint32, 0, len(raw))
	for _, s := range raw {
		id, err := strconv.ParseUint(strings.TrimPrefix(strings.ToLower(s), "0x"), 16, 32)
		if err != nil {
			return nil, fmt.Errorf("device-filter %q: want a PCI device ID like 0x20B010DE", s)
		}
		out = append(out, uint32(id))
	}
	return out, nil
}

// wants expands mig-devices (largest profile names first, for stable
// output) or mig-placements into slices, refusing more than
// [MaxSlicesPerGPU] before expanding anything.
func (e LayoutEntry) wants() ([]Want, error) {
	if n := len(e.MigPlacements); n > MaxSlicesPerGPU {
		return nil, fmt.Errorf("mig-placements lists %d slices, at most %d fit on a GPU", n, MaxSlicesPerGPU)
	}
	total := 0
	for name, n := range e.MigDevices {
		switch {
		case n < 0:
			return nil, fmt.Errorf("mig-devices %q: count %d is negative", name, n)
		case n > MaxSlicesPerGPU:
			return nil, fmt.Errorf("mig-devices %q: count %d, at most %d slices fit on a GPU", name, n, MaxSlicesPerGPU)
		}
		total += n
	}
	if total > MaxSlicesPerGPU {
		return nil, fmt.Errorf("mig-devices ask for %d slices, at most %d fit on a GPU", total, MaxSlicesPerGPU)
	}
	var out []Want
	if len(e.MigPlacements) > 0 {
		for _, s := range e.MigPlacements {
			prof, start, ok := strings.Cut(s, "@")
			n, err := strconv.Atoi(start)
			if !ok || err != nil || n < 0 || prof == "" {
				return nil, fmt.Errorf("mig-placements %q: want PROFILE@START, like 3g.20gb@4", s)
			}
			out = append(out, Want{Profile: prof, Start: n})
		}
		return out, nil
	}
	names := make([]string, 0, len(e.MigDevices))
	for n := range e.MigDevices {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		for range e.MigDevices[n] {
			out = append(out, Want{Profile: n, Start: -1})
		}
	}
	return out, nil
}
