package view

import (
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestBuildSimulatedNodes(t *testing.T) {
	v := newCluster(t).build(t)
	if got := len(v.Nodes()); got != 2 {
		t.Fatalf("%d nodes, want 2", got)
	}
	h := v.Node("h100-a")
	if len(h.GPUs) != 8 {
		t.Fatalf("h100-a: %d GPUs, want 8", len(h.GPUs))
	}
	for i, g := range h.GPUs {
		if g.Index != i || g.Whole != "gpu-"+string(rune('0'+i)) || !strings.Contains(g.Model, "H100") ||
			g.MemoryBytes != 80<<30 || g.ComputeCapability != "9.0" || g.NVLinkDomain == "" || g.UUID == "" || len(g.MIG) == 0 {
			t.Errorf("h100-a gpu %d: %+v", i, g)
		}
		if !h.Devices[g.Whole].Shareable {
			t.Errorf("h100-a %s not shareable", g.Whole)
		}
	}
	if h.GPUs[0].NVLinkDomain != h.GPUs[7].NVLinkDomain {
		t.Errorf("dgx-h100 GPUs in different NVLink domains: %q, %q", h.GPUs[0].NVLinkDomain, h.GPUs[7].NVLinkDomain)
	}
	d := h.Devices["gpu-3-mig-1g10gb-6"]
	if d == nil || !d.MIG || d.Start != 6 || d.Size != 1 || d.ComputeSlices != 1 || d.GPU != 3 {
		t.Errorf("h100-a gpu-3-mig-1g10gb-6: %+v", d)
	}
	a := v.Node("a100-a")
	if a.GPUs[0].Whole != "" || len(a.GPUs[0].MIG) == 0 || a.GPUs[2].Whole != "gpu-2" {
		t.Errorf("a100-a: gpu 0 %+v, gpu 2 %+v", a.GPUs[0], a.GPUs[2])
	}
	if a.GPUs[0].Model == "" || a.GPUs[0].ComputeCapability != "8.0" {
		t.Errorf("a100-a MIG GPU facts from its MIG devices: %+v", a.GPUs[0])
	}
	if err := Check(v); err != nil {
		t.Errorf("Check on an empty cluster: %v", err)
	}
}

func TestBuildSkipsBadObjects(t *testing.T) {
	str := func(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: &s} }
	tests := []struct {
		name   string
		mutate func(c *cluster)
		want   string // substring of a skip
		// overAllocated: the claims kept over-allocate, Check must say so.
		overAllocated bool
	}{
		{name: "missing type", want: "\"type\" missing", mutate: func(c *cluster) {
			delete(gpuDevice(c).Attributes, "type")
		}},
		{name: "ill-typed index", want: "\"index\" missing", mutate: func(c *cluster) {
			gpuDevice(c).Attributes["index"] = str("zero")
		}},
		{name: "unknown type", want: "type \"tpu\"", mutate: func(c *cluster) {
			gpuDevice(c).Attributes["type"] = str("tpu")
		}},
		{name: "unknown counter set", want: "unknown counter set", mutate: func(c *cluster) {
			for _, s := range c.in.Slices {
				for i := range s.Spec.Devices {
					if len(s.Spec.Devices[i].ConsumesCounters) > 0 {
						s.Spec.Devices[i].ConsumesCounters[0].CounterSet = "nope"
						return
					}
				}
			}
		}},
		{name: "placement outside the GPU", want: "outside 8 memory slices", mutate: func(c *cluster) {
			for _, s := range c.in.Slices {
				for i := range s.Spec.Devices {
					if s.Spec.Devices[i].Attributes["type"].StringValue != nil && *s.Spec.Devices[i].Attributes["type"].StringValue == "mig" {
						v := int64(7)
						s.Spec.Devices[i].Attributes["placementSize"] = resourceapi.DeviceAttribute{IntValue: &v}
						s.Spec.Devices[i].Attributes["placementStart"] = resourceapi.DeviceAttribute{IntValue: &v}
						return
					}
				}
			}
		}},
		{name: "node unknown", want: "node \"h100-a\" not found", mutate: func(c *cluster) {
			c.in.Nodes = c.in.Nodes[1:]
		}},
		{name: "incomplete pool", want: "generation 1 has", mutate: func(c *cluster) {
			for _, s := range c.in.Slices {
				if s.Spec.Pool.Name == "h100-a" {
					s.Spec.Pool.ResourceSliceCount++
				}
			}
		}},
		{name: "not node-local", want: "not local to one node", mutate: func(c *cluster) {
			s := c.in.Slices[0].DeepCopy()
			s.Name, s.Spec.NodeName = "all", nil
			c.in.Slices = append(c.in.Slices, s)
		}},
		{name: "bad class CEL", want: "DeviceClass broken", mutate: func(c *cluster) {
			c.in.Classes = append(c.in.Classes, &resourceapi.DeviceClass{})
			c.in.Classes[2].Name = "broken"
			c.in.Classes[2].Spec.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: "device.nope("}}}
		}},
		{name: "claim on unknown device", want: "not published", mutate: func(c *cluster) {
			cl := claim("ghost", exact("gpu", "gpu.gpud.io", 1))
			cl.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
				{Request: "gpu", Driver: DriverName, Pool: "h100-a", Device: "gpu-99"}}}}
			c.in.Claims = append(c.in.Claims, cl)
		}},
		{name: "a stale device does not hide the claim's others", want: "h100-a/gpu-99", mutate: func(c *cluster) {
			cl := claim("half", exact("gpu", "gpu.gpud.io", 2))
			cl.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
				{Request: "gpu", Driver: DriverName, Pool: "h100-a", Device: "gpu-99"},
				{Request: "gpu", Driver: DriverName, Pool: "h100-a", Device: "gpu-2-mig-7g80gb-0"}}}}
			c.in.Claims = append(c.in.Claims, cl)
			other := claim("other", migReq("mig", "1g.10gb"))
			other.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
				{Request: "mig", Driver: DriverName, Pool: "h100-a", Device: "gpu-2-mig-1g10gb-3"}}}}
			c.in.Claims = append(c.in.Claims, other)
		}, overAllocated: true},
		{name: "negative capacity", want: "out of range", mutate: func(c *cluster) {
			gpuDevice(c).Capacity["memory"] = resourceapi.DeviceCapacity{Value: resource.MustParse("-1")}
		}},
		{name: "nil objects", mutate: func(c *cluster) {
			c.in.Slices = append(c.in.Slices, nil)
			c.in.Claims = append(c.in.Claims, nil)
			c.in.Nodes = append(c.in.Nodes, nil)
			c.in.Classes = append(c.in.Classes, nil)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			tc.mutate(c)
			v, skips := Build(c.in)
			if v == nil {
				t.Fatal("nil view")
			}
			var all []string
			for _, s := range skips {
				all = append(all, s.String())
			}
			joined := strings.Join(all, "\n")
			if tc.want == "" && len(skips) > 0 || tc.want != "" && !strings.Contains(joined, tc.want) {
				t.Fatalf("skips:\n%s\nwant one containing %q", joined, tc.want)
			}
			if err := Check(v); (err != nil) != tc.overAllocated {
				t.Errorf("Check: %v, want over-allocated %v", err, tc.overAllocated)
			}
		})
	}
}

