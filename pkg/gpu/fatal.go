package gpu

import "strings"

// fatalReasons are health reasons, lower-cased, after which a GPU cannot
// run its workloads until it is reset or serviced: uncorrectable memory
// errors (Xid 48, 95), a GPU off the bus (Xid 79) or lost to the driver.
var fatalReasons = []string{"double-bit", "uncorrectable", "xid 48", "xid 79", "xid 95", "lost"}

// Fatal reports whether a device in health h for reason has failed for
// good: lost, or an error its workloads cannot survive. Other errors may
// heal (new work is kept off the device, running work is left alone).
// The DRA driver's NoExecute taints and the scheduler's self-healing both
// decide by it, so the two never disagree.
func Fatal(h Health, reason string) bool {
	switch h {
	case "", Healthy:
		return false
	case Lost:
		return true
	}
	r := strings.ToLower(reason)
	for _, f := range fatalReasons {
		if strings.Contains(r, f) {
			return true
		}
	}
	return false
}
