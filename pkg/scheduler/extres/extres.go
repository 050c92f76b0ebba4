package extres

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	schedutil "k8s.io/kubernetes/pkg/scheduler/util"
	"k8s.io/utils/ptr"
)

// Placeholder is the name of a claim not yet written: not a valid object
// name, so it never collides with a real claim (kube-scheduler's
// "<extended-resources>").
const Placeholder = "<extended-resources>"

// Resolver finds the DeviceClass that serves an extended resource, nil for
// none (kube-scheduler's DeviceClassResolver; the ExtendedResourceCache of
// k8s.io/dynamic-resource-allocation is one).
type Resolver interface {
	GetDeviceClass(name corev1.ResourceName) *resourceapi.DeviceClass
}

// Claim is the claim a pod's DRA-backed extended resources need and the
// mapping its status must carry.
type Claim struct {
	// Claim is the placeholder (Name Placeholder, no ResourceVersion) or
	// the claim written in an earlier attempt.
	Claim *resourceapi.ResourceClaim
	// Mappings are status.extendedResourceClaimStatus.requestMappings.
	Mappings []corev1.ContainerExtendedResourceRequest
}

// IsPlaceholder reports whether c is a claim this package made and nobody
// wrote yet.
func IsPlaceholder(c *resourceapi.ResourceClaim) bool {
	return c != nil && c.Name == Placeholder && c.ResourceVersion == ""
}

// IsExtendedClaim reports whether c is an extended-resource claim of the
// pod with uid (the annotation, and the pod as its controller).
func IsExtendedClaim(c *resourceapi.ResourceClaim, uid types.UID) bool {
	owner, ok := Owner(c)
	return ok && owner == uid
}

// Owner returns the UID of the pod whose extended-resource claim c is (the
// annotation, and the pod as its controller); false when c is none.
func Owner(c *resourceapi.ResourceClaim) (types.UID, bool) {
	if c.Annotations[resourceapi.ExtendedResourceClaimAnnotation] != "true" {
		return "", false
	}
	i := slices.IndexFunc(c.OwnerReferences, func(r metav1.OwnerReference) bool { return ptr.Deref(r.Controller, false) })
	if i < 0 {
		return "", false
	}
	return c.OwnerReferences[i].UID, true
}

// For returns the claim pod needs for its extended resources backed by
// DRA, or nil when it asks for none. existing is the pod's
// extended-resource claim written earlier (nil: none): it is reused, and
// the mappings are computed again (they depend only on the pod).
func For(pod *corev1.Pod, r Resolver, existing *resourceapi.ResourceClaim) *Claim {
	return forResources(pod, backedBy(pod, r), existing)
}

// backedBy maps the extended resources pod asks for (non-zero, in any
// container) that a DeviceClass serves to that class.
func backedBy(pod *corev1.Pod, r Resolver) map[corev1.ResourceName]*resourceapi.DeviceClass {
	if r == nil {
		return nil
	}
	backed := map[corev1.ResourceName]*resourceapi.DeviceClass{}
	each := func(c *corev1.Container) {
		for name, q := range c.Resources.Requests {
			if q.IsZero() || !schedutil.IsDRAExtendedResourceName(name) {
				continue
			}
			if _, seen := backed[name]; !seen {
				if dc := r.GetDeviceClass(name); dc != nil {
					backed[name] = dc
				}
			}
		}
	}
	for i := range pod.Spec.InitContainers {
		each(&pod.Spec.InitContainers[i])
	}
	for i := range pod.Spec.Containers {
		each(&pod.Spec.Containers[i])
	}
	return backed
}

// forResources is For for the resources of backed only (nil when empty).
func forResources(pod *corev1.Pod, backed map[corev1.ResourceName]*resourceapi.DeviceClass, existing *resourceapi.ResourceClaim) *Claim {
	if len(backed) == 0 {
		return nil
	}
	reqs, mappings := requestsAndMappings(pod, backed)
	if existing != nil {
		return &Claim{Claim: existing, Mappings: mappings}
	}
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: pod.Namespace,
			Name:      Placeholder,
			// A stand-in UID, unique per pod, until the API server
			// gives the claim its own.
			UID:          types.UID("extended-resources-" + string(pod.UID)),
			GenerateName: pod.Name + "-extended-resources-",
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID, Controller: ptr.To(true),
			}},
			Annotations: map[string]string{resourceapi.ExtendedResourceClaimAnnotation: "true"},
		},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: reqs}},
	}
	return &Claim{Claim: c, Mappings: mappings}
}

