package dra_test

import (
	"fmt"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/dra"
	"github.com/gpud/gpud/pkg/mig"
	"github.com/gpud/gpud/pkg/mig/migdra"
	"github.com/gpud/gpud/pkg/simnode"
)

// ExampleBuild shows what gpud publishes for a node, wired as the agent
// wires it: the inventory from pkg/discovery, each MIG-capable GPU's
// catalog from pkg/mig through a NodeStateSource, then Build. On a
// simulated DGX H100 every GPU is published twice over: as a whole,
// shareable device gpu-<index> (memory and cores as consumable capacity),
// and as one device per MIG placement. Both kinds draw on the GPU's
// counter set, so once the scheduler allocates the whole GPU none of its
// MIG devices fit, and a 3g.40gb at memory slice 4 still leaves slices 0-3
// for others. Build is pure: the agent hands its result to the kubelet
// plugin helper, which writes the ResourceSlices.
func ExampleBuild() {
	node := simnode.NewBuiltin("dgx-h100", simnode.WithNodeName("node-a")) // stands in for nvml.New()
	inv, err := discovery.New(node, "node-a", nil).Inventory()
	if err != nil {
		fmt.Println(err)
		return
	}
	src := dra.NewNodeStateSource(dra.NodeStateConfig{
		MIGCatalogs: migdra.Catalogs(func() (mig.State, error) { return mig.ReadState(node) }),
	})
	st := src.NodeState(inv)
	st.Inventory = inv
	pub, err := dra.Build("node-a", st)
	if err != nil {
		fmt.Println(err)
		return
	}

	pool := pub.Resources.Pools["node-a"]
	var devices []resourceapi.Device
	for _, s := range pool.Slices {
		devices = append(devices, s.Devices...)
	}
	fmt.Printf("%d devices in %d ResourceSlices; the first holds %d counter sets\n",
		len(devices), len(pool.Slices), len(pool.Slices[0].SharedCounters))

	var profiles []string
	count := map[string]int{}
	for _, d := range devices {
		switch {
		case d.Name == "gpu-0":
			fmt.Printf("%s: %s %s %s, compute capability %s, NUMA node %s, NVLink domain %s\n", d.Name,
				attr(d, "type"), attr(d, "architecture"), attr(d, "productName"),
				attr(d, "cudaComputeCapability"), attr(d, "numaNode"), attr(d, "nvlinkDomain"))
			fmt.Printf("  capacity memory=%s cores=%s, multi-allocatable %t\n",
				capacity(d, "memory"), capacity(d, "cores"), *d.AllowMultipleAllocations)
			printConsumes(d)
		case d.Name == "gpu-0-mig-3g40gb-4":
			fmt.Printf("%s: %s %s at placement %s (%s memory slices) of GPU %s, memory=%s\n", d.Name,
				attr(d, "type"), attr(d, "profile"), attr(d, "placementStart"), attr(d, "placementSize"),
				attr(d, "parentIndex"), capacity(d, "memory"))
			printConsumes(d)
		}
		if attr(d, "type") == "mig" && attr(d, "parentIndex") == "0" {
			p := attr(d, "profile")
			if count[p] == 0 {
				profiles = append(profiles, p)
			}
			count[p]++
		}
	}
	var perProfile []string
	for _, p := range profiles {
		perProfile = append(perProfile, fmt.Sprintf("%s x%d", p, count[p]))
	}
	fmt.Println("gpu-0's MIG devices:", strings.Join(perProfile, ", "))
	// Output:
	// 208 devices in 5 ResourceSlices; the first holds 8 counter sets
	// gpu-0: gpu Hopper NVIDIA H100 80GB HBM3, compute capability 9.0.0, NUMA node 0, NVLink domain node-a-nvl0
	//   capacity memory=80Gi cores=100, multi-allocatable true
	//   consumes gpu-0-counters: compute-slices=7 media-extensions=1 memory-slice-0=1 memory-slice-1=1 memory-slice-2=1 memory-slice-3=1 memory-slice-4=1 memory-slice-5=1 memory-slice-6=1 memory-slice-7=1
	// gpu-0-mig-3g40gb-4: mig 3g.40gb at placement 4 (4 memory slices) of GPU 0, memory=40Gi
	//   consumes gpu-0-counters: compute-slices=3 memory-slice-4=1 memory-slice-5=1 memory-slice-6=1 memory-slice-7=1
	// gpu-0's MIG devices: 1g.10gb x7, 1g.10gb+me x7, 1g.20gb x4, 2g.20gb x3, 3g.40gb x2, 4g.40gb x1, 7g.80gb x1
}

// printConsumes prints what a device draws from its GPU's counter set, in
// counter-name order.
func printConsumes(d resourceapi.Device) {
	for _, c := range d.ConsumesCounters {
		var parts []string
		for name, cnt := range c.Counters {
			parts = append(parts, name+"="+cnt.Value.String())
		}
		slices.Sort(parts)
		fmt.Printf("  consumes %s: %s\n", c.CounterSet, strings.Join(parts, " "))
	}
}

// capacity is a device's capacity as text, "-" when it has none.
func capacity(d resourceapi.Device, name resourceapi.QualifiedName) string {
	c, ok := d.Capacity[name]
	if !ok {
		return "-"
	}
	return c.Value.String()
}

// attr is a device attribute as text, "-" when the device has none.
func attr(d resourceapi.Device, name resourceapi.QualifiedName) string {
	a, ok := d.Attributes[name]
	switch {
	case !ok:
		return "-"
	case a.StringValue != nil:
		return *a.StringValue
	case a.IntValue != nil:
		return fmt.Sprint(*a.IntValue)
	case a.BoolValue != nil:
		return fmt.Sprint(*a.BoolValue)
	case a.VersionValue != nil:
		return *a.VersionValue
	}
	return "?"
}
