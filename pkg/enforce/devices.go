package enforce

import (
	"strconv"
	"strings"

	"github.com/gpud/gpud/pkg/devcgroup"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/timeslice"
	"github.com/gpud/gpud/pkg/usage"
)

// allowedFor maps device IDs (GPU UUIDs, MIG UUIDs, replica IDs such as
// "GPU-x::3") to the minors a container may open: a GPU's minor; a MIG
// slice's parent GPU minor and its GI and CI access caps. IDs that are not
// NVIDIA devices of this node (another plugin's resources) are ignored.
// It also returns the GPU or MIG UUIDs found, for the cpuset.
func allowedFor(inv gpu.Inventory, majors devcgroup.Majors, ids []string) (devcgroup.Allowed, []string) {
	a := devcgroup.Allowed{CapsMajor: majors.Caps, UVMMajor: majors.UVM}
	var uuids []string
	for _, id := range ids {
		uuid, _, _ := timeslice.ParseReplicaID(id)
		for i := range inv.GPUs {
			g := &inv.GPUs[i]
			if g.UUID == uuid || uuid == strconv.Itoa(g.Index) {
				a.GPUMinors = append(a.GPUMinors, uint32(g.Minor))
				uuids = append(uuids, uuid)
				continue
			}
			for _, m := range g.MIGDevices {
				if m.UUID != uuid {
					continue
				}
				a.GPUMinors = append(a.GPUMinors, uint32(g.Minor))
				a.CapMinors = append(a.CapMinors,
					devcgroup.CapMinor(g.Minor, m.GPUInstanceID, -1),
					devcgroup.CapMinor(g.Minor, m.GPUInstanceID, m.ComputeInstanceID))
				uuids = append(uuids, uuid)
			}
		}
	}
	return a.Normalize(), uuids
}

// deviceIDs collects the device IDs of one container (ctr non-empty) or of
// every container of the pod (ctr empty). Numeric IDs count only from GPU
// resources (a name with "gpu" or "/mig-"): elsewhere they are another
// plugin's indexes.
func deviceIDs(as []usage.Assignment, ns, pod, ctr string) []string {
	var ids []string
	for _, a := range as {
		if a.Namespace != ns || a.Pod != pod || (ctr != "" && a.Container != ctr) {
			continue
		}
		gpuResource := strings.Contains(strings.ToLower(a.ResourceName), "gpu") || strings.Contains(a.ResourceName, "/mig-")
		for _, id := range a.DeviceIDs {
			if _, err := strconv.Atoi(id); err == nil && !gpuResource {
				continue // another plugin's index, not a GPU's
			}
			ids = append(ids, id)
		}
	}
	return ids
}

// ids are the device IDs of one container (ctr non-empty) or of every
// container of the pod (ctr empty): device plugin IDs and the UUIDs of
// its DRA devices.
func (e *Enforcer) ids(inv gpu.Inventory, s snapshot, ns, pod, ctr string) []string {
	return append(deviceIDs(s.assignments, ns, pod, ctr), e.draIDs(inv, s, ns, pod, ctr)...)
}
