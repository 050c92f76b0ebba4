package simnode

import "errors"

// Sentinel errors of the simulated node.
var (
	// ErrUnknownGPU is returned by the hooks for an index or UUID the node
	// lacks.
	ErrUnknownGPU = errors.New("simnode: unknown GPU")
	// ErrStateFile is wrapped when the state file cannot be written: the
	// simulated layout changed but will not survive a restart.
	ErrStateFile = errors.New("simnode: state file not saved")
	// ErrBadProfile is wrapped by every node profile error.
	ErrBadProfile = errors.New("simnode: bad node profile")
)
