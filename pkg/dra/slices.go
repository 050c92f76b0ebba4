package dra

import (
	"fmt"
	"sort"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/gpud/gpud/pkg/dra/prepared"
	"github.com/gpud/gpud/pkg/gpu"
)

// DriverName is the DRA driver's name and the domain of its attributes.
const DriverName = "gpu.gpud.io"

// Values of the "type" attribute.
const (
	TypeGPU = prepared.TypeGPU
	TypeMIG = prepared.TypeMIG
)

// Capacity names. A whole GPU has both; a MIG device has memory.
const (
	CapacityMemory resourceapi.QualifiedName = "memory"
	CapacityCores  resourceapi.QualifiedName = "cores" // percent of the GPU's SMs
)

// MIGProfile is one GPU-instance profile of a GPU (a mig.Profile as plain
// data).
type MIGProfile struct {
	// Name is the profile as users write it: "1g.10gb", "1g.10gb+me".
	Name string `json:"name"`
	// ComputeSlices is the compute slices an instance takes.
	ComputeSlices int    `json:"computeSlices"`
	MemoryBytes   uint64 `json:"memoryBytes"`
	// Placements are where the hardware allows an instance.
	Placements []Placement `json:"placements"`
}

// MIGCatalog is one GPU's MIG profiles (a mig.Catalog as plain data).
type MIGCatalog struct {
	// MemorySlices and ComputeSlices are the GPU's totals (8 and 7 on
	// A100 and H100).
	MemorySlices  int          `json:"memorySlices"`
	ComputeSlices int          `json:"computeSlices"`
	Profiles      []MIGProfile `json:"profiles"`
	// LiveModeChange is true when MIG mode turns on without a GPU reset
	// (Hopper and later). False, a GPU with MIG off offers no MIG devices:
	// turning MIG on would need a reset, which prepare cannot do.
	LiveModeChange bool `json:"liveModeChange"`
}

// NodeState is everything [Build] reads: plain data, no handles.
type NodeState struct {
	Inventory gpu.Inventory
	// MIG maps a GPU UUID to its catalog; a GPU without one offers no
	// dynamic MIG devices (existing ones are still published).
	MIG map[string]MIGCatalog
	// ExclusiveOnly lists GPUs (by UUID) the sharing config keeps whole:
	// they are not multi-allocatable, so no fractions.
	ExclusiveOnly map[string]bool
	// Busy lists GPUs (by UUID) whose MIG mode cannot change now, for
	// example because processes outside DRA run on them.
	Busy map[string]bool
	// PCIeRoots maps a GPU UUID to its PCIe root complex ("pci0000:00");
	// GPUs without one have no resource.kubernetes.io/pcieRoot attribute.
	PCIeRoots map[string]string
	// MemoryLimitModes maps a GPU UUID to how its fractions' memory is
	// enforced ("driver": per-cgroup driver limits, under which a
	// borrower above its request is evicted first under pressure; "mps";
	// "watchdog"): the whole GPU's [AttrMemoryLimitMode]. GPUs without
	// one have no such attribute.
	MemoryLimitModes map[string]string
}

// AttrMemoryLimitMode is the whole-GPU attribute that says how the agent
// holds fractions to their GPU memory there (see memlimit's modes): the
// scheduler reads it to know where borrowers are evicted first, and a
// claim may select on it (`device.attributes["gpu.gpud.io"].memoryLimitMode
// == "driver"` asks for a limit the container cannot lift).
const AttrMemoryLimitMode = "memoryLimitMode"

// Published is the result of [Build].
type Published struct {
	// Resources is the pool (named after the node) to publish.
	Resources resourceslice.DriverResources
	// Devices maps every published device name to what it is.
	Devices map[string]DeviceRef
	// Health is every published device's health, for the kubelet.
	Health map[string]gpu.Health
	// Notes says what was left out and why (empty when nothing was).
	Notes []string
}

// Limits of one ResourceSlice, from resource.k8s.io/v1.
const (
	maxDevicesPlain    = resourceapi.ResourceSliceMaxDevices
	maxDevicesAdvanced = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures
	maxCounterSets     = resourceapi.ResourceSliceMaxCounterSets
)

