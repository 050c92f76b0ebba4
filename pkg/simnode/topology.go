package simnode

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// nvswitchCount is the NVSwitch chips an HGX baseboard carries; link l of
// every GPU goes to switch l % nvswitchCount.
const nvswitchCount = 4

func (d *Device) setTopologyFuncs() {
	m := d.node.model
	nvswitch := d.node.profile.Interconnect == "nvswitch"
	d.GetTopologyCommonAncestorFunc = func(other nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
		if r := d.lostOr("GetTopologyCommonAncestor"); r != nvml.SUCCESS {
			return 0, r
		}
		o, ok := other.(*Device)
		if !ok || o.node != d.node {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		return d.commonAncestor(o), nvml.SUCCESS
	}
	linkCheck := func(op string, link int) nvml.Return {
		if r := d.lostOr(op); r != nvml.SUCCESS {
			return r
		}
		if !nvswitch {
			return nvml.ERROR_NOT_SUPPORTED
		}
		if link < 0 || link >= m.nvlinks {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		return nvml.SUCCESS
	}
	d.GetNvLinkStateFunc = func(link int) (nvml.EnableState, nvml.Return) {
		if r := linkCheck("GetNvLinkState", link); r != nvml.SUCCESS {
			return 0, r
		}
		return nvml.FEATURE_ENABLED, nvml.SUCCESS
	}
	d.GetNvLinkVersionFunc = func(link int) (uint32, nvml.Return) {
		if r := linkCheck("GetNvLinkVersion", link); r != nvml.SUCCESS {
			return 0, r
		}
		return m.nvlinkVer, nvml.SUCCESS
	}
	d.GetNvLinkRemoteDeviceTypeFunc = func(link int) (nvml.IntNvLinkDeviceType, nvml.Return) {
		if r := linkCheck("GetNvLinkRemoteDeviceType", link); r != nvml.SUCCESS {
			return nvml.NVLINK_DEVICE_TYPE_UNKNOWN, r
		}
		return nvml.NVLINK_DEVICE_TYPE_SWITCH, nvml.SUCCESS
	}
	d.GetNvLinkRemotePciInfoFunc = func(link int) (nvml.PciInfo, nvml.Return) {
		if r := linkCheck("GetNvLinkRemotePciInfo", link); r != nvml.SUCCESS {
			return nvml.PciInfo{}, r
		}
		var p nvml.PciInfo
		p.Bus = uint32(0xc0 + link%nvswitchCount)
		p.PciDeviceId = 0x22A310DE // NVSwitch
		copy8(p.BusId[:], fmt.Sprintf("00000000:%02X:00.0", p.Bus))
		copy8(p.BusIdLegacy[:], fmt.Sprintf("0000:%02X:00.0", p.Bus))
		return p, nvml.SUCCESS
	}
}

// commonAncestor is the PCIe path between two GPUs as NVML reports it: one
// switch (SINGLE, nvidia-smi PIX), one NUMA node (NODE), or across sockets
// (SYSTEM).
func (d *Device) commonAncestor(o *Device) nvml.GpuTopologyLevel {
	switch {
	case d == o:
		return nvml.TOPOLOGY_INTERNAL
	case d.pcieSwitch == o.pcieSwitch:
		return nvml.TOPOLOGY_SINGLE
	case d.numa == o.numa:
		return nvml.TOPOLOGY_NODE
	default:
		return nvml.TOPOLOGY_SYSTEM
	}
}

// PCIeRoot returns the PCIe root complex of GPU index as Linux names it
// under /sys/devices ("pci0000:10"), the value of the DRA attribute
// resource.kubernetes.io/pcieRoot. It follows the simulated topology: GPUs
// under one PCIe switch (NVML's SINGLE, nvidia-smi's PIX) share a host
// bridge and so a root complex; GPUs on different switches are under
// different host bridges, of one NUMA node (NODE) or not (SYS), as on a
// DGX, where each switch hangs off a root complex of its own. The root's
// bus is that of the switch's first GPU rounded down to a multiple of 16.
func (n *Node) PCIeRoot(index int) (string, error) {
	d, err := n.device(index)
	if err != nil {
		return "", err
	}
	first := n.devices[d.pcieSwitch*n.profile.GPUsPerPCIeSwitch]
	return fmt.Sprintf("pci0000:%02x", first.bus&0xf0), nil
}
