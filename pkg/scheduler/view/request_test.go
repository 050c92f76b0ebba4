package view

import (
	"errors"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpud/gpud/pkg/allocator"
)

func TestDemand(t *testing.T) {
	v := newCluster(t).build(t)
	domain := resourceapi.FullyQualifiedName("gpu.gpud.io/nvlinkDomain")
	tests := []struct {
		name      string
		claim     *resourceapi.ResourceClaim
		kind      Kind
		alloc     allocator.Request
		match     resourceapi.FullyQualifiedName
		eligible  string // a device (node/device) the item may use
		ineligble string // one it may not
		wantErr   error
		errText   string
	}{
		{name: "whole GPU", claim: claim("w", exact("gpu", "gpu.gpud.io", 0)), kind: Whole,
			alloc: allocator.Request{NumGPU: 1, GPUMilli: 1000}, eligible: "h100-a/gpu-0", ineligble: "h100-a/gpu-0-mig-1g10gb-0"},
		{name: "two GPUs on one NVLink domain", claim: func() *resourceapi.ResourceClaim {
			c := claim("n", exact("gpus", "gpu.gpud.io", 2))
			c.Spec.Devices.Constraints = []resourceapi.DeviceConstraint{{Requests: []string{"gpus"}, MatchAttribute: &domain}}
			return c
		}(), kind: Whole, alloc: allocator.Request{NumGPU: 2, GPUMilli: 1000}, match: domain},
		{name: "fraction 20Gi", claim: claim("f", fraction("gpu", "20Gi", "")), kind: Fraction,
			alloc: allocator.Request{NumGPU: 1, GPUMemoryMiB: 20 << 10}, eligible: "h100-a/gpu-1"},
		{name: "fraction 10Gi and 30 cores", claim: claim("fc", fraction("gpu", "10Gi", "30")), kind: Fraction,
			alloc: allocator.Request{NumGPU: 1, GPUMemoryMiB: 10 << 10, GPUCoresPct: 30}},
		{name: "cores only is the whole GPU's memory", claim: claim("c", fraction("gpu", "", "50")), kind: Whole,
			alloc: allocator.Request{NumGPU: 1, GPUMilli: 1000}},
		{name: "MIG 1g.10gb", claim: claim("m", migReq("mig", "1g.10gb")), kind: MIG,
			alloc: allocator.Request{NumGPU: 1, MIGProfile: "1g.10gb"}, eligible: "h100-a/gpu-0-mig-1g10gb-3", ineligble: "h100-a/gpu-0-mig-2g20gb-0"},
		{name: "MIG 40GB name on A100", claim: claim("m4", migReq("mig", "3g.20gb")), kind: MIG,
			alloc: allocator.Request{NumGPU: 1, MIGProfile: "3g.40gb"}, eligible: "a100-a/gpu-0-mig-3g20gb-4", ineligble: "h100-a/gpu-0-mig-3g40gb-4"},
		{name: "model selector", claim: claim("model", exact("gpu", "gpu.gpud.io", 1, `device.attributes["gpu.gpud.io"].productName.startsWith("NVIDIA A100")`)),
			kind: Whole, alloc: allocator.Request{NumGPU: 1, GPUMilli: 1000}, eligible: "a100-a/gpu-3", ineligble: "h100-a/gpu-3"},
		{name: "min VRAM selector", claim: claim("vram", exact("gpu", "gpu.gpud.io", 1, `device.capacity["gpu.gpud.io"].memory.compareTo(quantity("60Gi")) >= 0`)),
			kind: Whole, alloc: allocator.Request{NumGPU: 1, GPUMilli: 1000}, eligible: "h100-a/gpu-3", ineligble: "a100-a/gpu-3"},
		{name: "compute capability selector", claim: claim("cc", exact("gpu", "gpu.gpud.io", 1, `device.attributes["gpu.gpud.io"].cudaComputeCapability.isGreaterThan(semver("8.9.0"))`)),
			kind: Whole, alloc: allocator.Request{NumGPU: 1, GPUMilli: 1000}, eligible: "h100-a/gpu-5", ineligble: "a100-a/gpu-5"},
		{name: "unknown class", claim: claim("u", exact("gpu", "gpu.example.com", 1)), wantErr: ErrInvalid, errText: `claim default/u request "gpu": unknown DeviceClass "gpu.example.com"`},
		{name: "allocation mode All", claim: func() *resourceapi.ResourceClaim {
			r := exact("gpu", "gpu.gpud.io", 0)
			r.Exactly.AllocationMode = resourceapi.DeviceAllocationModeAll
			return claim("all", r)
		}(), wantErr: ErrUnsupported, errText: "allocationMode All"},
		{name: "prioritized list", claim: claim("fa", resourceapi.DeviceRequest{Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{{Name: "a", DeviceClassName: "gpu.gpud.io"}}}),
			wantErr: ErrUnsupported, errText: "firstAvailable"},
		{name: "admin access", claim: func() *resourceapi.ResourceClaim {
			r, yes := exact("gpu", "gpu.gpud.io", 1), true
			r.Exactly.AdminAccess = &yes
			return claim("admin", r)
		}(), wantErr: ErrUnsupported, errText: "adminAccess"},
		{name: "count too large", claim: claim("big", exact("gpu", "gpu.gpud.io", 65)), wantErr: ErrUnsupported, errText: "count 65"},
		{name: "negative memory", claim: claim("neg", fraction("gpu", "-1Gi", "")), wantErr: ErrInvalid, errText: "negative"},
		{name: "huge memory", claim: claim("huge", fraction("gpu", "9Ei", "")), wantErr: ErrInvalid, errText: "exceeds"},
		{name: "cores above 100", claim: claim("cores", fraction("gpu", "1Gi", "101")), wantErr: ErrInvalid, errText: "exceeds 100%"},
		{name: "unknown capacity", claim: func() *resourceapi.ResourceClaim {
			r := fraction("gpu", "1Gi", "")
			r.Exactly.Capacity.Requests["bandwidth"] = r.Exactly.Capacity.Requests["memory"]
			return claim("bw", r)
		}(), wantErr: ErrUnsupported, errText: `capacity "bandwidth"`},
		{name: "MIG without profile takes the smallest", claim: claim("anymig", exact("mig", "mig.gpud.io", 1)), kind: MIG,
			alloc: allocator.Request{NumGPU: 1, MIGProfile: "1g.10gb"}, eligible: "h100-a/gpu-0-mig-1g10gb-3", ineligble: "h100-a/gpu-0-mig-7g80gb-0"},
		{name: "selector matching nothing", claim: claim("none", exact("gpu", "gpu.gpud.io", 1, `device.attributes["gpu.gpud.io"].productName == "B200"`)),
			wantErr: ErrNoFit, errText: "match no"},
		{name: "bad selector", claim: claim("bad", exact("gpu", "gpu.gpud.io", 1, `device.attributes[`)), wantErr: ErrInvalid, errText: "CEL"},
		{name: "distinctAttribute", claim: func() *resourceapi.ResourceClaim {
			c := claim("d", exact("gpus", "gpu.gpud.io", 2))
			c.Spec.Devices.Constraints = []resourceapi.DeviceConstraint{{DistinctAttribute: &domain}}
			return c
		}(), wantErr: ErrUnsupported, errText: "distinctAttribute"},
		{name: "matchAttribute across requests", claim: func() *resourceapi.ResourceClaim {
			c := claim("x", exact("a", "gpu.gpud.io", 1), exact("b", "gpu.gpud.io", 1))
			c.Spec.Devices.Constraints = []resourceapi.DeviceConstraint{{MatchAttribute: &domain}}
			return c
		}(), wantErr: ErrUnsupported, errText: "across requests"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			items, others, err := v.Demand([]*resourceapi.ResourceClaim{tc.claim})
			if errors.Is(tc.wantErr, ErrUnsupported) {
				// Shapes gpud does not model go to the structured
				// allocator whole, saying why.
				if err != nil || len(items) != 0 || len(others) != 1 || others[0].Claim != tc.claim || !strings.Contains(others[0].Why, tc.errText) {
					t.Fatalf("Demand() = %v, %+v, %v; want the claim in others, saying %q", items, others, err, tc.errText)
				}
				return
			}
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.errText) || !strings.Contains(err.Error(), tc.claim.Name) {
					t.Fatalf("Demand() = %v, want %v containing %q and the claim's name", err, tc.wantErr, tc.errText)
				}
				return
			}
			if err != nil || len(items) != 1 || len(others) != 0 {
				t.Fatalf("Demand() = %v, %v, %v", items, others, err)
			}
			it := items[0]
			if it.Kind != tc.kind || it.MatchAttribute != tc.match || it.Alloc.NumGPU != tc.alloc.NumGPU || it.Alloc.GPUMilli != tc.alloc.GPUMilli ||
				it.Alloc.GPUMemoryMiB != tc.alloc.GPUMemoryMiB || it.Alloc.GPUCoresPct != tc.alloc.GPUCoresPct || it.Alloc.MIGProfile != tc.alloc.MIGProfile {
				t.Fatalf("item %s %+v match %q, want %s %+v match %q", it.Kind, it.Alloc, it.MatchAttribute, tc.kind, tc.alloc, tc.match)
			}
			for dev, want := range map[string]bool{tc.eligible: true, tc.ineligble: false} {
				if dev == "" {
					continue
				}
				node, name, _ := strings.Cut(dev, "/")
				n := v.Node(node)
				if got := it.usable(n, n.Devices[name]); got != want {
					t.Errorf("usable(%s) = %v, want %v", dev, got, want)
				}
			}
		})
	}
}

