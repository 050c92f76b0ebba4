//go:build !linux

package devcgroup

import "fmt"

// Probe reports that device isolation needs Linux.
func Probe() error { return fmt.Errorf("%w: needs Linux cgroups", ErrUnsupported) }

// Handle is an attached filter; on this OS there is none.
type Handle struct{}

// Attach always fails on this OS.
func Attach(dir string, _ Allowed) (*Handle, error) {
	return nil, fmt.Errorf("devcgroup: %s: %w", dir, Probe())
}

// Dir is empty on this OS.
func (h *Handle) Dir() string { return "" }

// Allowed is the zero rule on this OS.
func (h *Handle) Allowed() Allowed { return Allowed{} }

// Update always fails on this OS.
func (h *Handle) Update(Allowed) error { return Probe() }

// Close does nothing on this OS.
func (h *Handle) Close() error { return nil }
