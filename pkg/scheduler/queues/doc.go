// Package queues serves the scheduler's queue tree from Queue objects
// (scheduling.gpud.io/v1alpha1, cluster-scoped; the CRD is
// deploy/scheduler/queue-crd.yaml): it converts and validates them
// (Convert, Resolve), binds namespaces to queues (a Queue's
// spec.namespaces, or the namespace label gpud.io/queue that only admins
// may set), watches them live (Source; a CRD installed after the start is
// found by asking discovery again) and writes each Queue's status (usage,
// pending pods, the Accepted condition) from the leader.
//
// The conversion and resolution are pure; Source and its status writer
// own the informers and the API writes. It imports no other scheduler
// package but plan (the label name) and the allocator's jobs types.
package queues