// gpuDevice is h100-a's first whole-GPU device in the cluster's slices.
func gpuDevice(c *cluster) *resourceapi.Device {
	for _, s := range c.in.Slices {
		for i := range s.Spec.Devices {
			if s.Spec.Devices[i].Name == "gpu-0" {
				return &s.Spec.Devices[i]
			}
		}
	}
	panic("no gpu-0")
}

func TestBuildCountsAClaimOnce(t *testing.T) {
	c := newCluster(t)
	v := c.build(t)
	allocs, err := place(t, v, Options{}, claim("once", exact("gpu", "gpu.gpud.io", 1)))
	if err != nil {
		t.Fatal(err)
	}
	c.commit(t, allocs)
	c.in.Claims = append(c.in.Claims, c.in.Claims[0].DeepCopy()) // the assumed copy
	if err := Check(c.build(t)); err != nil {
		t.Fatalf("a claim listed twice: %v", err)
	}
	stale := claim("once", exact("gpu", "gpu.gpud.io", 1)) // deallocated since
	c.in.Claims = append(c.in.Claims, stale)
	if v := c.build(t); len(v.usage.dev) != 0 {
		t.Fatalf("the later, unallocated copy should win: usage %v", v.usage)
	}
}

func TestDNS1123LabelAgreesWithValidation(t *testing.T) {
	for _, s := range []string{"", "gpu-0", "gpu-0-mig-1g10gb-3", "-a", "a-", "A", "a_b", "a.b", "0", strings.Repeat("a", 63), strings.Repeat("a", 64), "é"} {
		if got, want := len(dns1123Label(s)) == 0, len(validation.IsDNS1123Label(s)) == 0; got != want {
			t.Errorf("dns1123Label(%q) valid = %v, validation says %v", s, got, want)
		}
	}
}