// Build turns the node's state into ResourceSlices for pool nodeName:
//
//   - gpu-<index> per GPU without MIG mode on: attributes named as NVIDIA's
//     DRA driver names them, consumable capacity memory (default: all of
//     it, so a claim without requests is exclusive) and cores (percent of
//     the SMs, default none: an MPS limit only when asked for);
//     multi-allocatable unless exclusive-only;
//   - per MIG-capable GPU that can create MIG devices now, a counter set
//     (memory slices, compute slices) in a slice of its own, and one
//     device per free placement, gpu-<index>-mig-<profile>-<start>, each
//     consuming the counters it occupies (the whole GPU consumes all);
//   - existing MIG devices under the same names, so a device keeps its
//     name when prepare creates it;
//   - health as taints with key [TaintKey].
//
// Devices are split into slices within the API's limits. Build is pure.
func Build(nodeName string, st NodeState) (Published, error) {
	if errs := validation.IsDNS1123Subdomain(nodeName); len(errs) > 0 {
		return Published{}, fmt.Errorf("dra: node name %q is not a valid pool name: %s", nodeName, strings.Join(errs, "; "))
	}
	inv := st.Inventory
	out := Published{Devices: map[string]DeviceRef{}, Health: map[string]gpu.Health{}}
	domains := nvlinkDomains(nodeName, inv)
	var whole, migs []resourceapi.Device
	var counters []resourceapi.CounterSet
	gpus := append([]gpu.GPU(nil), inv.GPUs...)
	sort.Slice(gpus, func(i, j int) bool { return gpus[i].Index < gpus[j].Index })
	for i := range gpus {
		g := &gpus[i]
		if g.UUID == "" || g.Index < 0 {
			out.Notes = append(out.Notes, fmt.Sprintf("gpu %d: no UUID or a negative index, not published", g.Index))
			continue
		}
		common := commonAttrs(inv.Node, g, st.PCIeRoots[g.UUID])
		cat, hasCat := st.MIG[g.UUID]
		if hasCat {
			if err := cat.validate(); err != nil {
				out.Notes = append(out.Notes, fmt.Sprintf("gpu %d: MIG catalog: %v; no dynamic MIG devices", g.Index, err))
				hasCat = false
			}
		}
		dynamic := hasCat && g.MIGCapable && len(cat.Profiles) > 0 && !g.MIGPending &&
			(g.MIGEnabled || (cat.LiveModeChange && !st.Busy[g.UUID]))
		var set *resourceapi.CounterSet
		if dynamic {
			cs := counterSet(g.Index, cat)
			set = &cs
			counters = append(counters, cs)
		}
		if !g.MIGEnabled {
			d, ref := wholeDevice(g, common, domains[g.UUID], !st.ExclusiveOnly[g.UUID], set)
			if m := st.MemoryLimitModes[g.UUID]; m != "" {
				d.Attributes[AttrMemoryLimitMode] = str(m)
			}
			whole = append(whole, d)
			out.Devices[d.Name], out.Health[d.Name] = ref, health(g.Health)
		}
		occupied := make([]bool, max(cat.MemorySlices, 8))
		if g.MIGEnabled {
			for _, m := range g.MIGDevices {
				d, ref, ok := existingMIG(g, m, common, cat, set)
				if !ok || out.Devices[d.Name].Name != "" {
					out.Notes = append(out.Notes, fmt.Sprintf("gpu %d: MIG device %s (%s at %d) has no unique name, not published", g.Index, m.UUID, m.Profile, m.PlacementStart))
					continue
				}
				for s := m.PlacementStart; s < m.PlacementStart+m.PlacementSize && s < len(occupied); s++ {
					if s >= 0 {
						occupied[s] = true
					}
				}
				migs = append(migs, d)
				h, _ := m.EffectiveHealth(g)
				out.Devices[d.Name], out.Health[d.Name] = ref, health(h)
			}
		}
		if dynamic {
			for _, d := range dynamicMIGs(g, common, cat, set, occupied) {
				if out.Devices[d.Name].Name != "" {
					continue
				}
				migs = append(migs, d)
				out.Devices[d.Name], out.Health[d.Name] = dynamicRef(g, d, cat), health(g.Health)
			}
		}
	}
	pool := resourceslice.Pool{}
	for len(counters) > 0 {
		n := min(len(counters), maxCounterSets)
		pool.Slices = append(pool.Slices, resourceslice.Slice{SharedCounters: counters[:n]})
		counters = counters[n:]
	}
	devices := append(whole, migs...)
	limit := maxDevicesPlain
	for _, d := range devices {
		if len(d.Taints) > 0 || len(d.ConsumesCounters) > 0 {
			limit = maxDevicesAdvanced
			break
		}
	}
	for len(devices) > 0 {
		n := min(len(devices), limit)
		pool.Slices = append(pool.Slices, resourceslice.Slice{Devices: devices[:n]})
		devices = devices[n:]
	}
	if len(pool.Slices) == 0 {
		pool.Slices = []resourceslice.Slice{{}} // an empty pool says the driver runs
	}
	out.Resources = resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{nodeName: pool}}
	return out, nil
}

