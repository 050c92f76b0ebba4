package kubectlgpud

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpud/gpud/pkg/scheduler/view"
)

// unhealthyTaintKey is the device taint gpud's DRA driver puts on an
// unhealthy device (pkg/dra.TaintKey; a test keeps the two equal).
const unhealthyTaintKey = "gpu.gpud.io/unhealthy"

// devKey names a published device: pool (the node) and device name.
type devKey struct{ pool, device string }

// devUse is what allocated claims take from one device.
type devUse struct {
	// exclusive counts results without a share ID, shares those with one.
	exclusive, shares int
	// memoryBytes sums the shares' consumed memory.
	memoryBytes int64
}

// usage is what every allocated claim of gpud's driver takes.
type usage struct {
	dev map[devKey]*devUse
	// byGPU counts allocations on any device of a GPU (whole or MIG),
	// keyed by pool and GPU index.
	byGPU map[gpuKey]int
}

type gpuKey struct {
	pool string
	gpu  int
}

// newUsage adds up the allocations of claims on the view's devices.
func newUsage(v *view.View, claims []*resourceapi.ResourceClaim) usage {
	u := usage{dev: map[devKey]*devUse{}, byGPU: map[gpuKey]int{}}
	for c := range view.LatestAllocated(claims) {
		for i := range c.Status.Allocation.Devices.Results {
			r := &c.Status.Allocation.Devices.Results[i]
			if r.Driver != view.DriverName {
				continue
			}
			k := devKey{r.Pool, r.Device}
			d := u.dev[k]
			if d == nil {
				d = &devUse{}
				u.dev[k] = d
			}
			if r.ShareID == nil {
				d.exclusive++
			} else {
				d.shares++
				if q, ok := r.ConsumedCapacity[view.CapacityMemory]; ok {
					d.memoryBytes += q.Value()
				}
			}
			if n := v.Node(r.Pool); n != nil {
				if dev := n.Devices[r.Device]; dev != nil {
					u.byGPU[gpuKey{r.Pool, n.GPUs[dev.GPU].Index}]++
				}
			}
		}
	}
	return u
}

// buildView is the scheduler's model of the snapshot's DRA side.
func buildView(s *Snapshot) *view.View {
	v, _ := view.Build(view.Inputs{Slices: s.Slices, Claims: s.Claims, Classes: s.Classes, Nodes: s.Nodes})
	return v
}

// badTaints are the device taints that keeps pods off the device (NoSchedule,
// NoExecute), as "value:Effect", with the key when it is not gpud's.
func badTaints(ts []resourceapi.DeviceTaint) []string {
	var out []string
	for _, t := range ts {
		if t.Effect != resourceapi.DeviceTaintEffectNoSchedule && t.Effect != resourceapi.DeviceTaintEffectNoExecute {
			continue
		}
		s := t.Value
		if t.Key != unhealthyTaintKey {
			s = t.Key
			if t.Value != "" {
				s += "=" + t.Value
			}
		}
		out = append(out, s+":"+string(t.Effect))
	}
	return out
}

// podClaimNames are the names of the claims a pod uses: its resourceClaims
// (by name, or generated from a template), and the claim the scheduler
// made for its DRA-backed extended resources.
func podClaimNames(p *corev1.Pod) []string {
	var out []string
	add := func(n string) {
		if n != "" && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	for _, rc := range p.Spec.ResourceClaims {
		if rc.ResourceClaimName != nil {
			add(*rc.ResourceClaimName)
		}
	}
	for _, st := range p.Status.ResourceClaimStatuses {
		if st.ResourceClaimName != nil {
			add(*st.ResourceClaimName)
		}
	}
	if e := p.Status.ExtendedResourceClaimStatus; e != nil {
		add(e.ResourceClaimName)
	}
	return out
}

// claimIndex finds claims by namespace/name and by the pods reserving
// them.
type claimIndex struct {
	byName     map[string]*resourceapi.ResourceClaim
	reservedBy map[types.UID][]*resourceapi.ResourceClaim
}

func newClaimIndex(claims []*resourceapi.ResourceClaim) claimIndex {
	ix := claimIndex{byName: map[string]*resourceapi.ResourceClaim{}, reservedBy: map[types.UID][]*resourceapi.ResourceClaim{}}
	for _, c := range claims {
		ix.byName[c.Namespace+"/"+c.Name] = c
		for _, r := range c.Status.ReservedFor {
			if r.Resource == "pods" && r.UID != "" {
				ix.reservedBy[r.UID] = append(ix.reservedBy[r.UID], c)
			}
		}
	}
	return ix
}

// of is a pod's claims, in the order the pod names them.
func (ix claimIndex) of(p *corev1.Pod) []*resourceapi.ResourceClaim {
	var out []*resourceapi.ResourceClaim
	for _, n := range podClaimNames(p) {
		if c := ix.byName[p.Namespace+"/"+n]; c != nil {
			out = append(out, c)
		}
	}
	for _, c := range ix.reservedBy[p.UID] {
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

// usesGPUD says whether a claim asks for or holds a gpud device: an
// allocation from the driver, or a request for a class whose selectors
// name it.
func usesGPUD(c *resourceapi.ResourceClaim, classes map[string]*resourceapi.DeviceClass) bool {
	if a := c.Status.Allocation; a != nil {
		for _, r := range a.Devices.Results {
			if r.Driver == view.DriverName {
				return true
			}
		}
	}
	for _, r := range c.Spec.Devices.Requests {
		var names []string
		if r.Exactly != nil {
			names = append(names, r.Exactly.DeviceClassName)
		}
		for _, s := range r.FirstAvailable {
			names = append(names, s.DeviceClassName)
		}
		for _, n := range names {
			if classNamesGPUD(classes[n]) || strings.HasSuffix(n, ".gpud.io") {
				return true
			}
		}
	}
	return false
}

func classNamesGPUD(c *resourceapi.DeviceClass) bool {
	if c == nil {
		return false
	}
	for _, s := range c.Spec.Selectors {
		if s.CEL != nil && strings.Contains(s.CEL.Expression, `"`+view.DriverName+`"`) {
			return true
		}
	}
	return false
}
