package simnode

import (
	"slices"
	"sort"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// gpuInstance is a MIG GPU instance; compute instances live inside it.
type gpuInstance struct {
	mock.GpuInstance
	dev        *Device
	id         int
	profileIdx int // go-nvml's GPU_INSTANCE_PROFILE_* index
	info       nvml.GpuInstanceProfileInfo
	placement  nvml.GpuInstancePlacement
	cis        map[int]*computeInstance
}

// computeInstance is a MIG compute instance; each one is a MIG device.
type computeInstance struct {
	mock.ComputeInstance
	gi         *gpuInstance
	id         int
	profileIdx int
	info       nvml.ComputeInstanceProfileInfo
	uuid       string
	handle     *migDevice
}

// profileInfo returns the GPU-instance profile at a go-nvml index with the
// real driver's profile ID, or false when the model lacks it.
func (d *Device) profileInfo(idx int) (nvml.GpuInstanceProfileInfo, bool) {
	info, ok := d.node.model.config.MIGProfiles.GpuInstanceProfiles[idx]
	if !ok {
		return info, false
	}
	if _, ruled := placementRules[idx]; !ruled {
		return info, false
	}
	info.Id = nvmlProfileID[idx]
	return info, true
}

// profileIndexOf maps a profile ID back to go-nvml's index.
func (d *Device) profileIndexOf(id uint32) (int, bool) {
	for idx, pid := range nvmlProfileID {
		if pid == id {
			if _, ok := d.profileInfo(idx); ok {
				return idx, true
			}
		}
	}
	return 0, false
}

func (d *Device) migCapable() bool {
	return len(d.node.model.config.MIGProfiles.GpuInstanceProfiles) > 0
}

// setMIGFuncs installs the MIG calls of a GPU: mode, profiles and GPU
// instances.
func (d *Device) setMIGFuncs() {
	d.setMIGModeFuncs()
	d.setMIGProfileFuncs()
	d.setGPUInstanceFuncs()
}

// change runs one layout-changing call: the lost/fault check, then f under
// the node's lock, then a state-file save when f succeeded. A failed save
// does not fail the call (the simulated hardware did change); it is
// reported by [Node.StateErr].
func (d *Device) change(op string, f func() nvml.Return) nvml.Return {
	if r := d.lostOr(op); r != nvml.SUCCESS {
		return r
	}
	d.node.mu.Lock()
	defer d.node.mu.Unlock()
	r := f()
	if r == nvml.SUCCESS {
		_ = d.node.saveStateLocked() // kept for StateErr
	}
	return r
}

// migCall checks a read-only MIG call: lost or faulted GPU, or one without
// MIG.
func (d *Device) migCall(op string) nvml.Return {
	if r := d.lostOr(op); r != nvml.SUCCESS {
		return r
	}
	if !d.migCapable() {
		return nvml.ERROR_NOT_SUPPORTED
	}
	return nvml.SUCCESS
}

func (d *Device) setMIGModeFuncs() {
	d.GetMigModeFunc = func() (int, int, nvml.Return) {
		if r := d.migCall("GetMigMode"); r != nvml.SUCCESS {
			return 0, 0, r
		}
		d.node.mu.Lock()
		defer d.node.mu.Unlock()
		return d.migCurrent, d.migPending, nvml.SUCCESS
	}
	d.SetMigModeFunc = func(mode int) (nvml.Return, nvml.Return) {
		activation := nvml.SUCCESS
		r := d.change("SetMigMode", func() nvml.Return {
			switch {
			case !d.migCapable():
				return nvml.ERROR_NOT_SUPPORTED
			case mode != nvml.DEVICE_MIG_ENABLE && mode != nvml.DEVICE_MIG_DISABLE:
				return nvml.ERROR_INVALID_ARGUMENT
			case mode == nvml.DEVICE_MIG_DISABLE && len(d.gis) > 0:
				return nvml.ERROR_IN_USE
			}
			d.migPending = mode
			if d.migCurrent != mode {
				if d.node.model.migResetReqd || len(d.procs) > 0 {
					activation = nvml.ERROR_RESET_REQUIRED
				} else {
					d.migCurrent = mode
				}
			}
			return nvml.SUCCESS
		})
		if r != nvml.SUCCESS {
			return r, r
		}
		return activation, nvml.SUCCESS
	}
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) {
		if r := d.migCall("GetMaxMigDeviceCount"); r != nvml.SUCCESS {
			return 0, r
		}
		return maxMigDevices, nvml.SUCCESS
	}
	d.GetMigDeviceHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if r := d.migCall("GetMigDeviceHandleByIndex"); r != nvml.SUCCESS {
			return nil, r
		}
		if i < 0 || i >= maxMigDevices {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		d.node.mu.Lock()
		defer d.node.mu.Unlock()
		hs := d.migHandlesLocked()
		if i >= len(hs) {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return hs[i], nvml.SUCCESS
	}
}

func (d *Device) setMIGProfileFuncs() {
	d.GetGpuInstanceProfileInfoFunc = func(idx int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
		if r := d.lostOr("GetGpuInstanceProfileInfo"); r != nvml.SUCCESS {
			return nvml.GpuInstanceProfileInfo{}, r
		}
		if idx < 0 || idx >= nvml.GPU_INSTANCE_PROFILE_COUNT {
			return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_INVALID_ARGUMENT
		}
		info, ok := d.profileInfo(idx)
		if !ok {
			return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
		}
		return info, nvml.SUCCESS
	}
	d.GetGpuInstancePossiblePlacementsFunc = func(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstancePlacement, nvml.Return) {
		if r := d.lostOr("GetGpuInstancePossiblePlacements"); r != nvml.SUCCESS {
			return nil, r
		}
		idx, ok := d.profileIndexOf(info.Id)
		if !ok {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		rule := placementRules[idx]
		out := make([]nvml.GpuInstancePlacement, len(rule.starts))
		for i, s := range rule.starts {
			out[i] = nvml.GpuInstancePlacement{Start: s, Size: rule.size}
		}
		return out, nvml.SUCCESS
	}
	d.GetGpuInstanceRemainingCapacityFunc = func(info *nvml.GpuInstanceProfileInfo) (int, nvml.Return) {
		if r := d.lostOr("GetGpuInstanceRemainingCapacity"); r != nvml.SUCCESS {
			return 0, r
		}
		idx, ok := d.profileIndexOf(info.Id)
		if !ok {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		d.node.mu.Lock()
		defer d.node.mu.Unlock()
		return d.remainingLocked(idx), nvml.SUCCESS
	}
}

func (d *Device) setGPUInstanceFuncs() {
	d.CreateGpuInstanceFunc = func(info *nvml.GpuInstanceProfileInfo) (nvml.GpuInstance, nvml.Return) {
		return d.createGpuInstance(info, nil)
	}
	d.CreateGpuInstanceWithPlacementFunc = func(info *nvml.GpuInstanceProfileInfo, p *nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
		return d.createGpuInstance(info, p)
	}
	d.GetGpuInstancesFunc = func(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstance, nvml.Return) {
		if r := d.lostOr("GetGpuInstances"); r != nvml.SUCCESS {
			return nil, r
		}
		d.node.mu.Lock()
		defer d.node.mu.Unlock()
		if d.migCurrent != nvml.DEVICE_MIG_ENABLE {
			return nil, nvml.ERROR_NOT_SUPPORTED
		}
		var out []nvml.GpuInstance
		for _, gi := range d.sortedGIsLocked() {
			if gi.info.Id == info.Id {
				out = append(out, gi)
			}
		}
		return out, nvml.SUCCESS
	}
	d.GetGpuInstanceByIdFunc = func(id int) (nvml.GpuInstance, nvml.Return) {
		if r := d.lostOr("GetGpuInstanceById"); r != nvml.SUCCESS {
			return nil, r
		}
		d.node.mu.Lock()
		defer d.node.mu.Unlock()
		gi, ok := d.gis[id]
		if !ok {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return gi, nvml.SUCCESS
	}
}

// occupiedLocked returns the memory slices in use and the compute slices used.
func (d *Device) occupiedLocked() (mem [8]bool, compute int) {
	for _, gi := range d.gis {
		for s := gi.placement.Start; s < gi.placement.Start+gi.placement.Size && s < 8; s++ {
			mem[s] = true
		}
		compute += int(gi.info.SliceCount)
	}
	return mem, compute
}

// freePlacementLocked finds where a profile fits: the requested placement, or
// the first free one. It reports false when nothing fits.
func (d *Device) freePlacementLocked(idx int, want *nvml.GpuInstancePlacement) (nvml.GpuInstancePlacement, bool) {
	info, _ := d.profileInfo(idx)
	count := 0
	for _, gi := range d.gis {
		if gi.profileIdx == idx {
			count++
		}
	}
	mem, compute := d.occupiedLocked()
	if count >= int(info.InstanceCount) || compute+int(info.SliceCount) > computeSlices {
		return nvml.GpuInstancePlacement{}, false
	}
	// Like the driver, try the highest start first: small instances fill
	// from the end and leave slot 0 free for the large ones.
	rule := placementRules[idx]
	for i := len(rule.starts) - 1; i >= 0; i-- {
		s := rule.starts[i]
		if want != nil && want.Start != s {
			continue
		}
		free := true
		for m := s; m < s+rule.size; m++ {
			if mem[m] {
				free = false
			}
		}
		if free {
			return nvml.GpuInstancePlacement{Start: s, Size: rule.size}, true
		}
	}
	return nvml.GpuInstancePlacement{}, false
}

func (d *Device) remainingLocked(idx int) int {
	// Count by trial: place greedily on a scratch copy.
	saved := d.gis
	d.gis = make(map[int]*gpuInstance, len(saved))
	for k, v := range saved {
		d.gis[k] = v
	}
	n := 0
	info, _ := d.profileInfo(idx)
	for {
		p, ok := d.freePlacementLocked(idx, nil)
		if !ok {
			break
		}
		d.gis[-1-n] = &gpuInstance{profileIdx: idx, info: info, placement: p}
		n++
	}
	d.gis = saved
	return n
}

func (d *Device) createGpuInstance(info *nvml.GpuInstanceProfileInfo, want *nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
	var gi *gpuInstance
	r := d.change("CreateGpuInstance", func() nvml.Return {
		if info == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		idx, ok := d.profileIndexOf(info.Id)
		switch {
		case !ok:
			return nvml.ERROR_INVALID_ARGUMENT
		case d.migCurrent != nvml.DEVICE_MIG_ENABLE:
			return nvml.ERROR_NOT_SUPPORTED
		case want != nil && !slices.Contains(placementRules[idx].starts, want.Start):
			return nvml.ERROR_INVALID_ARGUMENT
		}
		p, ok := d.freePlacementLocked(idx, want)
		if !ok {
			return nvml.ERROR_INSUFFICIENT_RESOURCES
		}
		gi = d.addGpuInstanceLocked(idx, d.nextGIIDLocked(idx), p)
		return nvml.SUCCESS
	})
	if r != nvml.SUCCESS {
		return nil, r
	}
	return gi, nvml.SUCCESS
}

// nextGIIDLocked picks the lowest free GPU instance ID; the full-GPU profile
// takes 0, as on the real driver.
func (d *Device) nextGIIDLocked(idx int) int {
	id := 1
	if idx == nvml.GPU_INSTANCE_PROFILE_7_SLICE {
		id = 0
	}
	for ; ; id++ {
		if _, used := d.gis[id]; !used {
			return id
		}
	}
}

func (d *Device) addGpuInstanceLocked(idx, id int, p nvml.GpuInstancePlacement) *gpuInstance {
	info, _ := d.profileInfo(idx)
	gi := &gpuInstance{dev: d, id: id, profileIdx: idx, info: info, placement: p, cis: map[int]*computeInstance{}}
	gi.setFuncs()
	d.gis[id] = gi
	return gi
}

func (d *Device) sortedGIsLocked() []*gpuInstance {
	out := make([]*gpuInstance, 0, len(d.gis))
	for _, gi := range d.gis {
		out = append(out, gi)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// migHandlesLocked lists the MIG devices in (GPU instance, compute
// instance) order, the order GetMigDeviceHandleByIndex uses.
func (d *Device) migHandlesLocked() []*migDevice {
	var out []*migDevice
	for _, gi := range d.sortedGIsLocked() {
		ids := make([]int, 0, len(gi.cis))
		for id := range gi.cis {
			ids = append(ids, id)
		}
		sort.Ints(ids)
		for _, id := range ids {
			out = append(out, gi.cis[id].handle)
		}
	}
	return out
}

func (gi *gpuInstance) lostOr(op string) nvml.Return { return gi.dev.lostOr(op) }

func (gi *gpuInstance) setFuncs() {
	d := gi.dev
	gi.GetInfoFunc = func() (nvml.GpuInstanceInfo, nvml.Return) {
		if r := gi.lostOr("GpuInstance.GetInfo"); r != nvml.SUCCESS {
			return nvml.GpuInstanceInfo{}, r
		}
		return nvml.GpuInstanceInfo{Device: d, Id: uint32(gi.id), ProfileId: gi.info.Id, Placement: gi.placement}, nvml.SUCCESS
	}
	gi.GetComputeInstanceProfileInfoFunc = func(ciIdx, eng int) (nvml.ComputeInstanceProfileInfo, nvml.Return) {
		if r := gi.lostOr("GetComputeInstanceProfileInfo"); r != nvml.SUCCESS {
			return nvml.ComputeInstanceProfileInfo{}, r
		}
		if eng != nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED {
			return nvml.ComputeInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
		}
		info, ok := d.node.model.config.MIGProfiles.ComputeInstanceProfiles[gi.profileIdx][ciIdx]
		if !ok {
			return nvml.ComputeInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
		}
		return info, nvml.SUCCESS
	}
	gi.CreateComputeInstanceFunc = func(info *nvml.ComputeInstanceProfileInfo) (nvml.ComputeInstance, nvml.Return) {
		var ci *computeInstance
		r := d.change("CreateComputeInstance", func() nvml.Return {
			ciIdx := -1
			for idx, p := range d.node.model.config.MIGProfiles.ComputeInstanceProfiles[gi.profileIdx] {
				if p.Id == info.Id {
					ciIdx = idx
				}
			}
			if ciIdx < 0 {
				return nvml.ERROR_INVALID_ARGUMENT
			}
			used := 0
			for _, ci := range gi.cis {
				used += int(ci.info.SliceCount)
			}
			if used+int(info.SliceCount) > int(gi.info.SliceCount) {
				return nvml.ERROR_INSUFFICIENT_RESOURCES
			}
			id := 0
			for ; gi.cis[id] != nil; id++ {
			}
			ci = gi.addComputeInstanceLocked(ciIdx, id)
			return nvml.SUCCESS
		})
		if r != nvml.SUCCESS {
			return nil, r
		}
		return ci, nvml.SUCCESS
	}
	gi.GetComputeInstancesFunc = func(info *nvml.ComputeInstanceProfileInfo) ([]nvml.ComputeInstance, nvml.Return) {
		if r := gi.lostOr("GetComputeInstances"); r != nvml.SUCCESS {
			return nil, r
		}
		d.node.mu.Lock()
		defer d.node.mu.Unlock()
		var out []nvml.ComputeInstance
		for id := 0; id < 8; id++ {
			if ci := gi.cis[id]; ci != nil && ci.info.Id == info.Id {
				out = append(out, ci)
			}
		}
		return out, nvml.SUCCESS
	}
	gi.GetComputeInstanceByIdFunc = func(id int) (nvml.ComputeInstance, nvml.Return) {
		d.node.mu.Lock()
		defer d.node.mu.Unlock()
		if ci := gi.cis[id]; ci != nil {
			return ci, nvml.SUCCESS
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	gi.DestroyFunc = func() nvml.Return {
		return d.change("DestroyGpuInstance", func() nvml.Return {
			switch {
			case d.gis[gi.id] != gi:
				return nvml.ERROR_INVALID_ARGUMENT
			case len(gi.cis) > 0:
				return nvml.ERROR_IN_USE
			}
			delete(d.gis, gi.id)
			return nvml.SUCCESS
		})
	}
	fillUnsupported(&gi.GpuInstance)
}

func (gi *gpuInstance) addComputeInstanceLocked(ciIdx, id int) *computeInstance {
	d := gi.dev
	ci := &computeInstance{
		gi: gi, id: id, profileIdx: ciIdx,
		info: d.node.model.config.MIGProfiles.ComputeInstanceProfiles[gi.profileIdx][ciIdx],
		uuid: d.node.uuid("MIG", d.index, gi.id, id),
	}
	ci.handle = newMigDevice(ci)
	ci.setFuncs()
	gi.cis[id] = ci
	return ci
}

func (ci *computeInstance) setFuncs() {
	gi := ci.gi
	d := gi.dev
	ci.GetInfoFunc = func() (nvml.ComputeInstanceInfo, nvml.Return) {
		return nvml.ComputeInstanceInfo{Device: d, GpuInstance: gi, Id: uint32(ci.id), ProfileId: ci.info.Id}, gi.lostOr("ComputeInstance.GetInfo")
	}
	ci.DestroyFunc = func() nvml.Return {
		return d.change("DestroyComputeInstance", func() nvml.Return {
			if gi.cis[ci.id] != ci {
				return nvml.ERROR_INVALID_ARGUMENT
			}
			for _, p := range d.procs {
				if p.gi == gi.id && p.ci == ci.id {
					return nvml.ERROR_IN_USE
				}
			}
			delete(gi.cis, ci.id)
			return nvml.SUCCESS
		})
	}
	fillUnsupported(&ci.ComputeInstance)
}
