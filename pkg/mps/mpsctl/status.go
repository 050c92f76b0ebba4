package mpsctl

import (
	"fmt"
	"slices"
	"strings"
)

// Status is the MPS line of /readyz: how many daemons run and GPUs are
// EXCLUSIVE_PROCESS, and every compute mode failure with its GPU; empty
// when the controller is off.
func (c *Controller) Status() string {
	if c.sup == nil {
		return ""
	}
	running, daemons := 0, c.sup.Status()
	for _, st := range daemons {
		if st.Running {
			running++
		}
	}
	exclusive := 0
	var failed []string
	for u, st := range c.modes.Status() {
		if st.Set {
			exclusive++
		}
		if st.Err != "" {
			failed = append(failed, u+": "+st.Err)
		}
	}
	slices.Sort(failed)
	line := fmt.Sprintf("mps: %d of %d daemons running, %d GPUs EXCLUSIVE_PROCESS", running, len(daemons), exclusive)
	if len(failed) > 0 {
		line += "; compute mode not set: " + strings.Join(failed, "; ")
	}
	return line
}

// WithStatus adds the MPS line under another status line (the agent's
// enforcement line; nil: none) for /readyz. Off, it returns status as is.
func (c *Controller) WithStatus(status func() string) func() string {
	if c.sup == nil {
		return status
	}
	return func() string {
		line := c.Status()
		if status != nil {
			line = status() + "\n" + line
		}
		return line
	}
}
