package dra

import (
	"maps"
	"strconv"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpud/gpud/pkg/gpu"
)

func TestBuildWholeGPUAttributes(t *testing.T) {
	tests := []struct {
		node, product, arch, cc string
		migCapable              bool
		sameDomain              bool
	}{
		{node: "dgx-a100", product: "NVIDIA A100-SXM4-40GB", arch: "Ampere", cc: "8.0.0", migCapable: true, sameDomain: true},
		{node: "dgx-h100", product: "NVIDIA H100 80GB HBM3", arch: "Hopper", cc: "9.0.0", migCapable: true, sameDomain: true},
		{node: "dgx-h200", arch: "Hopper", cc: "9.0.0", migCapable: true, sameDomain: true},
		{node: "pcie-l40s", arch: "Ada Lovelace", cc: "8.9.0", migCapable: false, sameDomain: false},
	}
	for _, tc := range tests {
		t.Run(tc.node, func(t *testing.T) {
			_, st, pub := buildSim(t, tc.node)
			devs := allDevices(pub, tc.node)
			domains := map[string]bool{}
			for _, g := range st.Inventory.GPUs {
				d, ok := devs[GPUDeviceName(g.Index)]
				if !ok {
					t.Fatalf("no device %s", GPUDeviceName(g.Index))
				}
				want := map[resourceapi.QualifiedName]string{
					"type": "gpu", "uuid": g.UUID, "index": itoa(g.Index), "minor": itoa(g.Minor),
					"brand": "NVIDIA", "architecture": tc.arch, "cudaComputeCapability": tc.cc,
					"driverVersion": "550.54.15", "cudaDriverVersion": "12.4.0",
					"numaNode": itoa(g.NUMANode), "migCapable": boolStr(tc.migCapable),
					"pcieBusID": strings.ToLower(g.PCIBusID[4:]), "resource.kubernetes.io/pciBusID": strings.ToLower(g.PCIBusID[4:]),
				}
				if tc.product != "" {
					want["productName"] = tc.product
				}
				for name, v := range want {
					if got := attrString(t, d, name); got != v {
						t.Errorf("%s %s = %q, want %q", d.Name, name, got, v)
					}
				}
				for _, name := range []resourceapi.QualifiedName{"cudaComputeCapability", "driverVersion", "cudaDriverVersion"} {
					if d.Attributes[name].VersionValue == nil {
						t.Errorf("%s %s is not a version", d.Name, name)
					}
				}
				domains[attrString(t, d, "nvlinkDomain")] = true
				mem := d.Capacity[CapacityMemory]
				if mem.Value.Value() != int64(g.MemoryBytes) {
					t.Errorf("%s memory = %v, want %d", d.Name, mem.Value.String(), g.MemoryBytes)
				}
				if d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations {
					t.Errorf("%s is not multi-allocatable", d.Name)
				}
				if p := mem.RequestPolicy; p == nil || p.Default.Value() != int64(g.MemoryBytes) || p.ValidRange == nil || p.ValidRange.Min.Value() < 256<<20 {
					t.Errorf("%s memory policy = %+v, want default all of it and a range from 256Mi", d.Name, p)
				}
				if c := d.Capacity[CapacityCores]; c.Value.Value() != 100 || c.RequestPolicy == nil || !c.RequestPolicy.Default.IsZero() {
					t.Errorf("%s cores = %+v, want 100 with default 0", d.Name, c)
				}
			}
			if tc.sameDomain && len(domains) != 1 {
				t.Errorf("NVSwitch node: nvlinkDomains %v, want one", domains)
			}
			if !tc.sameDomain && len(domains) != len(st.Inventory.GPUs) {
				t.Errorf("PCIe node: nvlinkDomains %v, want one per GPU", domains)
			}
		})
	}
}

