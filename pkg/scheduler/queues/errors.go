package queues

import "errors"

// ErrInvalid is matched by the error of a Queue object gpud refuses
// (Convert, Resolve's Refused).
var ErrInvalid = errors.New("invalid Queue")

// ErrRefused is matched by the error of a pod that may not use the queue
// it names or its namespace is bound to (Set.QueueOf).
var ErrRefused = errors.New("queue refused")
