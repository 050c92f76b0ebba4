package dra

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/mig"
	"github.com/gpud/gpud/pkg/simnode"
)

// simState reads a simulated node as the wiring would: the inventory from
// discovery and each GPU's MIG catalog from pkg/mig.
func simState(t testing.TB, n *simnode.Node, name string) NodeState {
	t.Helper()
	inv, err := discovery.New(n, name, nil).Inventory()
	if err != nil {
		t.Fatalf("discovery: %v", err)
	}
	st := NodeState{Inventory: inv, MIG: map[string]MIGCatalog{}}
	devlib := device.New(n)
	for _, g := range inv.GPUs {
		if !g.MIGCapable {
			continue
		}
		h, ret := n.DeviceGetHandleByIndex(g.Index)
		if ret != nvml.SUCCESS {
			t.Fatalf("gpu %d: %v", g.Index, ret)
		}
		c, err := mig.ReadCatalog(h, devlib)
		if err != nil {
			t.Fatalf("catalog of gpu %d: %v", g.Index, err)
		}
		st.MIG[g.UUID] = catalogOf(c, LiveMIGModeChange(g.Architecture))
	}
	return st
}

// catalogOf converts a mig.Catalog, as the wiring does.
func catalogOf(c mig.Catalog, live bool) MIGCatalog {
	out := MIGCatalog{MemorySlices: c.MemorySlices, ComputeSlices: c.ComputeSlices, LiveModeChange: live}
	for _, p := range c.Profiles {
		mp := MIGProfile{Name: p.Name, ComputeSlices: p.Slices, MemoryBytes: p.MemoryMiB << 20}
		for _, pl := range p.Placements {
			mp.Placements = append(mp.Placements, Placement{Start: pl.Start, Size: pl.Size})
		}
		out.Profiles = append(out.Profiles, mp)
	}
	return out
}

func buildSim(t testing.TB, profile string) (*simnode.Node, NodeState, Published) {
	t.Helper()
	n := simnode.NewBuiltin(profile)
	t.Cleanup(n.Close)
	st := simState(t, n, profile)
	pub, err := Build(profile, st)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	checkResources(t, profile, pub)
	return n, st, pub
}

var cIdentifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// checkResources asserts the limits the API server validates
// (k8s.io/kubernetes pkg/apis/resource/validation at v1.37) and the
// cross-references resourceslice checks, so a failure names the rule.
func checkResources(t testing.TB, pool string, pub Published) {
	t.Helper()
	p, ok := pub.Resources.Pools[pool]
	if !ok || len(pub.Resources.Pools) != 1 {
		t.Fatalf("pools = %v, want only %q", keys(pub.Resources.Pools), pool)
	}
	sets := map[string]resourceapi.CounterSet{}
	names := map[string]bool{}
	for i, s := range p.Slices {
		if len(s.Devices) > 0 && len(s.SharedCounters) > 0 {
			t.Errorf("slice %d has devices and counters; the API allows one of them", i)
		}
		if len(s.SharedCounters) > resourceapi.ResourceSliceMaxCounterSets {
			t.Errorf("slice %d: %d counter sets > %d", i, len(s.SharedCounters), resourceapi.ResourceSliceMaxCounterSets)
		}
		for _, cs := range s.SharedCounters {
			if errs := validation.IsDNS1123Label(cs.Name); len(errs) > 0 {
				t.Errorf("counter set %q: %v", cs.Name, errs)
			}
			if _, dup := sets[cs.Name]; dup {
				t.Errorf("counter set %q twice in the pool", cs.Name)
			}
			if len(cs.Counters) == 0 || len(cs.Counters) > resourceapi.ResourceSliceMaxCountersPerCounterSet {
				t.Errorf("counter set %q: %d counters", cs.Name, len(cs.Counters))
			}
			for c := range cs.Counters {
				if errs := validation.IsDNS1123Label(c); len(errs) > 0 {
					t.Errorf("counter %q: %v", c, errs)
				}
			}
			sets[cs.Name] = cs
		}
		limit := resourceapi.ResourceSliceMaxDevices
		for _, d := range s.Devices {
			if len(d.Taints) > 0 || len(d.ConsumesCounters) > 0 {
				limit = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures
			}
		}
		if len(s.Devices) > limit {
			t.Errorf("slice %d: %d devices > %d", i, len(s.Devices), limit)
		}
	}
	for _, s := range p.Slices {
		for _, d := range s.Devices {
			checkDevice(t, d, sets)
			if names[d.Name] {
				t.Errorf("device %q twice in the pool", d.Name)
			}
			names[d.Name] = true
			if _, ok := pub.Devices[d.Name]; !ok {
				t.Errorf("device %q published but not in the device table", d.Name)
			}
		}
	}
	if len(names) != len(pub.Devices) {
		t.Errorf("%d devices published, %d in the device table", len(names), len(pub.Devices))
	}
}

