// Package view translates between the Kubernetes API objects gpud's
// scheduler watches and pkg/allocator's model, in both directions:
//
//   - [Build]: ResourceSlices of driver gpu.gpud.io, every ResourceClaim
//     (what anyone allocated counts as used), DeviceClasses and Nodes in; a
//     [View] out: nodes with their GPUs, devices, counters and used
//     capacity, plus a [Skip] per object that could not be used and why.
//   - [View.Demand]: a pod's claims in; [Item]s out, each an
//     allocator.Request plus the device filter (class and CEL selectors
//     evaluated with k8s.io/dynamic-resource-allocation/cel, tolerations,
//     matchAttribute constraints) the allocator cannot express.
//   - [View.Place]: items in; the allocator (any policy) chooses node and
//     GPUs, the view resolves them to devices and returns each claim's
//     status.allocation as kube-scheduler writes it ([Allocation]).
//   - [Check]: whether allocations over-allocate a device, its capacity or
//     its shared counters (fractions, MIG placements, whole GPUs).
//   - [View.Measure]: what the nodes' agents stream (devices reported
//     unhealthy, measured memory by device uuid) in; a [Measured] out, which
//     [Options.Measured] applies to placements: unhealthy devices left out,
//     fractions packed against measured as well as requested memory
//     (optionally overcommitted within the measured headroom).
//   - [Allocation.Status]: the claim to write with UpdateStatus (its
//     resourceVersion kept): status.allocation plus the pod in reservedFor.
//
// A loop builds a view per decision from its informers' contents, passing
// one [MatchCache] and CEL cache in [Inputs] so selector results carry over
// while pools keep their generation; [AllocatedNode] pins a pod whose
// claims are partly allocated (pass it through [Options.NodeFilter]). Items
// from [View.Demand] belong to the view that made them.
//
// The package is pure apart from the share IDs it draws (UUIDs): no API
// client, no informers, no clock (timestamps are passed in), no logging. It
// never panics on bad input; it returns reasons.
package view
