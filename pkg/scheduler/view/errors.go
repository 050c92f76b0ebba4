package view

import (
	"errors"
	"fmt"
)

// Sentinels matched with errors.Is.
var (
	// ErrUnsupported: a claim asks for something gpud's scheduler does not
	// place (allocation mode All, prioritized lists, admin access, ...).
	ErrUnsupported = errors.New("view: unsupported request")
	// ErrInvalid: an object is malformed or refers to something unknown.
	ErrInvalid = errors.New("view: invalid object")
	// ErrOverAllocated: allocations take more than a device has.
	ErrOverAllocated = errors.New("view: over-allocated")
	// ErrNoFit: no node can take the pod's claims now.
	ErrNoFit = errors.New("view: does not fit")
)

// Skip is one API object [Build] left out, with the reason, for events and
// logs.
type Skip struct {
	// Kind is "ResourceSlice", "ResourceClaim", "DeviceClass", "Node" or
	// "Device".
	Kind string
	// Name is the object's name (namespace/name for claims, slice/device
	// for devices).
	Name   string
	Reason string
}

func (s Skip) String() string { return fmt.Sprintf("%s %s: %s", s.Kind, s.Name, s.Reason) }
