// Package mpsctl is the agent's MPS controller: it keeps one MPS control
// daemon ([mps.Supervisor]) and the EXCLUSIVE_PROCESS compute mode
// ([computemode.Manager]) on every shared device, the sharing config's and
// the DRA fractions', follows their changes, gives the GPUs their modes
// back when it stops, and writes the MPS line of /readyz.
//
// It adds to pkg/mps what that package must not import: the inventory,
// the sharing runtime and NVML (through computemode). It creates no NVML
// handle: the caller passes it in.
package mpsctl