func TestDemandSkipsAllocatedClaims(t *testing.T) {
	v := newCluster(t).build(t)
	done := claim("done", exact("gpu", "gpu.gpud.io", 1))
	done.Status.Allocation = &resourceapi.AllocationResult{}
	items, _, err := v.Demand([]*resourceapi.ResourceClaim{done, claim("new", exact("gpu", "gpu.gpud.io", 1)), nil})
	if err != nil || len(items) != 1 || items[0].Claim.Name != "new" {
		t.Fatalf("Demand() = %v, %v", items, err)
	}
}

// A claim for another driver's devices (an RDMA NIC) goes to the
// structured allocator once another driver publishes devices; without
// any, a claim no gpud device matches never fits.
func TestDemandOtherDrivers(t *testing.T) {
	c := newCluster(t)
	nic := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "nic.example.com"},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "nic.example.com"`}}}}}
	c.in.Classes = append(c.in.Classes, nic)
	gpuAndNIC := []*resourceapi.ResourceClaim{claim("gpu", exact("gpu", "gpu.gpud.io", 1)), claim("nic", exact("nic", "nic.example.com", 1))}

	_, _, err := c.build(t).Demand(gpuAndNIC)
	if !errors.Is(err, ErrNoFit) || !strings.Contains(err.Error(), "claim default/nic") {
		t.Fatalf("without other drivers: Demand() error = %v, want ErrNoFit naming claim default/nic", err)
	}

	node := "h100-a"
	c.in.Slices = append(c.in.Slices, &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "h100-a-nic"},
		Spec: resourceapi.ResourceSliceSpec{Driver: "nic.example.com", NodeName: &node, Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1},
			Devices: []resourceapi.Device{{Name: "nic-0"}}}})
	items, others, err := c.build(t).Demand(gpuAndNIC)
	if err != nil || len(items) != 1 || items[0].Claim.Name != "gpu" || len(others) != 1 || others[0].Claim.Name != "nic" {
		t.Fatalf("with a NIC driver: Demand() = %v, %+v, %v; want the GPU claim as an item and the NIC claim in others", items, others, err)
	}
}

func TestMatchCacheFollowsGenerations(t *testing.T) {
	c := newCluster(t)
	c.in.Matches = NewMatchCache()
	sel := `device.attributes["gpu.gpud.io"].productName.contains("H100")`
	usable := func() bool {
		v := c.build(t)
		items, _, err := v.Demand([]*resourceapi.ResourceClaim{claim("h", exact("gpu", "gpu.gpud.io", 1, sel))})
		if err != nil {
			return false
		}
		n := v.Node("h100-a")
		return items[0].usable(n, n.Devices["gpu-0"])
	}
	first, cached := usable(), usable()
	if !first || !cached {
		t.Fatal("gpu-0 of h100-a not usable for an H100 selector")
	}
	// The driver republishes gpu-0 as another product under a new
	// generation: the cached result must not survive it.
	for _, s := range c.in.Slices {
		if s.Spec.Pool.Name != "h100-a" {
			continue
		}
		s.Spec.Pool.Generation++
		for i := range s.Spec.Devices {
			if s.Spec.Devices[i].Name == "gpu-0" {
				p := "NVIDIA L4"
				s.Spec.Devices[i].Attributes["productName"] = resourceapi.DeviceAttribute{StringValue: &p}
			}
		}
	}
	if usable() {
		t.Fatal("gpu-0 still usable after the new generation renamed it")
	}
}