// validate checks a catalog's placements against its slice counts.
func (c MIGCatalog) validate() error {
	if c.MemorySlices <= 0 || c.MemorySlices > maxMemorySlices || c.ComputeSlices <= 0 || c.ComputeSlices > maxMemorySlices {
		return fmt.Errorf("%d memory and %d compute slices, want 1 to %d", c.MemorySlices, c.ComputeSlices, maxMemorySlices)
	}
	for _, p := range c.Profiles {
		if p.ComputeSlices <= 0 || p.ComputeSlices > c.ComputeSlices {
			return fmt.Errorf("profile %q takes %d compute slices of %d", p.Name, p.ComputeSlices, c.ComputeSlices)
		}
		for _, pl := range p.Placements {
			if pl.Start < 0 || pl.Size <= 0 || pl.Start+pl.Size > c.MemorySlices {
				return fmt.Errorf("profile %q placement %d+%d outside %d memory slices", p.Name, pl.Start, pl.Size, c.MemorySlices)
			}
		}
	}
	return nil
}

// maxMemorySlices bounds a catalog: counters per set are limited to 32.
const maxMemorySlices = 16

// GPUDeviceName is the device name of a whole GPU.
func GPUDeviceName(index int) string { return fmt.Sprintf("gpu-%d", index) }

// MIGDeviceName is the device name of a MIG placement (existing or not):
// gpu-<index>-mig-<profile without dots and plus signs>-<start>.
func MIGDeviceName(gpuIndex int, profile string, start int) string {
	var b strings.Builder
	for _, r := range strings.ToLower(profile) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		}
	}
	return fmt.Sprintf("gpu-%d-mig-%s-%d", gpuIndex, b.String(), start)
}

func wholeDevice(g *gpu.GPU, common map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, domain string, shareable bool, set *resourceapi.CounterSet) (resourceapi.Device, DeviceRef) {
	attrs := cloneAttrs(common)
	attrs["type"] = str(TypeGPU)
	attrs["uuid"] = str(g.UUID)
	attrs["index"] = integer(g.Index)
	attrs["minor"] = integer(g.Minor)
	attrs["migCapable"] = boolean(g.MIGCapable)
	attrs["nvlinkDomain"] = str(domain)
	mem := *resource.NewQuantity(int64(g.MemoryBytes), resource.BinarySI)
	cores := *resource.NewQuantity(100, resource.DecimalSI)
	d := resourceapi.Device{
		Name:       GPUDeviceName(g.Index),
		Attributes: attrs,
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			CapacityMemory: {Value: mem},
			CapacityCores:  {Value: cores},
		},
		Taints: taints(g.Health, g.HealthReason),
	}
	if shareable {
		t := true
		d.AllowMultipleAllocations = &t
		d.Capacity[CapacityMemory] = resourceapi.DeviceCapacity{Value: mem, RequestPolicy: memoryPolicy(g.MemoryBytes)}
		// Cores default to none: a claim asking only for memory leaves
		// compute to be shared, so two 20Gi claims fit on one GPU; memory,
		// whose default is all of it, keeps a claim without requests
		// exclusive.
		zero, one := *resource.NewQuantity(0, resource.DecimalSI), *resource.NewQuantity(1, resource.DecimalSI)
		d.Capacity[CapacityCores] = resourceapi.DeviceCapacity{Value: cores, RequestPolicy: &resourceapi.CapacityRequestPolicy{
			Default:    &zero,
			ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: &zero, Step: &one},
		}}
	}
	if set != nil {
		d.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: set.Name, Counters: set.Counters}}
	}
	return d, DeviceRef{Name: d.Name, Type: TypeGPU, GPUUUID: g.UUID, GPUIndex: g.Index, GPUMinor: g.Minor,
		MemoryBytes: g.MemoryBytes, Shareable: shareable}
}

