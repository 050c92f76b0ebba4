// Package jobsim replays job traces through the job scheduler in
// [github.com/gpud/gpud/pkg/allocator/jobs] and reports what users feel:
// completion time, queueing delay, utilization, preemption losses, fairness
// and gang wait. It owns the job-trace CSV format (docs/job-trace.md), the
// cluster node file with topology columns, and a seeded generator that
// derives synthetic job traces from an openb pod list. A replay can submit
// jobs with runtime estimates learned as jobs finish ([EstimateLearned],
// from [github.com/gpud/gpud/pkg/predict]) and inject seeded GPU failures
// with and without healing ([FailureOptions]).
//
// Unlike the scheduler, this package does I/O (readers and writers take
// io.Reader and io.Writer); it has no clock and no goroutines, so a replay
// is deterministic for its inputs.
package jobsim
