package view

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpud/gpud/pkg/gputel"
)

const gib = int64(1) << 30

// nodesOf is telemetry with the given devices (by node, then uuid).
func nodesOf(devs map[string]map[string]gputel.Device) map[string]*gputel.Node {
	out := make(map[string]*gputel.Node, len(devs))
	for node, d := range devs {
		out[node] = &gputel.Node{Devices: d}
	}
	return out
}

// uuidOf is device dev's uuid on node n of v.
func uuidOf(t *testing.T, v *View, node, dev string) string {
	t.Helper()
	d := v.Node(node).Devices[dev]
	if d == nil {
		t.Fatalf("no device %s on %s", dev, node)
	}
	u, ok := attrString(d, "uuid")
	if !ok {
		t.Fatalf("device %s on %s has no uuid", dev, node)
	}
	return u
}

func onlyNode(name string) func(*Node) bool { return func(n *Node) bool { return n.Name == name } }

// TestMeasureHealth: a GPU reported unhealthy is left out for whole GPUs,
// fractions and its MIG placements; other nodes and GPUs are not.
func TestMeasureHealth(t *testing.T) {
	c := newCluster(t)
	v := c.build(t)
	reports := map[string]map[string]gputel.Device{"h100-a": {}}
	for i := range 7 {
		dev := "gpu-" + strconv.Itoa(i)
		reports["h100-a"][uuidOf(t, v, "h100-a", dev)] = gputel.Device{Unhealthy: true, HealthReason: "Xid 79"}
	}
	m := v.Measure(nodesOf(reports), MeasureConfig{})
	if got := len(m.Down()); got != 7 || m.Down()[0] != (DownDevice{Node: "h100-a", Device: "gpu-0", Reason: "Xid 79"}) {
		t.Errorf("Down() = %+v", m.Down())
	}
	if !m.Reported("h100-a") || m.Reported("a100-a") {
		t.Errorf("Reported: h100-a %v, a100-a %v", m.Reported("h100-a"), m.Reported("a100-a"))
	}
	opt := Options{Measured: m, NodeFilter: onlyNode("h100-a")}
	tests := []struct {
		name  string
		claim *resourceapi.ResourceClaim
	}{
		{"whole", claim("w", exact("gpu", "gpu.gpud.io", 1))},
		{"fraction", claim("f", fraction("gpu", "10Gi", ""))},
		{"MIG", claim("m", migReq("mig", "1g.10gb"))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			allocs, err := place(t, v, opt, tc.claim)
			if err != nil {
				t.Fatal(err)
			}
			if d := allocs[0].Result.Devices.Results[0].Device; d != "gpu-7" && !strings.HasPrefix(d, "gpu-7-mig-") {
				t.Errorf("placed on %s, want the healthy GPU 7", d)
			}
		})
	}
	if _, err := place(t, v, opt, claim("two", exact("gpu", "gpu.gpud.io", 2))); !errors.Is(err, ErrNoFit) {
		t.Errorf("two GPUs with one healthy: %v", err)
	}
	if _, err := place(t, v, Options{NodeFilter: onlyNode("h100-a")}, claim("two", exact("gpu", "gpu.gpud.io", 2))); err != nil {
		t.Errorf("without telemetry: %v", err)
	}
	// Made for another view: ignored.
	other := c.build(t)
	if _, err := place(t, other, opt, claim("eight", exact("gpu", "gpu.gpud.io", 8))); err != nil {
		t.Errorf("another view's telemetry applied: %v", err)
	}
}

