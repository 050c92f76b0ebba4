// Package scheduler is the runtime of `gpud scheduler`: it watches the API
// server through client-go informers (Nodes, Pods, gpud's ResourceSlices,
// every ResourceClaim, DeviceClasses, PodDisruptionBudgets, and PodGroups
// through a hook), builds a [plan.Snapshot] per decision cycle
// (pkg/scheduler/view translates the API objects into pkg/allocator's
// model), asks a [plan.Decider] for a [plan.Plan] and carries it out: claim
// status writes (status.allocation and reservedFor, with the
// resourceVersion read, so a conflict never double-allocates) and
// Bindings, Evictions for preemption, and a PodScheduled=False condition
// plus an Event for every pod left pending.
//
// With leader election (a coordination.k8s.io Lease) only the leader runs
// cycles; every replica runs its informers. A replica that loses the lease
// stops deciding at once and [Scheduler.Run] returns [ErrLostLease], so
// that the process exits and its Deployment restarts it, as kube-scheduler
// does.
//
// Writes the informers have not caught up with are kept in an assume cache
// (claims by UID and resourceVersion, bound pods by UID) and used by the
// next cycles until the informer shows them, so a cycle never decides on a
// device the previous one gave away.
//
// The package creates no API client, reads no flags or environment: the
// caller (cmd/gpud) passes them in [Config].
package scheduler
