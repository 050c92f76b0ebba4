package podgroup

import "errors"

// ErrInvalid is matched (errors.Is) by every error that refuses a PodGroup
// or Workload PodGroup object as written.
var ErrInvalid = errors.New("podgroup: invalid object")