// TestMeasureMIGDevice: a MIG device reported unhealthy (an existing one,
// published with its own uuid) is left out alone; its GPU's other MIG
// devices still take pods.
func TestMeasureMIGDevice(t *testing.T) {
	c := newCluster(t)
	const down = "MIG-0000-test"
	var name string
	for i, sl := range c.in.Slices {
		if sl.Spec.Pool.Name != "a100-a" || name != "" {
			continue
		}
		sl = sl.DeepCopy()
		for k := range sl.Spec.Devices {
			d := &sl.Spec.Devices[k]
			if p := d.Attributes["profile"].StringValue; p != nil && *p == "1g.5gb" && name == "" {
				u := down
				d.Attributes["uuid"] = resourceapi.DeviceAttribute{StringValue: &u}
				name = d.Name
			}
		}
		c.in.Slices[i] = sl
	}
	if name == "" {
		t.Fatal("no 1g.5gb MIG device on a100-a")
	}
	v := c.build(t)
	m := v.Measure(nodesOf(map[string]map[string]gputel.Device{"a100-a": {down: {Unhealthy: true, HealthReason: "Xid 94"}}}), MeasureConfig{})
	if want := []DownDevice{{Node: "a100-a", Device: name, Reason: "Xid 94", MIG: true}}; !slices.Equal(m.Down(), want) {
		t.Errorf("Down() = %+v, want %+v", m.Down(), want)
	}
	// fill places 1g.5gb slices until none fits, never on the device
	// reported down.
	fill := func(v *View, m *Measured) int {
		opt := Options{Measured: m, NodeFilter: onlyNode("a100-a")}
		placed := 0
		for {
			a, err := place(t, v, opt, claim("m"+strconv.Itoa(placed), migReq("mig", "1g.5gb")))
			if err != nil {
				return placed
			}
			if got := a[0].Result.Devices.Results[0].Device; got == name && m != nil {
				t.Fatalf("placed on %s, reported unhealthy", got)
			}
			if err := v.Assume(a...); err != nil {
				t.Fatal(err)
			}
			placed++
		}
	}
	with, without := fill(v, m), fill(c.build(t), nil)
	if with != without-1 {
		t.Errorf("%d 1g.5gb slices placed with %s reported unhealthy, %d without: want one fewer", with, name, without)
	}
}

// TestMeasureMemory: a shared GPU's measured use above its requests
// closes it to fractions beyond the real free memory; with overcommit, a
// use below them opens it up to the measured free memory less the margin,
// and Measured.Check accepts that where Check does not.
func TestMeasureMemory(t *testing.T) {
	c := newCluster(t)
	v := c.build(t)
	opt := Options{NodeFilter: onlyNode("h100-a")}
	tenant, err := place(t, v, opt, claim("tenant", fraction("gpu", "40Gi", "")))
	if err != nil {
		t.Fatal(err)
	}
	c.commit(t, tenant)
	v = c.build(t)
	dev := tenant[0].Result.Devices.Results[0].Device
	capQ := v.Node("h100-a").Devices[dev].Capacity[CapacityMemory].Value
	total := capQ.Value()
	uuid := uuidOf(t, v, "h100-a", dev)
	at := func(m *Measured, mem string) string {
		t.Helper()
		o := opt
		o.Measured = m
		a, err := place(t, v, o, claim("new", fraction("gpu", mem, "")))
		if err != nil {
			t.Fatal(err)
		}
		return a[0].Result.Devices.Results[0].Device
	}
	if got := at(nil, "30Gi"); got != dev {
		t.Fatalf("without telemetry a 30Gi fraction goes to %s, want next to the tenant on %s", got, dev)
	}
	used := 70 * gib
	m := v.Measure(nodesOf(map[string]map[string]gputel.Device{"h100-a": {uuid: {MemoryUsedBytes: uint64(used)}}}), MeasureConfig{})
	if got := at(m, "30Gi"); got == dev {
		t.Errorf("30Gi fraction placed on %s, where the tenant uses 70Gi of %d bytes", dev, total)
	}
	if got := at(m, "5Gi"); got != dev {
		t.Errorf("5Gi fraction on %s, want %s (it fits the real free memory)", got, dev)
	}
	want := []MemoryExcess{{Node: "h100-a", Device: dev, UsedBytes: used, RequestedBytes: 40 * gib, MemoryBytes: total}}
	if !slices.Equal(m.Excess(), want) {
		t.Errorf("Excess() = %+v, want %+v", m.Excess(), want)
	}

	// Overcommit: the tenant uses 5Gi of its 40Gi.
	used = 5 * gib
	reports := map[string]map[string]gputel.Device{"h100-a": {uuid: {MemoryUsedBytes: uint64(used)}}}
	m = v.Measure(nodesOf(reports), MeasureConfig{Overcommit: true})
	room := total - used - total/100*DefaultMarginPercent
	o := opt
	o.Measured = m
	// Only the tenant's GPU: the others are taken whole.
	var others []*resourceapi.AllocationResult
	for _, gp := range v.Node("h100-a").GPUs {
		if gp.Whole != dev {
			others = append(others, &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
				{Request: "x", Driver: DriverName, Pool: "h100-a", Device: gp.Whole}}}})
		}
	}
	for _, a := range others {
		if err := v.Assume(Allocation{Claim: claim("x"), Result: a}); err != nil {
			t.Fatal(err)
		}
	}
	mib := func(b int64) string { return strconv.FormatInt(b>>20, 10) + "Mi" }
	fits, err := place(t, v, o, claim("fits", fraction("gpu", mib(room-gib), "")))
	if err != nil {
		t.Fatalf("within the measured room less the margin: %v", err)
	}
	if _, err := place(t, v, o, claim("over", fraction("gpu", mib(room+gib), ""))); !errors.Is(err, ErrNoFit) {
		t.Errorf("into the margin: %v", err)
	}
	if err := Check(v, fits[0].Result); !errors.Is(err, ErrOverAllocated) {
		t.Errorf("Check of an overcommitted fraction: %v", err)
	}
	if err := m.Check(fits[0].Result); err != nil {
		t.Errorf("Measured.Check of a fraction within overcommit's room: %v", err)
	}
	// Without overcommit the requests hold.
	o.Measured = v.Measure(nodesOf(reports), MeasureConfig{})
	if _, err := place(t, v, o, claim("strict", fraction("gpu", mib(total-40*gib+gib), ""))); !errors.Is(err, ErrNoFit) {
		t.Errorf("beyond the requests without overcommit: %v", err)
	}
}