func checkDevice(t testing.TB, d resourceapi.Device, sets map[string]resourceapi.CounterSet) {
	t.Helper()
	if errs := validation.IsDNS1123Label(d.Name); len(errs) > 0 {
		t.Errorf("device %q: %v", d.Name, errs)
	}
	if n := len(d.Attributes) + len(d.Capacity); n > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
		t.Errorf("device %q: %d attributes and capacities", d.Name, n)
	}
	for name, a := range d.Attributes {
		id := string(name)
		if dom, rest, ok := strings.Cut(id, "/"); ok {
			if len(validation.IsDNS1123Subdomain(dom)) > 0 || len(dom) > resourceapi.DeviceMaxDomainLength {
				t.Errorf("device %q attribute %q: bad domain", d.Name, name)
			}
			id = rest
		}
		if !cIdentifier.MatchString(id) || len(id) > resourceapi.DeviceMaxIDLength {
			t.Errorf("device %q attribute %q: not a C identifier of at most %d", d.Name, name, resourceapi.DeviceMaxIDLength)
		}
		set := 0
		for _, p := range []bool{a.StringValue != nil, a.IntValue != nil, a.BoolValue != nil, a.VersionValue != nil} {
			if p {
				set++
			}
		}
		if set != 1 {
			t.Errorf("device %q attribute %q: %d values set", d.Name, name, set)
		}
		if a.StringValue != nil && len(*a.StringValue) > resourceapi.DeviceAttributeMaxValueLength {
			t.Errorf("device %q attribute %q: longer than %d", d.Name, name, resourceapi.DeviceAttributeMaxValueLength)
		}
	}
	multi := d.AllowMultipleAllocations != nil && *d.AllowMultipleAllocations
	for name, c := range d.Capacity {
		if c.RequestPolicy == nil {
			continue
		}
		if !multi {
			t.Errorf("device %q capacity %q: request policy on a device that is not multi-allocatable", d.Name, name)
		}
		p := c.RequestPolicy
		if p.Default == nil || p.Default.Cmp(c.Value) > 0 {
			t.Errorf("device %q capacity %q: default %v not within %v", d.Name, name, p.Default, c.Value)
		}
		if r := p.ValidRange; r != nil {
			if r.Min == nil || r.Min.Sign() < 0 || r.Min.Cmp(*p.Default) > 0 {
				t.Errorf("device %q capacity %q: min %v", d.Name, name, r.Min)
			}
			if r.Step != nil {
				if r.Min.Value()+r.Step.Value() > c.Value.Value() {
					t.Errorf("device %q capacity %q: min+step above capacity", d.Name, name)
				}
				if (p.Default.Value()-r.Min.Value())%r.Step.Value() != 0 {
					t.Errorf("device %q capacity %q: default %v is not min %v + n*step %v", d.Name, name, p.Default, r.Min, r.Step)
				}
			}
		}
	}
	if len(d.ConsumesCounters) > resourceapi.ResourceSliceMaxDeviceCounterConsumptionsPerDevice {
		t.Errorf("device %q: %d counter consumptions", d.Name, len(d.ConsumesCounters))
	}
	for _, cc := range d.ConsumesCounters {
		set, ok := sets[cc.CounterSet]
		if !ok {
			t.Errorf("device %q consumes from unknown counter set %q", d.Name, cc.CounterSet)
			continue
		}
		for c, v := range cc.Counters {
			have, ok := set.Counters[c]
			if !ok || v.Value.Cmp(have.Value) > 0 {
				t.Errorf("device %q consumes %v of %s/%s, which has %v", d.Name, v.Value.String(), cc.CounterSet, c, have.Value.String())
			}
		}
	}
	if len(d.Taints) > resourceapi.DeviceTaintsMaxLength {
		t.Errorf("device %q: %d taints", d.Name, len(d.Taints))
	}
	for _, tn := range d.Taints {
		if errs := validation.IsQualifiedName(tn.Key); len(errs) > 0 {
			t.Errorf("device %q taint key %q: %v", d.Name, tn.Key, errs)
		}
		if errs := validation.IsValidLabelValue(tn.Value); len(errs) > 0 {
			t.Errorf("device %q taint value %q: %v", d.Name, tn.Value, errs)
		}
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// allDevices lists the pool's devices by name.
func allDevices(pub Published, pool string) map[string]resourceapi.Device {
	out := map[string]resourceapi.Device{}
	for _, s := range pub.Resources.Pools[pool].Slices {
		for _, d := range s.Devices {
			out[d.Name] = d
		}
	}
	return out
}

func counterSets(p resourceslice.Pool) map[string]resourceapi.CounterSet {
	out := map[string]resourceapi.CounterSet{}
	for _, s := range p.Slices {
		for _, cs := range s.SharedCounters {
			out[cs.Name] = cs
		}
	}
	return out
}

func attrString(t testing.TB, d resourceapi.Device, name resourceapi.QualifiedName) string {
	t.Helper()
	a, ok := d.Attributes[name]
	if !ok {
		t.Fatalf("device %s has no attribute %q", d.Name, name)
	}
	switch {
	case a.StringValue != nil:
		return *a.StringValue
	case a.VersionValue != nil:
		return *a.VersionValue
	case a.IntValue != nil:
		return fmt.Sprint(*a.IntValue)
	case a.BoolValue != nil:
		return fmt.Sprint(*a.BoolValue)
	}
	return ""
}

// withMIG returns inv with MIG on for GPU index and the given devices.
func withMIG(inv gpu.Inventory, index int, devs ...gpu.MIGDevice) gpu.Inventory {
	out := inv
	out.GPUs = append([]gpu.GPU(nil), inv.GPUs...)
	for i := range out.GPUs {
		if out.GPUs[i].Index == index {
			out.GPUs[i].MIGEnabled = true
			out.GPUs[i].MIGDevices = devs
		}
	}
	return out
}
