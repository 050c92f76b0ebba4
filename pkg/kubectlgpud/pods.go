package kubectlgpud

import (
	"cmp"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/gpud/gpud/pkg/scheduler/plan"
	"github.com/gpud/gpud/pkg/scheduler/view"
)

// Device kinds in [DeviceUse].
const (
	KindGPU      = "gpu"
	KindMIG      = "mig"
	KindFraction = "fraction"
	// KindResource is a device plugin's extended resource.
	KindResource = "resource"
)

// PodInfo is one pod that holds or asks for gpud's devices.
type PodInfo struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Node      string `json:"node,omitempty"`
	Phase     string `json:"phase"`
	Queue     string `json:"queue,omitempty"`
	Group     string `json:"group,omitempty"`
	// Devices are what the pod holds (allocated claims, or a device
	// plugin's resources on a bound pod).
	Devices []DeviceUse `json:"devices,omitempty"`
	// Wants are what it asks for and does not hold yet.
	Wants []DeviceUse `json:"wants,omitempty"`
}

// DeviceUse is one device (or a count of a resource) a pod holds or wants.
type DeviceUse struct {
	Kind string `json:"kind"`
	// GPU is the GPU index on the node; -1 when unknown or not one GPU.
	GPU     int    `json:"gpu"`
	Profile string `json:"profile,omitempty"`
	// MemoryBytes is a fraction's memory (held or asked for), or a MIG
	// slice's.
	MemoryBytes int64 `json:"memoryBytes,omitempty"`
	// Count is GPUs asked for, or a resource's count.
	Count int `json:"count,omitempty"`
	// Device is the published device (DRA) or the resource name.
	Device string `json:"device,omitempty"`
	Claim  string `json:"claim,omitempty"`
}

// Pods is every pod of the snapshot that holds or asks for a gpud device
// (a claim from gpu.gpud.io's classes or devices, or the device plugin's
// resources under prefix), sorted by namespace and name.
func Pods(s *Snapshot, prefix string) []PodInfo {
	v := buildView(s)
	ix := newClaimIndex(s.Claims)
	classes := map[string]*resourceapi.DeviceClass{}
	for _, c := range s.Classes {
		classes[c.Name] = c
	}
	var out []PodInfo
	for _, p := range s.Pods {
		pi, ok := podInfo(v, p, ix.of(p), classes, prefix)
		if ok {
			out = append(out, pi)
		}
	}
	slices.SortFunc(out, func(a, b PodInfo) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return out
}

func podInfo(v *view.View, p *corev1.Pod, claims []*resourceapi.ResourceClaim, classes map[string]*resourceapi.DeviceClass, prefix string) (PodInfo, bool) {
	pi := PodInfo{Namespace: p.Namespace, Name: p.Name, Node: p.Spec.NodeName, Phase: string(p.Status.Phase),
		Queue: p.Labels[plan.QueueLabel], Group: p.Labels[plan.PodGroupLabel]}
	if pi.Phase == "" {
		pi.Phase = string(corev1.PodPending)
	}
	uses := false
	for _, c := range claims {
		if !usesGPUD(c, classes) {
			continue
		}
		uses = true
		if c.Status.Allocation != nil {
			pi.Devices = append(pi.Devices, allocated(v, c)...)
			continue
		}
		pi.Wants = append(pi.Wants, wanted(v, c)...)
	}
	if p.Status.ExtendedResourceClaimStatus == nil {
		for _, r := range pluginResources(p, prefix) {
			uses = true
			if p.Spec.NodeName != "" {
				pi.Devices = append(pi.Devices, r)
			} else {
				pi.Wants = append(pi.Wants, r)
			}
		}
	}
	return pi, uses
}

// allocated is what an allocated claim holds of gpud's devices.
func allocated(v *view.View, c *resourceapi.ResourceClaim) []DeviceUse {
	var out []DeviceUse
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver != view.DriverName {
			continue
		}
		du := DeviceUse{Kind: KindGPU, GPU: -1, Device: r.Device, Claim: c.Name}
		if n := v.Node(r.Pool); n != nil {
			if d := n.Devices[r.Device]; d != nil {
				g := n.GPUs[d.GPU]
				du.GPU = g.Index
				if d.MIG {
					du.Kind, du.Profile = KindMIG, d.Profile
					if q, ok := d.Capacity[view.CapacityMemory]; ok {
						du.MemoryBytes = q.Value.Value()
					}
				}
			}
		} else {
			// No slices to read (RBAC): gpud's device names say the GPU
			// (gpu-<index>, gpu-<index>-mig-<profile>-<start>).
			du.GPU = gpuOfDeviceName(r.Device)
			if strings.Contains(r.Device, "-mig-") {
				du.Kind = KindMIG
			}
		}
		if q, ok := r.ConsumedCapacity[view.CapacityMemory]; ok && r.ShareID != nil && du.Kind == KindGPU {
			du.Kind, du.MemoryBytes = KindFraction, q.Value()
			if n := v.Node(r.Pool); n != nil && du.GPU >= 0 {
				if g := gpuByIndex(n, du.GPU); g != nil && q.Value() >= g.MemoryBytes {
					du.Kind, du.MemoryBytes = KindGPU, 0 // all of a shareable GPU
				}
			}
		}
		out = append(out, du)
	}
	return out
}

