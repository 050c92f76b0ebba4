// Package jobs is gpud's job-level scheduling policy on top of the placement
// core in [github.com/gpud/gpud/pkg/allocator]: topology-aware gang
// scheduling, hierarchical queues with guaranteed quotas and borrowing
// limits (per resource and per GPU model), DRF fair share, preemption and
// reclaim with exact GPU units, EASY backfill and reservations.
//
// The package is pure: no I/O, no clock, no goroutines, no logging. Time is
// whatever the caller passes to [Scheduler.Schedule] (seconds on any epoch).
// Iteration never depends on map order, so a run is deterministic.
//
// # GPU units
//
// Every GPU quantity is an integer: whole GPUs and fractions in milli-GPU
// (1000 = one GPU), GPU memory in MiB, and MIG instances in compute slices
// (1..7) placed on the 8 memory slices of a MIG-enabled GPU with the
// A100/H100 placement rules (see [MIGProfiles]). A MIG GPU serves only MIG
// requests; other GPUs serve whole-GPU and fractional requests.
//
// # Lifecycle
//
// Build a [Scheduler] with [New], then [Scheduler.Submit] jobs,
// [Scheduler.Schedule] at each point in time the caller cares about and
// [Scheduler.Finish] jobs that complete. Schedule applies its own decisions
// (starts and preemptions) to the scheduler's state and reports them, each
// pending job with a [Reason]. A Scheduler is not safe for concurrent use.
//
// It imports only the standard library and pkg/allocator's exported types.
package jobs
