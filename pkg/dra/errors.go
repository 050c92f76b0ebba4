package dra

import "errors"

// Sentinel errors, wrapped with the device they concern.
var (
	// ErrUnknownDevice: a claim names a device that is not (or no longer)
	// published by this node.
	ErrUnknownDevice = errors.New("dra: device not on this node")
	// ErrInUse: a device is already prepared for another claim, or the
	// fractions on it would not fit.
	ErrInUse = errors.New("dra: device in use")
	// ErrClaimExceedsGPU: one claim holds a GPU whole and another device
	// of it, or fractions of it that sum past its memory or cores.
	ErrClaimExceedsGPU = errors.New("dra: claim takes more of a GPU than it has")
)