func TestBuildDynamicMIG(t *testing.T) {
	_, st, pub := buildSim(t, "dgx-h100")
	pool := pub.Resources.Pools["dgx-h100"]
	sets := counterSets(pool)
	if len(sets) != 8 || len(pool.Slices[0].SharedCounters) != 8 {
		t.Fatalf("counter sets = %v, want 8, all in the first slice", keys(sets))
	}
	cs := sets["gpu-0-counters"]
	if got := counterValue(cs.Counters["compute-slices"]); got != 7 {
		t.Errorf("compute-slices = %d, want 7", got)
	}
	for i := range 8 {
		if got := counterValue(cs.Counters[memorySliceCounter(i)]); got != 1 {
			t.Errorf("memory-slice-%d = %d, want 1", i, got)
		}
	}
	devs := allDevices(pub, "dgx-h100")
	// 1 whole + 7 1g.10gb + 7 1g.10gb+me + 4 1g.20gb + 3 2g.20gb + 2 3g.40gb + 1 4g.40gb + 1 7g.80gb.
	if len(devs) != 8*26 {
		t.Errorf("%d devices, want %d", len(devs), 8*26)
	}
	if n := len(pool.Slices); n != 1+4 {
		t.Errorf("%d slices, want 1 counter slice and 4 of at most 64 devices", n)
	}
	whole := devs["gpu-0"]
	if len(whole.ConsumesCounters) != 1 || len(whole.ConsumesCounters[0].Counters) != len(cs.Counters) {
		t.Errorf("gpu-0 consumes %+v, want every counter of its set", whole.ConsumesCounters)
	}
	tests := []struct {
		name       string
		profile    string
		start, mem int
		consumes   map[string]int64
	}{
		{name: "gpu-0-mig-1g10gb-6", profile: "1g.10gb", start: 6, consumes: map[string]int64{"memory-slice-6": 1, "compute-slices": 1}},
		{name: "gpu-0-mig-1g10gbme-0", profile: "1g.10gb+me", start: 0, consumes: map[string]int64{"memory-slice-0": 1, "compute-slices": 1, "media-extensions": 1}},
		{name: "gpu-3-mig-3g40gb-4", profile: "3g.40gb", start: 4, consumes: map[string]int64{"memory-slice-4": 1, "memory-slice-5": 1, "memory-slice-6": 1, "memory-slice-7": 1, "compute-slices": 3}},
		{name: "gpu-7-mig-7g80gb-0", profile: "7g.80gb", start: 0, consumes: map[string]int64{"memory-slice-0": 1, "memory-slice-1": 1, "memory-slice-2": 1, "memory-slice-3": 1, "memory-slice-4": 1, "memory-slice-5": 1, "memory-slice-6": 1, "memory-slice-7": 1, "compute-slices": 7}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, ok := devs[tc.name]
			if !ok {
				t.Fatalf("no device %s", tc.name)
			}
			ref := pub.Devices[tc.name]
			g := st.Inventory.GPUs[ref.GPUIndex]
			for name, v := range map[resourceapi.QualifiedName]string{"type": "mig", "profile": tc.profile,
				"parentUUID": g.UUID, "parentIndex": itoa(g.Index), "placementStart": itoa(tc.start)} {
				if got := attrString(t, d, name); got != v {
					t.Errorf("%s = %q, want %q", name, got, v)
				}
			}
			if _, ok := d.Attributes["uuid"]; ok {
				t.Errorf("a MIG device that does not exist has a uuid")
			}
			if d.AllowMultipleAllocations != nil {
				t.Errorf("a MIG device is multi-allocatable")
			}
			got := map[string]int64{}
			for c, v := range d.ConsumesCounters[0].Counters {
				got[c] = v.Value.Value()
			}
			if d.ConsumesCounters[0].CounterSet != counterSetName(g.Index) || !maps.Equal(got, tc.consumes) {
				t.Errorf("consumes %s %v, want %s %v", d.ConsumesCounters[0].CounterSet, got, counterSetName(g.Index), tc.consumes)
			}
			if !ref.Dynamic() || ref.Profile != tc.profile || ref.Placement.Start != tc.start {
				t.Errorf("ref = %+v", ref)
			}
			if mem := d.Capacity[CapacityMemory].Value; mem.Value() != int64(ref.MemoryBytes) || ref.MemoryBytes == 0 {
				t.Errorf("memory = %v, ref %d", mem.String(), ref.MemoryBytes)
			}
		})
	}
}

func TestBuildMIGNeedsReset(t *testing.T) {
	// A100s turn MIG on only after a reset: with MIG off they offer whole
	// GPUs only, no counters, one slice.
	_, _, pub := buildSim(t, "dgx-a100")
	pool := pub.Resources.Pools["dgx-a100"]
	if len(pool.Slices) != 1 || len(pool.Slices[0].Devices) != 8 || len(counterSets(pool)) != 0 {
		t.Fatalf("slices = %d, devices %d, counter sets %d; want one slice of 8 whole GPUs", len(pool.Slices), len(pool.Slices[0].Devices), len(counterSets(pool)))
	}
}

