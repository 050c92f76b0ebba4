package anydevice

import "errors"

var (
	// ErrNoFit means the claims cannot be allocated on the node now (no
	// free device matches, or the node's slices are incomplete).
	ErrNoFit = errors.New("anydevice: claims do not fit")
	// ErrInvalid means a claim cannot be allocated as written anywhere
	// (an unknown DeviceClass, a CEL selector that fails to evaluate).
	ErrInvalid = errors.New("anydevice: invalid claim")
)
