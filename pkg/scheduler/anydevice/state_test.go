package anydevice

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

const driver = "nic.example.com"

func inputs() Inputs {
	node := "n1"
	return Inputs{
		Nodes: []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: node}}},
		Classes: []*resourceapi.DeviceClass{{ObjectMeta: metav1.ObjectMeta{Name: "nic"},
			Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "` + driver + `"`}}}}}},
		Slices: []*resourceapi.ResourceSlice{{ObjectMeta: metav1.ObjectMeta{Name: "n1-nic"},
			Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: &node, Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1},
				Devices: []resourceapi.Device{{Name: "nic-0"}, {Name: "nic-1"}}}}},
	}
}

func nicClaim(name string, count int64, mode resourceapi.DeviceAllocationMode) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "nic",
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "nic", AllocationMode: mode, Count: count}}}}}}
}

// Devices taken by allocated claims, and by allocations assumed later, are
// not given again; released ones are; admin access takes nothing.
func TestAllocateCountsTakenDevices(t *testing.T) {
	in := inputs()
	held := nicClaim("held", 1, resourceapi.DeviceAllocationModeExactCount)
	held.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "nic", Driver: driver, Pool: "n1", Device: "nic-0"}}}}
	admin := nicClaim("admin", 1, resourceapi.DeviceAllocationModeExactCount)
	admin.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "nic", Driver: driver, Pool: "n1", Device: "nic-1", AdminAccess: ptr.To(true)}}}}
	in.Claims = []*resourceapi.ResourceClaim{held, admin}
	s := New(in)

	res, err := s.Allocate("n1", []*resourceapi.ResourceClaim{nicClaim("a", 1, resourceapi.DeviceAllocationModeExactCount)})
	if err != nil || len(res) != 1 || res[0].Devices.Results[0].Device != "nic-1" {
		t.Fatalf("Allocate() = %+v, %v; want nic-1 (nic-0 is held, admin access takes nothing)", res, err)
	}
	s.Assume(&res[0])
	_, err = s.Allocate("n1", []*resourceapi.ResourceClaim{nicClaim("b", 1, resourceapi.DeviceAllocationModeExactCount)})
	if !errors.Is(err, ErrNoFit) || !strings.Contains(err.Error(), "ns/b") {
		t.Fatalf("Allocate() with both NICs taken: %v, want ErrNoFit naming ns/b", err)
	}
	// All needs every matching device free: not while "a" holds nic-1.
	s.Release(held.Status.Allocation)
	all := []*resourceapi.ResourceClaim{nicClaim("c", 0, resourceapi.DeviceAllocationModeAll)}
	if _, err := s.Allocate("n1", all); !errors.Is(err, ErrNoFit) {
		t.Fatalf("Allocate(All) with nic-1 taken: %v, want ErrNoFit", err)
	}
	s.Release(&res[0])
	res, err = s.Allocate("n1", all)
	if err != nil || len(res[0].Devices.Results) != 2 {
		t.Fatalf("Allocate(All) after both releases = %+v, %v; want nic-0 and nic-1", res, err)
	}
}

func TestAllocateRefusesBadInput(t *testing.T) {
	s := New(inputs())
	unknown := nicClaim("u", 1, resourceapi.DeviceAllocationModeExactCount)
	unknown.Spec.Devices.Requests[0].Exactly.DeviceClassName = "gone"
	if _, err := s.Allocate("n1", []*resourceapi.ResourceClaim{unknown}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `DeviceClass "gone" not found`) {
		t.Fatalf("unknown class: %v", err)
	}
	if _, err := s.Allocate("nope", []*resourceapi.ResourceClaim{nicClaim("x", 1, resourceapi.DeviceAllocationModeExactCount)}); !errors.Is(err, ErrNoFit) {
		t.Fatalf("unknown node: %v", err)
	}
	if r := s.AllocatedFits("n1", nil); r != "" {
		t.Fatalf("AllocatedFits without claims = %q", r)
	}
	var nilState *State
	nilState.Assume(&resourceapi.AllocationResult{}) // must not panic
}

// TestAssumedBeforeFirstAllocate: Assumes and Releases made before the
// state first allocates (the counts are made then) still count, after the
// allocated claims and in their order.
func TestAssumedBeforeFirstAllocate(t *testing.T) {
	in := inputs()
	held := nicClaim("held", 1, resourceapi.DeviceAllocationModeExactCount)
	held.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "nic", Driver: driver, Pool: "n1", Device: "nic-0"}}}}
	in.Claims = []*resourceapi.ResourceClaim{held}
	s := New(in)
	s.Release(held.Status.Allocation) // a what-if evicts the holder ...
	other := &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "nic", Driver: driver, Pool: "n1", Device: "nic-1"}}}}
	s.Assume(other) // ... and a placement takes nic-1
	res, err := s.Allocate("n1", []*resourceapi.ResourceClaim{nicClaim("a", 1, resourceapi.DeviceAllocationModeExactCount)})
	if err != nil || len(res) != 1 || res[0].Devices.Results[0].Device != "nic-0" {
		t.Fatalf("Allocate() = %+v, %v; want nic-0 (released) not nic-1 (assumed)", res, err)
	}
}
