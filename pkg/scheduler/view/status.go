package view

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Allocation is one claim's decided allocation.
type Allocation struct {
	Claim *resourceapi.ResourceClaim
	Node  string
	// Result is status.allocation as kube-scheduler writes it: the device
	// results (request, driver, pool = node, device; a share ID and the
	// consumed capacity on shared devices; the request's tolerations),
	// the class and claim configs, and a node selector on metadata.name.
	Result *resourceapi.AllocationResult
}

// allocationResult assembles a claim's status.allocation as kube-scheduler
// does (structured allocator, v1.37): results in request order, each
// request's class configs once per class then the claim's configs, and
// a node selector pinning the claim to the node of its node-local devices.
func allocationResult(c *resourceapi.ResourceClaim, items []*Item, results []resourceapi.DeviceRequestAllocationResult, node string) *resourceapi.AllocationResult {
	a := &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: results}}
	classAt := map[string][2]int{}
	for _, it := range items {
		if r, ok := classAt[it.class.Name]; ok {
			for i := r[0]; i < r[1]; i++ {
				a.Devices.Config[i].Requests = append(a.Devices.Config[i].Requests, it.Request)
			}
			continue
		}
		start := len(a.Devices.Config)
		for _, cfg := range it.class.Spec.Config {
			a.Devices.Config = append(a.Devices.Config, resourceapi.DeviceAllocationConfiguration{
				Source: resourceapi.AllocationConfigSourceClass, Requests: []string{it.Request}, DeviceConfiguration: *cfg.DeviceConfiguration.DeepCopy()})
		}
		classAt[it.class.Name] = [2]int{start, len(a.Devices.Config)}
	}
	for _, cfg := range c.Spec.Devices.Config {
		a.Devices.Config = append(a.Devices.Config, resourceapi.DeviceAllocationConfiguration{
			Source: resourceapi.AllocationConfigSourceClaim, Requests: cfg.Requests, DeviceConfiguration: *cfg.DeviceConfiguration.DeepCopy()})
	}
	a.NodeSelector = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
	}}}
	return a
}

// Status returns a copy of the claim, as read (keep its resourceVersion
// for UpdateStatus), with status.allocation set and the pod added to
// reservedFor. now, if not zero, is the allocationTimestamp (an API server
// without DRADeviceBindingConditions drops it). It fails if the claim is
// allocated already or reservedFor is full.
func (a Allocation) Status(pod *corev1.Pod, now time.Time) (*resourceapi.ResourceClaim, error) {
	if a.Claim.Status.Allocation != nil {
		return nil, fmt.Errorf("claim %s/%s is allocated already: %w", a.Claim.Namespace, a.Claim.Name, ErrInvalid)
	}
	if len(a.Claim.Status.ReservedFor) >= resourceapi.ResourceClaimReservedForMaxSize {
		return nil, fmt.Errorf("claim %s/%s: reservedFor holds %d consumers already: %w", a.Claim.Namespace, a.Claim.Name, len(a.Claim.Status.ReservedFor), ErrInvalid)
	}
	c := a.Claim.DeepCopy()
	c.Status.Allocation = a.Result.DeepCopy()
	if !now.IsZero() {
		t := metav1.NewTime(now.UTC().Truncate(time.Second))
		c.Status.Allocation.AllocationTimestamp = &t
	}
	if pod != nil {
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{
			Resource: "pods", Name: pod.Name, UID: pod.UID})
	}
	return c, nil
}
