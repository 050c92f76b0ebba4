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
//     It reads one opaque device configuration, [GPUConfig] (a fraction's
//     memoryLimit above its request), decoded strictly by [DecodeGPUConfig].
//   - [Driver] runs both behind the kubelet plugin helper of
//     k8s.io/dynamic-resource-allocation (registration, the DRA gRPC
//     service, ResourceSlice publishing, device health).
//
// # State on disk
//
// The checkpoint (checkpoint.json in the plugin dir) is versioned and
// checksummed: this version writes version 3 (which adds a fraction's
// memory limit) and reads 1 and 2 (converted), so an upgrade keeps every
// prepared claim; a damaged, hand-edited or newer file
// is refused with [ErrCorruptCheckpoint], naming the file and what to do.
// Besides the claims it records which GPUs' MIG mode gpud turned on for
// dynamic MIG devices, so after a restart the last such device's unprepare
// still gives the GPU back whole. Calls for one claim are serialized; its
// entry, CDI spec and MIG devices agree after any interleaving and after a
// kill at any step (the fault-injection tests).
//
// The package never creates hardware handles or API clients and imports no
// go-nvml: the caller passes the inventory source, the MIG catalogs, a
// [MIGManager], a Kubernetes client and every directory.
package dra
