package kubectlgpud

import "errors"

// Errors the commands return, wrapped with what was asked for.
var (
	// ErrUsage is a command line the plugin cannot run: an unknown
	// command, a missing or extra argument, a bad flag value.
	ErrUsage = errors.New("kubectl-gpud: usage")
	// ErrNotFound is a pod that does not exist in the namespace asked.
	ErrNotFound = errors.New("kubectl-gpud: not found")
	// ErrTooMany is a list longer than MaxObjects.
	ErrTooMany = errors.New("kubectl-gpud: too many objects")
)
