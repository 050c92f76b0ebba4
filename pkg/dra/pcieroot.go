package dra

import (
	"fmt"

	"k8s.io/dynamic-resource-allocation/deviceattribute"
)

// PCIeRoot reads the PCIe root complex of the GPU at NVML bus ID busID
// ("00000000:18:00.0") from the sysfs tree at sysfsRoot (the host's /sys,
// which the caller names): the first directory under devices/ on the path
// bus/pci/devices/<id> links to, "pci0000:15", the value of
// resource.kubernetes.io/pcieRoot ([NodeState.PCIeRoots]).
func PCIeRoot(sysfsRoot, busID string) (string, error) {
	id, ok := pciBusID(busID)
	if !ok {
		return "", fmt.Errorf("dra: pcie root: %q is not a PCI bus ID", busID)
	}
	if sysfsRoot == "" {
		return "", fmt.Errorf("dra: pcie root of %s: no sysfs root", id)
	}
	attr, err := deviceattribute.GetPCIeRootAttributeByPCIBusID(id, deviceattribute.WithFSFromRoot(sysfsRoot))
	if err != nil {
		return "", fmt.Errorf("dra: pcie root of %s under %s: %w", id, sysfsRoot, err)
	}
	if attr.Value.StringValue == nil || *attr.Value.StringValue == "" {
		return "", fmt.Errorf("dra: pcie root of %s under %s: none found", id, sysfsRoot)
	}
	return *attr.Value.StringValue, nil
}
