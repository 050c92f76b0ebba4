package kubectlgpud

import "errors"

// Errors the commands return, wrapped with what was asked for. Their text
// ends the line a user reads (after "kubectl-gpud: "), so it carries no
// package prefix.
var (
	// ErrUsage is a command line the plugin cannot run: an unknown
	// command, a missing or extra argument, a bad flag value.
	ErrUsage = errors.New("see kubectl gpud -h")
	// ErrNotFound is a pod that does not exist in the namespace asked.
	ErrNotFound = errors.New("not found")
	// ErrTooMany is a list longer than MaxObjects.
	ErrTooMany = errors.New("too many objects")
)
