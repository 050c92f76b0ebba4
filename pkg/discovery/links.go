package discovery

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/pkg/gpu"
)

// nvlinkEnds is what one GPU's NVLinks reach: links to NVSwitches, and links
// straight to other GPUs by PCI bus ID.
type nvlinkEnds struct {
	toSwitch int
	toGPU    map[string]int
}

func readNVLinks(h nvml.Device) nvlinkEnds {
	ends := nvlinkEnds{toGPU: map[string]int{}}
	for l := range nvml.NVLINK_MAX_LINKS {
		state, ret := h.GetNvLinkState(l)
		if ret != nvml.SUCCESS {
			if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT {
				break
			}
			continue
		}
		if state != nvml.FEATURE_ENABLED {
			continue
		}
		typ, ret := h.GetNvLinkRemoteDeviceType(l)
		if ret == nvml.SUCCESS && typ == nvml.NVLINK_DEVICE_TYPE_SWITCH {
			ends.toSwitch++
			continue
		}
		if p, ret := h.GetNvLinkRemotePciInfo(l); ret == nvml.SUCCESS {
			ends.toGPU[busID(p.BusId[:])]++
		}
	}
	return ends
}

// readLinks builds the pairwise link list: NVLink where the GPUs share one
// (directly or through NVSwitches), the PCIe common ancestor otherwise.
func (d *Discoverer) readLinks(handles []nvml.Device) ([]gpu.Link, error) {
	type info struct {
		uuid, bus string
		nv        nvlinkEnds
	}
	infos := make([]info, len(handles))
	for i, h := range handles {
		uuid, ret := h.GetUUID()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("discovery: links: uuid: %w", ret)
		}
		p, _ := h.GetPciInfo()
		infos[i] = info{uuid: uuid, bus: busID(p.BusId[:]), nv: readNVLinks(h)}
	}
	// A link whose remote end is no GPU of this node goes to an NVSwitch,
	// even where the driver cannot say the remote device's type.
	isGPU := map[string]bool{}
	for _, in := range infos {
		isGPU[in.bus] = true
	}
	for i := range infos {
		for bus, n := range infos[i].nv.toGPU {
			if !isGPU[bus] {
				infos[i].nv.toSwitch += n
				delete(infos[i].nv.toGPU, bus)
			}
		}
	}
	links := []gpu.Link{}
	for i := range handles {
		for j := i + 1; j < len(handles); j++ {
			a, b := infos[i], infos[j]
			n := a.nv.toGPU[b.bus]
			if a.nv.toSwitch > 0 && b.nv.toSwitch > 0 {
				n += min(a.nv.toSwitch, b.nv.toSwitch)
			}
			if n > 0 {
				links = append(links, gpu.Link{A: a.uuid, B: b.uuid, Level: gpu.LinkNVLink, NVLinks: n})
				continue
			}
			lvl, ret := handles[i].GetTopologyCommonAncestor(handles[j])
			if ret != nvml.SUCCESS {
				d.log.Debug("nvml topology unavailable", "gpu_uuid", a.uuid, "peer_uuid", b.uuid, "err", ret.Error())
				continue
			}
			links = append(links, gpu.Link{A: a.uuid, B: b.uuid, Level: pcieLevel(lvl)})
		}
	}
	return links, nil
}

func pcieLevel(l nvml.GpuTopologyLevel) gpu.LinkLevel {
	switch l {
	case nvml.TOPOLOGY_INTERNAL, nvml.TOPOLOGY_SINGLE:
		return gpu.LinkPIX
	case nvml.TOPOLOGY_MULTIPLE:
		return gpu.LinkPXB
	case nvml.TOPOLOGY_HOSTBRIDGE:
		return gpu.LinkPHB
	case nvml.TOPOLOGY_NODE:
		return gpu.LinkNODE
	default:
		return gpu.LinkSYS
	}
}