func TestBuildExistingMIG(t *testing.T) {
	_, st, _ := buildSim(t, "dgx-a100")
	g := st.Inventory.GPUs[2]
	st.Inventory = withMIG(st.Inventory, 2,
		gpu.MIGDevice{UUID: "MIG-a", Profile: "3g.20gb", MemoryBytes: 19968 << 20, GPUInstanceID: 1, PlacementStart: 4, PlacementSize: 4},
		gpu.MIGDevice{UUID: "MIG-b", Profile: "1g.5gb", MemoryBytes: 4864 << 20, GPUInstanceID: 9, PlacementStart: 0, PlacementSize: 1,
			Health: gpu.Unhealthy, HealthReason: "xid 31"})
	pub, err := Build("dgx-a100", st)
	if err != nil {
		t.Fatal(err)
	}
	checkResources(t, "dgx-a100", pub)
	devs := allDevices(pub, "dgx-a100")
	if _, ok := devs["gpu-2"]; ok {
		t.Errorf("gpu-2 is in MIG mode but published whole")
	}
	a, ok := devs["gpu-2-mig-3g20gb-4"]
	if !ok || attrString(t, a, "uuid") != "MIG-a" || attrString(t, a, "parentUUID") != g.UUID {
		t.Fatalf("existing 3g.20gb@4 = %+v", a)
	}
	if ref := pub.Devices[a.Name]; ref.Dynamic() || ref.MIGUUID != "MIG-a" || ref.GIID != 1 {
		t.Errorf("ref = %+v", ref)
	}
	b := devs["gpu-2-mig-1g5gb-0"]
	if len(b.Taints) != 1 || b.Taints[0].Effect != resourceapi.DeviceTaintEffectNoSchedule || b.Taints[0].Value != "xid-31" {
		t.Errorf("unhealthy MIG device taints = %+v", b.Taints)
	}
	// Free placements on the MIG GPU are offered, overlapping ones not.
	for name, want := range map[string]bool{
		"gpu-2-mig-1g5gb-1": true, "gpu-2-mig-2g10gb-2": true, "gpu-2-mig-1g10gb-2": true,
		"gpu-2-mig-1g10gb-0": false, "gpu-2-mig-3g20gb-0": false, "gpu-2-mig-4g20gb-0": false, "gpu-2-mig-7g40gb-0": false,
		"gpu-2-mig-2g10gb-4": false, "gpu-3-mig-1g5gb-1": false,
	} {
		if _, got := devs[name]; got != want {
			t.Errorf("%s published = %v, want %v", name, got, want)
		}
	}
	if _, ok := counterSets(pub.Resources.Pools["dgx-a100"])["gpu-2-counters"]; !ok {
		t.Errorf("no counter set for the MIG GPU")
	}
}

func TestBuildWhatCanBeDeliveredNow(t *testing.T) {
	tests := []struct {
		name    string
		change  func(st *NodeState)
		dynamic bool
	}{
		{name: "live mode change", change: func(*NodeState) {}, dynamic: true},
		{name: "busy", change: func(st *NodeState) { st.Busy = map[string]bool{st.Inventory.GPUs[0].UUID: true} }},
		{name: "pending", change: func(st *NodeState) { st.Inventory.GPUs[0].MIGPending = true }},
		{name: "no catalog", change: func(st *NodeState) { delete(st.MIG, st.Inventory.GPUs[0].UUID) }},
		{name: "bad catalog", change: func(st *NodeState) {
			c := st.MIG[st.Inventory.GPUs[0].UUID]
			c.Profiles = append([]MIGProfile{{Name: "9g.1tb", ComputeSlices: 1, Placements: []Placement{{Start: 7, Size: 4}}}}, c.Profiles...)
			st.MIG[st.Inventory.GPUs[0].UUID] = c
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, st, _ := buildSim(t, "dgx-h100")
			st.Inventory.GPUs = append([]gpu.GPU(nil), st.Inventory.GPUs...)
			tc.change(&st)
			pub, err := Build("dgx-h100", st)
			if err != nil {
				t.Fatal(err)
			}
			checkResources(t, "dgx-h100", pub)
			devs := allDevices(pub, "dgx-h100")
			if _, ok := devs["gpu-0"]; !ok {
				t.Errorf("gpu-0 not published whole")
			}
			_, got := devs["gpu-0-mig-1g10gb-0"]
			_, set := counterSets(pub.Resources.Pools["dgx-h100"])["gpu-0-counters"]
			if got != tc.dynamic || set != tc.dynamic {
				t.Errorf("dynamic MIG device %v, counter set %v; want %v", got, set, tc.dynamic)
			}
			if _, ok := devs["gpu-1-mig-1g10gb-0"]; !ok {
				t.Errorf("gpu-1 lost its MIG devices")
			}
		})
	}
}