// driverMode gives the whole GPUs of node the memoryLimitMode attribute
// mode, as the agent's DRA driver publishes it.
func (c *cluster) driverMode(node, mode string) {
	for i, sl := range c.in.Slices {
		if sl.Spec.Pool.Name != node {
			continue
		}
		sl = sl.DeepCopy()
		for k := range sl.Spec.Devices {
			d := &sl.Spec.Devices[k]
			if t := d.Attributes["type"].StringValue; t != nil && *t == "gpu" {
				m := mode
				d.Attributes[attrMemoryLimitMode] = resourceapi.DeviceAttribute{StringValue: &m}
			}
		}
		c.in.Slices[i] = sl
	}
}

// borrowing is a fraction claim of mem whose opaque GPUConfig sets
// memoryLimit limit.
func borrowing(name, mem, limit string) *resourceapi.ResourceClaim {
	c := claim(name, fraction("gpu", mem, ""))
	c.Spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{
		Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: DriverName, Parameters: runtime.RawExtension{
			Raw: []byte(`{"apiVersion":"gpu.gpud.io/v1alpha1","kind":"GPUConfig","memoryLimit":"` + limit + `"}`)}},
	}}}
	return c
}

// TestMeasureBorrowers: on a GPU in driver mode, a borrower's measured use
// above its request (20Gi asked, 70Gi limit, 60Gi used) does not keep out
// a 40Gi fraction that fits the GPU by requests: the driver evicts the
// borrower for it, which Evicts tells; Borrowing lists the GPU and Excess
// does not. The same use counts as it is without the claims, in MPS mode,
// and when the agent does not attribute it to the claim; and a fraction
// past the requests is refused whatever is borrowed.
func TestMeasureBorrowers(t *testing.T) {
	setup := func(t *testing.T, mode string, open ...string) (*cluster, *View, string, string) {
		c := newCluster(t)
		if mode != "" {
			c.driverMode("h100-a", mode)
		}
		v := c.build(t)
		b, err := place(t, v, Options{NodeFilter: onlyNode("h100-a")}, borrowing("borrower", "20Gi", "70Gi"))
		if err != nil {
			t.Fatal(err)
		}
		c.commit(t, b)
		v = c.build(t)
		dev := b[0].Result.Devices.Results[0].Device
		for _, gp := range v.Node("h100-a").GPUs { // only the borrower's GPU and open are
			if gp.Whole != dev && !slices.Contains(open, gp.Whole) {
				a := &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
					{Request: "x", Driver: DriverName, Pool: "h100-a", Device: gp.Whole}}}}
				if err := v.Assume(Allocation{Claim: claim("x-" + gp.Whole), Result: a}); err != nil {
					t.Fatal(err)
				}
			}
		}
		return c, v, dev, uuidOf(t, v, "h100-a", dev)
	}
	used := 60 * gib
	report := func(uuid string, attributed bool) map[string]*gputel.Node {
		r := gputel.Device{MemoryUsedBytes: uint64(used)}
		if attributed {
			r.ClaimMemoryBytes = map[string]uint64{"uid-borrower": uint64(used)}
		}
		return nodesOf(map[string]map[string]gputel.Device{"h100-a": {uuid: r}})
	}
	fits := func(t *testing.T, v *View, m *Measured, mem string) error {
		t.Helper()
		_, err := place(t, v, Options{Measured: m, NodeFilter: onlyNode("h100-a")}, claim("new", fraction("gpu", mem, "")))
		return err
	}

	t.Run("driver mode", func(t *testing.T) {
		c, v, dev, uuid := setup(t, memoryLimitDriver)
		m := v.Measure(report(uuid, true), MeasureConfig{Claims: c.in.Claims})
		if err := fits(t, v, m, "40Gi"); err != nil {
			t.Fatalf("40Gi next to a borrower using 60Gi of its 20Gi request: %v, want placed (the driver evicts the borrower)", err)
		}
		capQ := v.Node("h100-a").Devices[dev].Capacity[CapacityMemory].Value
		total := capQ.Value()
		if got, want := m.Evicts("h100-a", dev, 40*gib), used+40*gib-total; got != want {
			t.Errorf("Evicts(40Gi) = %d, want %d (what the measured free memory lacks)", got, want)
		}
		if got := m.Evicts("h100-a", dev, 10*gib); got != 0 {
			t.Errorf("Evicts(10Gi) = %d, want 0 (it fits the free memory)", got)
		}
		want := []BorrowedGPU{{Node: "h100-a", Device: dev, BorrowedBytes: 40 * gib, FreeBytes: total - used}}
		if got := m.Borrowing(); !slices.Equal(got, want) {
			t.Errorf("Borrowing() = %+v, want %+v", got, want)
		}
		if got := m.Excess(); len(got) != 0 {
			t.Errorf("Excess() = %+v, want none: borrowed memory is reclaimable", got)
		}
		if err := fits(t, v, m, "61Gi"); !errors.Is(err, ErrNoFit) {
			t.Errorf("61Gi (past the GPU's memory by requests): %v, want ErrNoFit", err)
		}
		// A what-if without the borrower gives its whole use back once.
		alloc := Allocation{Claim: c.in.Claims[0], Result: c.in.Claims[0].Status.Allocation}
		ver := v.Node("h100-a").usageVer
		m.Release(alloc)
		if v.Node("h100-a").usageVer == ver {
			t.Error("Release left the node's usage version: the models kept from the placements above would not see the memory it gives back")
		}
		if got := m.Evicts("h100-a", dev, 40*gib); got != 0 {
			t.Errorf("Evicts with the borrower released = %d, want 0", got)
		}
		m.Hold(alloc)
		if got := m.Borrowing(); len(got) != 1 {
			t.Errorf("Borrowing() after Hold = %+v, want the borrower back", got)
		}
	})
	t.Run("a GPU without a borrower to evict first", func(t *testing.T) {
		c, v, dev, uuid := setup(t, memoryLimitDriver, "gpu-7")
		if dev == "gpu-7" {
			t.Fatal("the borrower is on gpu-7, the GPU left open beside it")
		}
		m := v.Measure(report(uuid, true), MeasureConfig{Claims: c.in.Claims})
		a, err := place(t, v, Options{Measured: m, NodeFilter: onlyNode("h100-a")}, claim("new", fraction("gpu", "40Gi", "")))
		if err != nil {
			t.Fatal(err)
		}
		if got := a[0].Result.Devices.Results[0].Device; got != "gpu-7" {
			t.Errorf("40Gi placed on %s, where the driver evicts the borrower; want gpu-7, where it evicts nobody", got)
		}
		// Where it fits the measured free memory, the borrower's GPU is as
		// good as any.
		if got := m.evicting(mustItem(t, v, claim("small", fraction("gpu", "10Gi", "")))); len(got) != 0 {
			t.Errorf("a 10Gi fraction evicts on %v, want nowhere", got)
		}
	})
	for _, tc := range []struct {
		name, mode string
		claims     bool
		attributed bool
	}{
		{"no claims given", memoryLimitDriver, false, true},
		{"mps mode", "mps", true, true},
		{"no attribute", "", true, true},
		{"use not attributed", memoryLimitDriver, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, v, dev, uuid := setup(t, tc.mode)
			cfg := MeasureConfig{}
			if tc.claims {
				cfg.Claims = c.in.Claims
			}
			m := v.Measure(report(uuid, tc.attributed), cfg)
			if err := fits(t, v, m, "40Gi"); !errors.Is(err, ErrNoFit) {
				t.Errorf("40Gi with 60Gi used: %v, want ErrNoFit (nothing reclaimable)", err)
			}
			if got := m.Evicts("h100-a", dev, 40*gib); got != 0 {
				t.Errorf("Evicts = %d, want 0", got)
			}
		})
	}
}

// mustItem is the one item claim c demands of v.
func mustItem(t *testing.T, v *View, c *resourceapi.ResourceClaim) *Item {
	t.Helper()
	items, _, err := v.Demand([]*resourceapi.ResourceClaim{c})
	if err != nil || len(items) != 1 {
		t.Fatalf("Demand(%s) = %v, %v; want one item", c.Name, items, err)
	}
	return items[0]
}