// ForWrite is c ready to be created: no name (the API server generates
// one from GenerateName), no UID, no status.
func ForWrite(c *resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
	out := c.DeepCopy()
	out.Name, out.UID = "", ""
	out.Status = resourceapi.ResourceClaimStatus{}
	return out
}

// requestsAndMappings lays out the claim's requests and the containers'
// mappings as kube-scheduler's createRequestsAndMappings does: long-lived
// containers (regular and sidecar) each get their own request; run-once
// init containers reuse the requests of the long-lived containers after
// them and share one request, the largest, for what is left.
func requestsAndMappings(pod *corev1.Pod, backed map[corev1.ResourceName]*resourceapi.DeviceClass) ([]resourceapi.DeviceRequest, []corev1.ContainerExtendedResourceRequest) {
	containers := slices.Clone(pod.Spec.InitContainers)
	containers = append(containers, pod.Spec.Containers...)
	nInit := len(pod.Spec.InitContainers)
	var long, short []int
	for i, c := range containers {
		sidecar := c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
		if i < nInit && !sidecar {
			short = append(short, i)
			continue
		}
		long = append(long, i)
	}
	names := make([]corev1.ResourceName, 0, len(backed))
	for n := range backed {
		names = append(names, n)
	}
	slices.Sort(names)

	var reqs []resourceapi.DeviceRequest
	var mappings []corev1.ContainerExtendedResourceRequest
	for _, res := range names {
		class := backed[res].Name
		longReqs := make([]*resourceapi.DeviceRequest, len(containers))
		var longMaps, shortMaps []corev1.ContainerExtendedResourceRequest
		for _, i := range long {
			r, m := containerRequest(i, &containers[i], res, class, nil)
			longReqs[i] = r
			longMaps = append(longMaps, m...)
		}
		var maxShort *resourceapi.DeviceRequest
		shortNames := map[string]bool{}
		for _, i := range short {
			r, m := containerRequest(i, &containers[i], res, class, longReqs[i:])
			if r != nil {
				shortNames[r.Name] = true
				if maxShort == nil || maxShort.Exactly.Count < r.Exactly.Count {
					maxShort = r
				}
			}
			shortMaps = append(shortMaps, m...)
		}
		if maxShort != nil && len(shortNames) > 1 {
			delete(shortNames, maxShort.Name)
			for i := range shortMaps {
				if shortNames[shortMaps[i].RequestName] {
					shortMaps[i].RequestName = maxShort.Name
				}
			}
		}
		if maxShort != nil {
			reqs = append(reqs, *maxShort)
		}
		for _, r := range longReqs {
			if r != nil {
				reqs = append(reqs, *r)
			}
		}
		mappings = append(mappings, longMaps...)
		mappings = append(mappings, shortMaps...)
	}
	slices.SortFunc(reqs, func(a, b resourceapi.DeviceRequest) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return reqs, mappings
}

// containerRequest is one container's request for res (nil if it asks
// for none or the reusable requests cover it) and its mappings. reusable
// are requests of long-lived containers that a run-once init container
// may use before asking for its own (entries may be nil).
func containerRequest(index int, c *corev1.Container, res corev1.ResourceName, class string, reusable []*resourceapi.DeviceRequest) (*resourceapi.DeviceRequest, []corev1.ContainerExtendedResourceRequest) {
	q, ok := c.Resources.Requests[res]
	if !ok {
		return nil, nil
	}
	want, ok := q.AsInt64()
	if !ok || want == 0 {
		return nil, nil
	}
	var mappings []corev1.ContainerExtendedResourceRequest
	sum := int64(0)
	for _, r := range reusable {
		if r == nil {
			continue
		}
		sum += r.Exactly.Count
		mappings = append(mappings, corev1.ContainerExtendedResourceRequest{ContainerName: c.Name, ResourceName: string(res), RequestName: r.Name})
		if sum >= want {
			return nil, mappings
		}
	}
	keys := make([]string, 0, len(c.Resources.Requests))
	for k := range c.Resources.Requests {
		keys = append(keys, string(k))
	}
	slices.Sort(keys)
	name := fmt.Sprintf("container-%d-request-%d", index, slices.Index(keys, string(res)))
	r := &resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: want - sum}}
	mappings = append(mappings, corev1.ContainerExtendedResourceRequest{ContainerName: c.Name, ResourceName: string(res), RequestName: name})
	return r, mappings
}