func TestBuildExclusiveOnly(t *testing.T) {
	_, st, _ := buildSim(t, "dgx-h100")
	st.ExclusiveOnly = map[string]bool{st.Inventory.GPUs[1].UUID: true}
	pub, err := Build("dgx-h100", st)
	if err != nil {
		t.Fatal(err)
	}
	checkResources(t, "dgx-h100", pub)
	devs := allDevices(pub, "dgx-h100")
	d := devs["gpu-1"]
	if d.AllowMultipleAllocations != nil || d.Capacity[CapacityMemory].RequestPolicy != nil || pub.Devices["gpu-1"].Shareable {
		t.Errorf("exclusive-only gpu-1 is shareable: %+v", d)
	}
	if d := devs["gpu-0"]; d.AllowMultipleAllocations == nil || !pub.Devices["gpu-0"].Shareable {
		t.Errorf("gpu-0 is not shareable")
	}
}

func TestBuildHealthTaints(t *testing.T) {
	tests := []struct {
		name   string
		health gpu.Health
		reason string
		effect resourceapi.DeviceTaintEffect
		value  string
	}{
		{name: "healthy", health: gpu.Healthy},
		{name: "recoverable xid", health: gpu.Unhealthy, reason: "xid 31", effect: resourceapi.DeviceTaintEffectNoSchedule, value: "xid-31"},
		{name: "double-bit ECC", health: gpu.Unhealthy, reason: "double-bit ECC error", effect: resourceapi.DeviceTaintEffectNoExecute, value: "double-bit-ECC-error"},
		{name: "lost", health: gpu.Lost, reason: "xid 79: gpu fell off the bus", effect: resourceapi.DeviceTaintEffectNoExecute, value: "xid-79-gpu-fell-off-the-bus"},
		{name: "lost without reason", health: gpu.Lost, effect: resourceapi.DeviceTaintEffectNoExecute, value: "Lost"},
		{name: "long reason", health: gpu.Unhealthy, reason: strings.Repeat("ab ", 40), effect: resourceapi.DeviceTaintEffectNoSchedule, value: strings.TrimSuffix(strings.Repeat("ab-", 21), "-")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, st, _ := buildSim(t, "dgx-h100")
			st.Inventory.GPUs = append([]gpu.GPU(nil), st.Inventory.GPUs...)
			st.Inventory.GPUs[4].Health, st.Inventory.GPUs[4].HealthReason = tc.health, tc.reason
			pub, err := Build("dgx-h100", st)
			if err != nil {
				t.Fatal(err)
			}
			checkResources(t, "dgx-h100", pub)
			devs := allDevices(pub, "dgx-h100")
			for _, name := range []string{"gpu-4", "gpu-4-mig-1g10gb-3"} {
				d := devs[name]
				if tc.effect == "" {
					if len(d.Taints) != 0 {
						t.Errorf("%s taints = %+v, want none", name, d.Taints)
					}
					continue
				}
				if len(d.Taints) != 1 || d.Taints[0].Key != TaintKey || d.Taints[0].Effect != tc.effect || d.Taints[0].Value != tc.value {
					t.Errorf("%s taints = %+v, want %s=%s:%s", name, d.Taints, TaintKey, tc.value, tc.effect)
				}
				if pub.Health[name] != tc.health {
					t.Errorf("%s health = %s, want %s", name, pub.Health[name], tc.health)
				}
			}
			if len(devs["gpu-5"].Taints) != 0 {
				t.Errorf("healthy gpu-5 tainted")
			}
		})
	}
}

func TestBuildManyGPUsSplitsSlices(t *testing.T) {
	// 16 MIG-capable GPUs: 16 counter sets need two slices of 8; 16*26
	// devices need 7 slices of at most 64.
	_, st, _ := buildSim(t, "dgx-h100")
	inv := st.Inventory
	cat := st.MIG[inv.GPUs[0].UUID]
	for i := range 8 {
		g := inv.GPUs[i]
		g.Index, g.Minor, g.UUID = 8+i, 8+i, g.UUID+"-b"
		inv.GPUs = append(inv.GPUs, g)
		st.MIG[g.UUID] = cat
	}
	st.Inventory = inv
	pub, err := Build("big", st)
	if err != nil {
		t.Fatal(err)
	}
	checkResources(t, "big", pub)
	pool := pub.Resources.Pools["big"]
	if len(counterSets(pool)) != 16 || len(pool.Slices) != 2+7 {
		t.Errorf("%d counter sets in %d slices, want 16 in 2 + 7 device slices", len(counterSets(pool)), len(pool.Slices))
	}
}