// memoryPolicy is a whole GPU's memory request policy: the default is all
// of it (a claim without a memory request is exclusive), requests round up
// to a step that divides the memory (1Gi, 256Mi or 1Mi), the least is
// 256Mi or one step if larger (less when the GPU is that small). Memory no
// step divides gets a default and no range.
func memoryPolicy(memBytes uint64) *resourceapi.CapacityRequestPolicy {
	all := *resource.NewQuantity(int64(memBytes), resource.BinarySI)
	p := &resourceapi.CapacityRequestPolicy{Default: &all}
	for _, step := range []uint64{1 << 30, 256 << 20, 1 << 20} {
		if memBytes%step != 0 || memBytes < 2*step {
			continue
		}
		least := max(step, 256<<20)
		if least+step > memBytes {
			least = step
		}
		s := *resource.NewQuantity(int64(step), resource.BinarySI)
		m := *resource.NewQuantity(int64(least), resource.BinarySI)
		p.ValidRange = &resourceapi.CapacityRequestPolicyRange{Min: &m, Step: &s}
		break
	}
	return p
}

// Counter names in a GPU's counter set.
const (
	counterComputeSlices = "compute-slices"
	counterMedia         = "media-extensions"
)

func counterSetName(gpuIndex int) string { return fmt.Sprintf("gpu-%d-counters", gpuIndex) }

func memorySliceCounter(i int) string { return fmt.Sprintf("memory-slice-%d", i) }

// counterSet is a MIG-capable GPU's counters: one per memory slice (1
// each, so placements cannot overlap), its compute slices, and one media
// extension when a profile uses it ("+me" profiles, one per GPU).
func counterSet(gpuIndex int, c MIGCatalog) resourceapi.CounterSet {
	cs := resourceapi.CounterSet{Name: counterSetName(gpuIndex), Counters: map[string]resourceapi.Counter{}}
	for i := range c.MemorySlices {
		cs.Counters[memorySliceCounter(i)] = count(1)
	}
	cs.Counters[counterComputeSlices] = count(c.ComputeSlices)
	for _, p := range c.Profiles {
		if isMedia(p.Name) {
			cs.Counters[counterMedia] = count(1)
		}
	}
	return cs
}

func isMedia(profile string) bool { return strings.Contains(profile, "+me") }

// consumption is what an instance of profile at pl takes from set.
func consumption(set *resourceapi.CounterSet, profile string, computeSlices int, pl Placement) []resourceapi.DeviceCounterConsumption {
	if set == nil {
		return nil
	}
	c := map[string]resourceapi.Counter{counterComputeSlices: count(computeSlices)}
	for s := pl.Start; s < pl.Start+pl.Size; s++ {
		if _, ok := set.Counters[memorySliceCounter(s)]; ok {
			c[memorySliceCounter(s)] = count(1)
		}
	}
	if _, ok := set.Counters[counterMedia]; ok && isMedia(profile) {
		c[counterMedia] = count(1)
	}
	return []resourceapi.DeviceCounterConsumption{{CounterSet: set.Name, Counters: c}}
}

func count(n int) resourceapi.Counter {
	return resourceapi.Counter{Value: *resource.NewQuantity(int64(n), resource.DecimalSI)}
}

func migAttrs(g *gpu.GPU, common map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, profile string, pl Placement) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	attrs := cloneAttrs(common)
	attrs["type"] = str(TypeMIG)
	attrs["profile"] = str(profile)
	attrs["parentUUID"] = str(g.UUID)
	attrs["parentIndex"] = integer(g.Index)
	attrs["parentMinor"] = integer(g.Minor)
	attrs["placementStart"] = integer(pl.Start)
	attrs["placementSize"] = integer(pl.Size)
	return attrs
}

