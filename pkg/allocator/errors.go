package allocator

import (
	"errors"
	"fmt"
)

// ErrNoFit is matched (errors.Is) by every [*NoFitError].
var ErrNoFit = errors.New("allocator: does not fit")

// ErrInvalid reports a malformed node, request or decision.
var ErrInvalid = errors.New("allocator: invalid")

// NoFitError says why no node can take a request.
type NoFitError struct {
	// Reason names the resource that ran out on the most nodes, e.g. "gpu".
	Reason string
	// Counts maps each reason to the number of nodes that failed on it.
	Counts map[string]int
}

func (e *NoFitError) Error() string {
	return fmt.Sprintf("allocator: does not fit: %s (%v)", e.Reason, e.Counts)
}

// Is maps the error onto [ErrNoFit].
func (e *NoFitError) Is(target error) bool { return target == ErrNoFit }

// Reasons a node fails the filter.
const (
	ReasonCPU    = "cpu"
	ReasonMemory = "memory"
	ReasonModel  = "gpu-model" // no GPU of an accepted model, memory, compute capability or MIG mode
	ReasonGPU    = "gpu"
	ReasonNoGPU  = "no-gpu"
	// ReasonMIG: no eligible MIG GPU has room for the slice.
	ReasonMIG = "mig"
	// ReasonGPUMemory: a memory-sized fraction on a node whose GPU memory
	// is unknown.
	ReasonGPUMemory = "gpu-memory"
)