func TestBuildEmptyAndBadNode(t *testing.T) {
	pub, err := Build("node-a", NodeState{})
	if err != nil {
		t.Fatal(err)
	}
	if s := pub.Resources.Pools["node-a"].Slices; len(s) != 1 || len(s[0].Devices) != 0 {
		t.Errorf("empty node slices = %+v, want one empty slice", s)
	}
	if _, err := Build("Not A Node", NodeState{}); err == nil {
		t.Errorf("Build accepted an invalid node name")
	}
}

func TestSemverAndBusID(t *testing.T) {
	for in, want := range map[string]string{"8.0": "8.0.0", "550.54.15": "550.54.15", "12.4": "12.4.0", "535.104.05": "535.104.5", "9": "9.0.0", "": "", "1.2.3.4": "", "v1": ""} {
		got, ok := semver(in)
		if got != want || ok != (want != "") {
			t.Errorf("semver(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	for in, want := range map[string]string{"00000000:18:00.0": "0000:18:00.0", "0000:AB:00.1": "0000:ab:00.1", "18:00.0": "", "0000:18:00:0": "", "zz00:18:00.0": ""} {
		got, ok := pciBusID(in)
		if got != want || ok != (want != "") {
			t.Errorf("pciBusID(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}

func TestNVLinkDomainsPartialFabric(t *testing.T) {
	inv := gpu.Inventory{GPUs: []gpu.GPU{{Index: 0, UUID: "a"}, {Index: 1, UUID: "b"}, {Index: 2, UUID: "c"}, {Index: 3, UUID: "d"}},
		Links: []gpu.Link{{A: "a", B: "b", Level: gpu.LinkNVLink, NVLinks: 4}, {A: "b", B: "c", Level: gpu.LinkNVLink, NVLinks: 4},
			{A: "c", B: "d", Level: gpu.LinkSYS}, {A: "a", B: "zz", Level: gpu.LinkNVLink}}}
	got := nvlinkDomains("n1", inv)
	want := map[string]string{"a": "n1-nvl0", "b": "n1-nvl0", "c": "n1-nvl0", "d": "n1-nvl1"}
	if !maps.Equal(got, want) {
		t.Errorf("domains = %v, want %v", got, want)
	}
	long := strings.Repeat("n", 70)
	for _, d := range nvlinkDomains(long, inv) {
		if len(d) > resourceapi.DeviceAttributeMaxValueLength {
			t.Errorf("domain %q longer than an attribute may be", d)
		}
	}
}

func TestMemoryPolicyStep(t *testing.T) {
	for _, tc := range []struct {
		mem       uint64
		step, min int64
	}{
		{80 << 30, 1 << 30, 1 << 30},
		{(80 << 30) + (256 << 20), 256 << 20, 256 << 20},
		{46068 << 20, 1 << 20, 256 << 20},
		{(80 << 30) + 1, 0, 0},
		{256 << 20, 1 << 20, 1 << 20},
	} {
		p := memoryPolicy(tc.mem)
		var step, min int64
		if p.ValidRange != nil {
			step, min = p.ValidRange.Step.Value(), p.ValidRange.Min.Value()
		}
		if step != tc.step || min != tc.min || p.Default.Cmp(*resource.NewQuantity(int64(tc.mem), resource.BinarySI)) != 0 {
			t.Errorf("memoryPolicy(%d) step %d min %d default %v, want step %d min %d", tc.mem, step, min, p.Default, tc.step, tc.min)
		}
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func boolStr(b bool) string { return strconv.FormatBool(b) }

func counterValue(c resourceapi.Counter) int64 { return c.Value.Value() }

// TestBuildMemoryLimitMode: a whole GPU with a memory limit mode carries
// it as the memoryLimitMode attribute (the scheduler's sign that borrowers
// there are evicted first); a GPU without one has none.
func TestBuildMemoryLimitMode(t *testing.T) {
	_, st, _ := buildSim(t, "dgx-h100")
	st.MemoryLimitModes = map[string]string{st.Inventory.GPUs[0].UUID: "driver", st.Inventory.GPUs[1].UUID: "mps"}
	pub, err := Build("dgx-h100", st)
	if err != nil {
		t.Fatal(err)
	}
	checkResources(t, "dgx-h100", pub)
	devs := allDevices(pub, "dgx-h100")
	for name, want := range map[string]string{"gpu-0": "driver", "gpu-1": "mps", "gpu-2": ""} {
		a, ok := devs[name].Attributes[AttrMemoryLimitMode]
		switch {
		case want == "" && ok:
			t.Errorf("%s has memoryLimitMode %v, want none", name, a)
		case want != "" && (a.StringValue == nil || *a.StringValue != want):
			t.Errorf("%s memoryLimitMode = %v, want %q", name, a, want)
		}
	}
}
