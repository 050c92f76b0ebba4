// Package objective reads the operator's objectives for gpud's job policy:
// sweeps of weight settings (`util=1;util=1,wait=1;energy=1`) and the
// per-GPU-model power and price table, with defaults for the models of
// public traces. It is pure (no I/O): callers read files and pass bytes.
//
// The weights themselves and what each term means are
// [github.com/gpud/gpud/pkg/allocator/jobs.Objective]'s.
package objective
