// Package anydevice allocates the ResourceClaims gpud's own policy does not
// model, with the allocator kube-scheduler itself uses
// (k8s.io/dynamic-resource-allocation/structured, the features of
// kube-scheduler v1.37's default feature gates): other drivers' devices (an
// RDMA NIC next to a GPU), allocationMode All, firstAvailable prioritized
// lists, matchAttribute across requests, distinctAttribute, adminAccess.
// Nothing of the allocator's semantics is rewritten here.
//
// gpud's policy (pkg/scheduler/view, pkg/allocator) still chooses the node
// and the devices of the claims it models; this package answers "can these
// other claims be allocated on that node, and with which devices", over
// every driver's ResourceSlices and every claim's allocation, including the
// allocations a decision cycle has assumed but not yet written ([State.Assume],
// [State.Release]). A State is used by one goroutine.
package anydevice