// existingMIG publishes a MIG device that exists. ok is false when its
// name would not be a DNS label.
func existingMIG(g *gpu.GPU, m gpu.MIGDevice, common map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, cat MIGCatalog, set *resourceapi.CounterSet) (resourceapi.Device, DeviceRef, bool) {
	pl := Placement{Start: m.PlacementStart, Size: m.PlacementSize}
	name := MIGDeviceName(g.Index, m.Profile, pl.Start)
	if len(validation.IsDNS1123Label(name)) > 0 || m.UUID == "" {
		return resourceapi.Device{}, DeviceRef{}, false
	}
	attrs := migAttrs(g, common, m.Profile, pl)
	attrs["uuid"] = str(m.UUID)
	slices := 0
	for _, p := range cat.Profiles {
		if p.Name == m.Profile {
			slices = p.ComputeSlices
		}
	}
	h, reason := m.EffectiveHealth(g)
	d := resourceapi.Device{
		Name:             name,
		Attributes:       attrs,
		Capacity:         map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{CapacityMemory: {Value: *resource.NewQuantity(int64(m.MemoryBytes), resource.BinarySI)}},
		ConsumesCounters: consumption(set, m.Profile, slices, pl),
		Taints:           taints(h, reason),
	}
	return d, DeviceRef{Name: name, Type: TypeMIG, GPUUUID: g.UUID, GPUIndex: g.Index, GPUMinor: g.Minor,
		MemoryBytes: m.MemoryBytes, Profile: m.Profile, Placement: pl, MIGUUID: m.UUID,
		GIID: m.GPUInstanceID, CIID: m.ComputeInstanceID}, true
}

// dynamicMIGs publishes every placement of every profile that does not
// overlap an occupied memory slice, highest start first so first-fit
// allocation leaves the low placements that large profiles need.
func dynamicMIGs(g *gpu.GPU, common map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, cat MIGCatalog, set *resourceapi.CounterSet, occupied []bool) []resourceapi.Device {
	var out []resourceapi.Device
	taint := taints(g.Health, g.HealthReason)
	for _, p := range cat.Profiles {
		pls := append([]Placement(nil), p.Placements...)
		sort.Slice(pls, func(i, j int) bool { return pls[i].Start > pls[j].Start })
		for _, pl := range pls {
			free := true
			for s := pl.Start; s < pl.Start+pl.Size; s++ {
				free = free && !occupied[s]
			}
			name := MIGDeviceName(g.Index, p.Name, pl.Start)
			if !free || len(validation.IsDNS1123Label(name)) > 0 {
				continue
			}
			out = append(out, resourceapi.Device{
				Name:             name,
				Attributes:       migAttrs(g, common, p.Name, pl),
				Capacity:         map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{CapacityMemory: {Value: *resource.NewQuantity(int64(p.MemoryBytes), resource.BinarySI)}},
				ConsumesCounters: consumption(set, p.Name, p.ComputeSlices, pl),
				Taints:           taint,
			})
		}
	}
	return out
}

func dynamicRef(g *gpu.GPU, d resourceapi.Device, cat MIGCatalog) DeviceRef {
	profile := *d.Attributes["profile"].StringValue
	pl := Placement{Start: int(*d.Attributes["placementStart"].IntValue), Size: int(*d.Attributes["placementSize"].IntValue)}
	var mem uint64
	for _, p := range cat.Profiles {
		if p.Name == profile {
			mem = p.MemoryBytes
		}
	}
	return DeviceRef{Name: d.Name, Type: TypeMIG, GPUUUID: g.UUID, GPUIndex: g.Index, GPUMinor: g.Minor,
		MemoryBytes: mem, Profile: profile, Placement: pl}
}

// LiveMIGModeChange reports whether GPUs of an architecture (as
// gpu.GPU.Architecture names it) turn MIG mode on without a reset: Ampere
// (A100, A30) needs one, Hopper and later do not. It is what the wiring puts
// in [MIGCatalog.LiveModeChange] when it knows no better.
func LiveMIGModeChange(architecture string) bool {
	switch architecture {
	case "Hopper", "Blackwell":
		return true
	}
	return false
}
