package view

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

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
