// Package dra is gpud's Dynamic Resource Allocation driver, gpu.gpud.io: it
// publishes the node's GPUs as ResourceSlices (whole GPUs that take memory
// fractions through consumable capacity, MIG placements as partitionable
// devices, health as device taints) and prepares the claims the scheduler
// allocated from them (CDI specs, MPS limits, MIG slices created on demand),
// with every prepared claim checkpointed on disk.
//
// # Pieces
//
//   - [Build] is the pure slice builder: [NodeState] in, ResourceSlices and
//     a device table out.
//   - [Preparer] implements prepare and unprepare, idempotent and crash-safe.
//   - [Driver] runs both behind the kubelet plugin helper of
//     k8s.io/dynamic-resource-allocation (registration, the DRA gRPC
//     service, ResourceSlice publishing, device health).
//
// The package never creates hardware handles or API clients and imports no
// go-nvml: the caller passes the inventory source, the MIG catalogs, a
// [MIGManager], a Kubernetes client and every directory.
package dra
