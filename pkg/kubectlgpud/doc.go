// Package kubectlgpud is the logic of the kubectl plugin kubectl-gpud
// (cmd/kubectl-gpud): who holds which GPU, MIG slice or fraction, and why
// a pod waits, read from the API server with the user's own kubeconfig
// and RBAC. It starts no server and writes nothing.
//
//   - [Load] lists what a command needs (Nodes, Pods, ResourceSlices,
//     ResourceClaims, DeviceClasses, Events) into a [Snapshot], in pages,
//     bounded by [MaxObjects] per kind.
//   - [LoadQueues] lists the Queue objects (scheduling.gpud.io) with the
//     dynamic client, noting a missing CRD or RBAC instead of failing.
//   - [Nodes], [Pods], [Why], [Queues] and [QueueObjects] turn a snapshot into plain
//     results (pure: no API calls, no clock); the DRA side reuses
//     pkg/scheduler/view, the model gpud's scheduler decides with, so the
//     plugin and the scheduler read ResourceSlices and claims alike.
//   - [Run] is one command end to end: load, compute, print as an aligned
//     table or JSON.
//
// Device-plugin nodes are read from their allocatable resources
// (nvidia.com/gpu, nvidia.com/mig-<profile>, nvidia.com/gpu.shared) and
// GPU Feature Discovery's labels; DRA nodes from the gpu.gpud.io driver's
// ResourceSlices and the claims allocated from them.
//
// The package imports client-go, pkg/scheduler/view and
// pkg/scheduler/queues (the Queue type and the scheduler's pod-to-queue
// rule, Set.QueueOf); it must not import
// the agent's packages (NVML, the DRA driver) or the scheduler's loop.
package kubectlgpud
