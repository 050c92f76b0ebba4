// Package heal decides what happens to running pods whose GPUs failed:
// the scheduler's self-healing policy. Given the bound pods with the
// devices their claims hold, the devices reported failed (the telemetry
// stream's unhealthy devices, NoExecute device taints), the pods' gangs
// and annotations, and the time, a [Healer] plans which pods to evict (or
// delete) and why:
//
//   - every pod holding a failed device is evicted (action [Evict], the
//     default) or deleted ([Delete]), per [Annotation] on the pod or the
//     configured default; a pod annotated "keep" is left alone;
//   - a gang (pods sharing a group key) loses all its members together,
//     so that it is placed again as one; a gang with a member annotated
//     "keep" is left alone whole. An elastic gang (more members running
//     than its minMember) loses only its members on failed devices
//     while the rest stay at or above minMember, the whole gang only
//     when it would drop below;
//   - the nodes a healed gang ran on are remembered for a while
//     ([Healer.Homes]) so that its new members are placed in the same
//     domain (NVLink domain, rack) when it has room;
//   - checkpointable pods go first, least work lost first (the time since
//     their last checkpoint), then the rest, a bounded number per plan;
//   - an owner (gang, controller or pod) healed again soon after its last
//     healing backs off exponentially (bounded), so that a workload that
//     fails on every GPU is not evicted in a loop; the backoff is
//     reported.
//
// A Healer is pure: no I/O, clock, goroutines or logging; it imports the
// standard library only. It keeps state between plans (backoff, pods
// chosen and not yet gone) and is not safe for concurrent use. The caller
// (pkg/scheduler) turns API objects into [Input] and carries the plan
// out.
package heal
