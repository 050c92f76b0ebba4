package devcgroup

import "errors"

// ErrUnsupported is wrapped by [Probe] and [Attach] when this kernel or
// this node cannot run the device filter (no cgroup v2 device programs,
// not root, no cgroup v2 mount). The error's text says why, for one log
// line and the /readyz detail.
var ErrUnsupported = errors.New("devcgroup: device isolation not available")
