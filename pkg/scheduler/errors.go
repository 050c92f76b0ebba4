package scheduler

import "errors"

// Sentinels matched with errors.Is.
var (
	// ErrConfig: a Config field is missing or out of range.
	ErrConfig = errors.New("scheduler: invalid config")
	// ErrLostLease: this replica was the leader and lost its lease; it
	// must exit (the Deployment restarts it) rather than keep deciding.
	ErrLostLease = errors.New("scheduler: lost the leader lease")
	// ErrNotSynced: the informers did not sync before the context ended.
	ErrNotSynced = errors.New("scheduler: informers not synced")
)
