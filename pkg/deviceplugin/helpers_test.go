package deviceplugin

import (
	"fmt"

	"github.com/gpud/gpud/pkg/gpu"
)

// synthInventory is an NVSwitch node of n GPUs on two NUMA nodes; each GPU
// has migPerGPU 1g.10gb slices (MIG enabled when > 0).
func synthInventory(n, migPerGPU int) gpu.Inventory {
	inv := gpu.Inventory{Node: gpu.Node{Name: "synth"}}
	for i := range n {
		g := gpu.GPU{Index: i, Minor: i, UUID: fmt.Sprintf("GPU-%04d", i), MemoryBytes: 80 << 30,
			NUMANode: i * 2 / n, Health: gpu.Healthy, MIGCapable: true, MIGEnabled: migPerGPU > 0}
		for j := range migPerGPU {
			g.MIGDevices = append(g.MIGDevices, gpu.MIGDevice{UUID: fmt.Sprintf("MIG-%04d-%d", i, j), Profile: "1g.10gb",
				MemoryBytes: 10 << 30, GPUInstanceID: 7 + j, PlacementStart: j, PlacementSize: 1})
		}
		inv.GPUs = append(inv.GPUs, g)
	}
	for i := range n {
		for j := i + 1; j < n; j++ {
			inv.Links = append(inv.Links, gpu.Link{A: inv.GPUs[i].UUID, B: inv.GPUs[j].UUID, Level: gpu.LinkNVLink, NVLinks: 18})
		}
	}
	return inv
}

func testConfig() Config {
	return Config{PluginDir: "/tmp/dp", CDIDir: "/tmp/cdi", RenameShared: true}.withDefaults()
}
