package rules

import "errors"

// ErrNoInformers is returned by [New] when its Config has neither an
// informer factory nor a client to make one from.
var ErrNoInformers = errors.New("no informer factory and no client")

var (
	// ErrVolumes is returned by [Cycle.BindVolumes] when a pod's volumes
	// cannot be bound on the node (yet).
	ErrVolumes = errors.New("rules: volumes not bound")
	// ErrNoNode is returned for a node the cycle does not have.
	ErrNoNode = errors.New("rules: node not in the cycle")
	// ErrCycleOver is returned by [Cycle.Add] and [Cycle.Remove] on a
	// cycle a later [Rules.Cycle] has ended.
	ErrCycleOver = errors.New("cycle ended by a later one")
)