// gpuOfDeviceName is the GPU index in a gpud device name (gpu-3,
// gpu-3-mig-1g10gb-0); -1 for another name.
func gpuOfDeviceName(name string) int {
	rest, ok := strings.CutPrefix(name, "gpu-")
	if !ok {
		return -1
	}
	if i := strings.IndexByte(rest, '-'); i >= 0 {
		rest = rest[:i]
	}
	n, err := atoiBounded(rest)
	if err != nil {
		return -1
	}
	return n
}

func gpuByIndex(n *view.Node, index int) *view.GPU {
	for i := range n.GPUs {
		if n.GPUs[i].Index == index {
			return &n.GPUs[i]
		}
	}
	return nil
}

// profileSelector finds a MIG profile in a CEL selector
// (device.attributes["gpu.gpud.io"].profile == "1g.10gb"), for display.
var profileSelector = regexp.MustCompile(`\.profile\s*==\s*"([^"]{1,64})"`)

// wanted is what an unallocated claim asks for, as gpud's scheduler reads
// it (view.Demand); requests it does not model are shown by class.
func wanted(v *view.View, c *resourceapi.ResourceClaim) []DeviceUse {
	items, _, err := v.Demand([]*resourceapi.ResourceClaim{c})
	if err != nil || len(items) == 0 {
		// Requests gpud's scheduler does not model, or classes not read
		// (RBAC): the class and count as written.
		var out []DeviceUse
		for _, r := range c.Spec.Devices.Requests {
			du := DeviceUse{Kind: KindGPU, GPU: -1, Claim: c.Name, Count: 1}
			if r.Exactly != nil {
				du.Device = r.Exactly.DeviceClassName
				du.Count = int(r.Exactly.Count)
				for _, sel := range r.Exactly.Selectors {
					if sel.CEL != nil {
						if m := profileSelector.FindStringSubmatch(sel.CEL.Expression); m != nil {
							du.Kind, du.Profile = KindMIG, m[1]
						}
					}
				}
			}
			out = append(out, du)
		}
		return out
	}
	var out []DeviceUse
	for _, it := range items {
		du := DeviceUse{GPU: -1, Claim: c.Name, Count: it.Count}
		switch it.Kind {
		case view.MIG:
			du.Kind, du.Profile = KindMIG, it.Alloc.MIGProfile
			if req := requestByName(c, it.Request); req != nil && req.Exactly != nil {
				for _, s := range req.Exactly.Selectors {
					if s.CEL != nil {
						if m := profileSelector.FindStringSubmatch(s.CEL.Expression); m != nil {
							du.Profile = m[1]
						}
					}
				}
			}
		case view.Fraction:
			du.Kind = KindFraction
			if q, ok := it.Capacity[view.CapacityMemory]; ok {
				du.MemoryBytes = q.Value()
			}
		default:
			du.Kind = KindGPU
		}
		out = append(out, du)
	}
	return out
}

func requestByName(c *resourceapi.ResourceClaim, name string) *resourceapi.DeviceRequest {
	for i := range c.Spec.Devices.Requests {
		if c.Spec.Devices.Requests[i].Name == name {
			return &c.Spec.Devices.Requests[i]
		}
	}
	return nil
}

// pluginResources are a pod's requests of the device plugin's resources
// (prefix/gpu, prefix/mig-*, prefix/gpu.shared), sorted by name.
func pluginResources(p *corev1.Pod, prefix string) []DeviceUse {
	var out []DeviceUse
	for name, q := range resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{}) {
		n := string(name)
		if !strings.HasPrefix(n, prefix+"/") || q.Sign() <= 0 {
			continue
		}
		rest := strings.TrimPrefix(n, prefix+"/")
		if rest != "gpu" && rest != "gpu.shared" && !strings.HasPrefix(rest, "mig-") {
			continue
		}
		du := DeviceUse{Kind: KindResource, GPU: -1, Device: n, Count: int(q.Value())}
		if p, ok := strings.CutPrefix(rest, "mig-"); ok {
			du.Profile = p
		}
		out = append(out, du)
	}
	slices.SortFunc(out, func(a, b DeviceUse) int { return cmp.Compare(a.Device, b.Device) })
	return out
}
