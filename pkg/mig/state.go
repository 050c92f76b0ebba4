package mig

import (
	"fmt"
	"sort"

	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// State is the MIG layout of every GPU on the node, as NVML reports it.
type State struct {
	GPUs []GPUState `json:"gpus"`
}

// GPUState is one GPU's MIG mode, catalog and GPU instances.
type GPUState struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	Name  string `json:"name"`
	// PCIDeviceID is the combined device/vendor ID (0x20B010DE), what
	// mig-parted's device-filter matches.
	PCIDeviceID uint32 `json:"pciDeviceID"`
	MIGCapable  bool   `json:"migCapable"`
	MIGEnabled  bool   `json:"migEnabled"`
	// PendingEnabled is the mode that takes effect at the next GPU reset;
	// it differs from MIGEnabled while a change waits for a reset.
	PendingEnabled bool       `json:"pendingEnabled"`
	Catalog        Catalog    `json:"catalog"`
	Instances      []Instance `json:"instances,omitempty"`
}

// Pending reports whether a MIG mode change waits for a GPU reset.
func (g GPUState) Pending() bool { return g.MIGCapable && g.PendingEnabled != g.MIGEnabled }

// Instance is one GPU instance and its compute instances.
type Instance struct {
	GIID      int               `json:"giID"`
	Profile   string            `json:"profile"`
	Placement Placement         `json:"placement"`
	CIs       []ComputeInstance `json:"cis,omitempty"`
}

// ComputeInstance is a compute instance; each is one MIG device.
type ComputeInstance struct {
	ID int `json:"id"`
	// Full is true when it spans the whole GPU instance.
	Full bool   `json:"full"`
	UUID string `json:"uuid"`
}

// Complete reports whether the instance is one MIG device spanning the
// whole GPU instance, the form layouts describe. An apply interrupted
// between creating the GPU instance and its compute instance leaves one
// without CIs.
func (in Instance) Complete() bool { return len(in.CIs) == 1 && in.CIs[0].Full }

// UUIDs lists the MIG device UUIDs of the instance.
func (in Instance) UUIDs() []string {
	out := make([]string, 0, len(in.CIs))
	for _, ci := range in.CIs {
		out = append(out, ci.UUID)
	}
	return out
}

func (in Instance) String() string { return fmt.Sprintf("%s@%d", in.Profile, in.Placement.Start) }

// ReadState reads every GPU's MIG mode, catalog and instances.
func ReadState(lib nvml.Interface) (State, error) {
	devlib := device.New(lib)
	n, ret := lib.DeviceGetCount()
	if err := nvmlErr(ret); err != nil {
		return State{}, fmt.Errorf("mig: count GPUs: %w", err)
	}
	st := State{GPUs: make([]GPUState, 0, n)}
	for i := range n {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if err := nvmlErr(ret); err != nil {
			return State{}, fmt.Errorf("mig: gpu %d: %w", i, err)
		}
		g, err := readGPU(i, dev, devlib)
		if err != nil {
			return State{}, fmt.Errorf("mig: gpu %d: %w", i, err)
		}
		st.GPUs = append(st.GPUs, g)
	}
	return st, nil
}

func readGPU(i int, dev nvml.Device, devlib device.Interface) (GPUState, error) {
	g := GPUState{Index: i}
	var ret nvml.Return
	if g.UUID, ret = dev.GetUUID(); ret != nvml.SUCCESS {
		return g, fmt.Errorf("uuid: %w", ret)
	}
	g.Name, _ = dev.GetName()
	if p, ret := dev.GetPciInfo(); ret == nvml.SUCCESS {
		g.PCIDeviceID = p.PciDeviceId
	}
	cur, pend, ret := dev.GetMigMode()
	if ret == nvml.ERROR_NOT_SUPPORTED {
		return g, nil
	}
	if err := nvmlErr(ret); err != nil {
		return g, fmt.Errorf("mig mode: %w", err)
	}
	g.MIGCapable = true
	g.MIGEnabled, g.PendingEnabled = cur == nvml.DEVICE_MIG_ENABLE, pend == nvml.DEVICE_MIG_ENABLE
	cat, err := ReadCatalog(dev, devlib)
	if err != nil {
		return g, err
	}
	g.Catalog = cat
	if !g.MIGEnabled {
		return g, nil
	}
	uuids, err := migUUIDs(dev)
	if err != nil {
		return g, err
	}
	for _, p := range cat.Profiles {
		gis, ret := dev.GetGpuInstances(&p.info)
		if err := nvmlErr(ret); err != nil {
			return g, fmt.Errorf("gpu instances of %s: %w", p.Name, err)
		}
		for _, gi := range gis {
			in, err := readInstance(gi, p, uuids)
			if err != nil {
				return g, err
			}
			g.Instances = append(g.Instances, in)
		}
	}
	sort.Slice(g.Instances, func(a, b int) bool { return g.Instances[a].Placement.Start < g.Instances[b].Placement.Start })
	return g, nil
}

