package rules

import "errors"

// ErrNoInformers is returned by [New] when its Config has neither an
// informer factory nor a client to make one from.
var ErrNoInformers = errors.New("no informer factory and no client")
