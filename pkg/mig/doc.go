// Package mig owns MIG partitioning: the per-GPU profile catalog read from
// NVML at run time, declarative layouts in mig-parted's YAML format, a pure
// incremental planner, and an NVML applier that verifies its work and rolls
// back on failure.
//
// # Flow
//
//	state := ReadState(lib)                     // what the GPUs hold now
//	want, _ := file.Resolve(name, state)        // the layout, checked against each GPU's catalog
//	plan, _ := NewPlan(state, want, busy, opts) // pure: steps, kept slices, refusals
//	res, _ := NewApplier(lib, log).Apply(ctx, state, want, plan)
//
// [Service] runs that flow for the agent and for `gpud mig` without an
// agent alike, with one source of busy slices: processes (NVML) and the
// kubelet's allocations.
//
// The planner touches only GPUs whose layout differs. On such a GPU it keeps
// the instances both layouts share and places the rest around them under
// the GPU's placement rules; it refuses to destroy a slice that is allocated
// or runs processes unless forced.
//
// The package imports pkg/gpu, pkg/usage, pkg/timeslice (replica IDs),
// go-nvml and go-nvlib; it does not import the device plugin, telemetry or
// anything kubelet-facing (allocations come in through [AllocationLister]).
package mig
