package mig

import (
	"fmt"
	"sort"
	"strings"

	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Placement is where a GPU instance sits: memory slices [Start, Start+Size).
type Placement struct {
	Start int `json:"start"`
	Size  int `json:"size"`
}

func (p Placement) String() string { return fmt.Sprintf("%d-%d", p.Start, p.Start+p.Size-1) }

// Profile is one GPU-instance profile of one GPU as its driver reports it,
// with a single compute instance spanning the whole GPU instance (the form
// the device plugin advertises as nvidia.com/mig-<Name>).
type Profile struct {
	// Name is go-nvlib's name for it: "1g.5gb", "1g.5gb+me", "3g.40gb".
	Name string `json:"name"`
	// Index is go-nvml's GPU_INSTANCE_PROFILE_* constant, the argument of
	// GetGpuInstanceProfileInfo.
	Index int `json:"index"`
	// ID is the driver's profile ID (GpuInstanceProfileInfo.Id); it differs
	// from Index on real drivers.
	ID uint32 `json:"id"`
	// Slices is the compute slices the profile takes.
	Slices int `json:"slices"`
	// MemoryMiB is the instance's framebuffer.
	MemoryMiB uint64 `json:"memoryMiB"`
	// MaxCount is how many instances of the profile fit on an empty GPU.
	MaxCount int `json:"maxCount"`
	// Placements are the allowed placements, from
	// GetGpuInstancePossiblePlacements.
	Placements []Placement `json:"placements"`
	info       nvml.GpuInstanceProfileInfo
	nvlib      device.MigProfile
}

// Catalog is the MIG profiles one GPU supports, read at run time.
type Catalog struct {
	Profiles []Profile `json:"profiles"`
	// MemorySlices and ComputeSlices are the GPU's totals (8 and 7 on A100
	// and H100).
	MemorySlices  int `json:"memorySlices"`
	ComputeSlices int `json:"computeSlices"`
}

// ciIndexForSlices is the compute-instance profile spanning a GPU instance
// of that many slices, which go-nvlib needs to name the profile.
var ciIndexForSlices = map[int]int{
	1: nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE,
	2: nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE,
	3: nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE,
	4: nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE,
	6: nvml.COMPUTE_INSTANCE_PROFILE_6_SLICE,
	7: nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE,
	8: nvml.COMPUTE_INSTANCE_PROFILE_8_SLICE,
}

// ReadCatalog asks one GPU for its GPU-instance profiles and their
// placements. A GPU without MIG gives an empty catalog and no error.
func ReadCatalog(dev nvml.Device, devlib device.Interface) (Catalog, error) {
	var c Catalog
	mem, ret := dev.GetMemoryInfo()
	if err := nvmlErr(ret); err != nil {
		return c, fmt.Errorf("mig: memory size: %w", err)
	}
	seen := map[string]bool{}
	for idx := range nvml.GPU_INSTANCE_PROFILE_COUNT {
		info, ret := dev.GetGpuInstanceProfileInfo(idx)
		if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue
		}
		if err := nvmlErr(ret); err != nil {
			return c, fmt.Errorf("mig: profile %d info: %w", idx, err)
		}
		ciIdx, ok := ciIndexForSlices[int(info.SliceCount)]
		if !ok {
			continue
		}
		name, err := devlib.NewMigProfile(idx, ciIdx, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, info.MemorySizeMB, mem.Total)
		if err != nil {
			continue // a profile go-nvlib cannot name is not one a layout can ask for
		}
		pls, ret := dev.GetGpuInstancePossiblePlacements(&info)
		if err := nvmlErr(ret); err != nil {
			return c, fmt.Errorf("mig: profile %s placements: %w", name, err)
		}
		p := Profile{Name: name.String(), Index: idx, ID: info.Id, Slices: int(info.SliceCount),
			MemoryMiB: info.MemorySizeMB, MaxCount: int(info.InstanceCount), info: info, nvlib: name}
		if seen[p.Name] {
			continue
		}
		seen[p.Name] = true
		for _, pl := range pls {
			p.Placements = append(p.Placements, Placement{Start: int(pl.Start), Size: int(pl.Size)})
			c.MemorySlices = max(c.MemorySlices, int(pl.Start+pl.Size))
		}
		c.ComputeSlices = max(c.ComputeSlices, p.Slices)
		c.Profiles = append(c.Profiles, p)
	}
	sort.SliceStable(c.Profiles, func(i, j int) bool {
		a, b := c.Profiles[i], c.Profiles[j]
		if a.Slices != b.Slices {
			return a.Slices < b.Slices
		}
		return a.MemoryMiB < b.MemoryMiB
	})
	return c, nil
}

// Lookup finds a profile by name as users write it ("1g.5gb", "1g.5gb+me",
// or the 1c.1g.5gb long form), matched with go-nvlib's parser. The error
// names the profile and lists what the GPU offers.
func (c Catalog) Lookup(name string) (Profile, error) {
	for _, p := range c.Profiles {
		if p.Name == name {
			return p, nil
		}
	}
	for _, p := range c.Profiles {
		if p.nvlib != nil && p.nvlib.Matches(name) {
			return p, nil
		}
	}
	return Profile{}, fmt.Errorf("%w %q: this GPU offers %s", ErrUnknownProfile, name, strings.Join(c.Names(), ", "))
}

// Names lists the profile names, smallest first.
func (c Catalog) Names() []string {
	out := make([]string, len(c.Profiles))
	for i, p := range c.Profiles {
		out[i] = p.Name
	}
	return out
}