// migUUIDs maps (GPU instance, compute instance) IDs to MIG device UUIDs.
func migUUIDs(dev nvml.Device) (map[[2]int]string, error) {
	out := map[[2]int]string{}
	n, ret := dev.GetMaxMigDeviceCount()
	if err := nvmlErr(ret); err != nil {
		return nil, fmt.Errorf("max MIG devices: %w", err)
	}
	for i := range n {
		h, ret := dev.GetMigDeviceHandleByIndex(i)
		if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue
		}
		if err := nvmlErr(ret); err != nil {
			return nil, fmt.Errorf("MIG device %d: %w", i, err)
		}
		uuid, r1 := h.GetUUID()
		gi, r2 := h.GetGpuInstanceId()
		ci, r3 := h.GetComputeInstanceId()
		if err := nvmlErr(firstErr(r1, r2, r3)); err != nil {
			return nil, fmt.Errorf("MIG device %d: %w", i, err)
		}
		out[[2]int{gi, ci}] = uuid
	}
	return out, nil
}

func readInstance(gi nvml.GpuInstance, p Profile, uuids map[[2]int]string) (Instance, error) {
	info, ret := gi.GetInfo()
	if err := nvmlErr(ret); err != nil {
		return Instance{}, fmt.Errorf("gpu instance info: %w", err)
	}
	in := Instance{GIID: int(info.Id), Profile: p.Name, Placement: Placement{Start: int(info.Placement.Start), Size: int(info.Placement.Size)}}
	cis, err := computeInstances(gi)
	if err != nil {
		return in, fmt.Errorf("gpu instance %d: %w", in.GIID, err)
	}
	for _, c := range cis {
		cinfo, ret := c.ci.GetInfo()
		if err := nvmlErr(ret); err != nil {
			return in, fmt.Errorf("gpu instance %d compute instance info: %w", in.GIID, err)
		}
		in.CIs = append(in.CIs, ComputeInstance{ID: int(cinfo.Id), Full: int(c.profile.SliceCount) == p.Slices,
			UUID: uuids[[2]int{in.GIID, int(cinfo.Id)}]})
	}
	sort.Slice(in.CIs, func(a, b int) bool { return in.CIs[a].ID < in.CIs[b].ID })
	return in, nil
}

// profiledCI is a compute instance with the profile it was created from.
type profiledCI struct {
	ci      nvml.ComputeInstance
	profile nvml.ComputeInstanceProfileInfo
}

// computeInstances lists every compute instance of gi (NVML lists them per
// compute profile): the state reader and the destroyer both walk them.
func computeInstances(gi nvml.GpuInstance) ([]profiledCI, error) {
	var out []profiledCI
	for idx := range nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
		info, ret := gi.GetComputeInstanceProfileInfo(idx, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret != nvml.SUCCESS {
			continue
		}
		cis, ret := gi.GetComputeInstances(&info)
		if err := nvmlErr(ret); err != nil {
			return out, fmt.Errorf("list compute instances: %w", err)
		}
		for _, ci := range cis {
			out = append(out, profiledCI{ci: ci, profile: info})
		}
	}
	return out, nil
}

func firstErr(rets ...nvml.Return) nvml.Return {
	for _, r := range rets {
		if r != nvml.SUCCESS {
			return r
		}
	}
	return nvml.SUCCESS
}

// GPU returns the state of the GPU with the given index, or nil.
func (s *State) GPU(index int) *GPUState {
	for i := range s.GPUs {
		if s.GPUs[i].Index == index {
			return &s.GPUs[i]
		}
	}
	return nil
}
