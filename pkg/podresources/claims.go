package podresources

import (
	"context"

	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// ClaimDevice is one device of a DRA ResourceClaim that a container uses,
// as the kubelet reports it in ContainerResources.dynamic_resources. The
// kubelet fills these only with its KubeletPodResourcesDynamicResources
// feature gate on (beta and on by default from 1.34, GA and locked on
// from 1.36); an older or reconfigured kubelet lists the container with
// none.
type ClaimDevice struct {
	Namespace, Pod, Container string
	// ClaimNamespace and ClaimName name the ResourceClaim.
	ClaimNamespace, ClaimName string
	// Driver, Pool and Device name the allocated device (the triplet is
	// unique in the cluster).
	Driver, Pool, Device string
	// ShareID is set for one share of a multi-allocatable device.
	ShareID string
	// CDIDevices are the fully qualified CDI device names the driver
	// returned for it.
	CDIDevices []string
}

// Resources is one answer of the kubelet's List: device plugin
// assignments and DRA claims' devices, per container.
type Resources struct {
	Assignments []Assignment
	Claims      []ClaimDevice
}

// ListResources is [Client.List] with the containers' DRA devices as well,
// from the same call. Errors are those of List.
func (c *Client) ListResources(ctx context.Context) (Resources, error) {
	resp, err := c.list(ctx)
	if err != nil {
		return Resources{}, err
	}
	return Resources{Assignments: Flatten(resp), Claims: FlattenClaims(resp)}, nil
}

// FlattenClaims turns a List response into one ClaimDevice per container
// and claim device, in the kubelet's order.
func FlattenClaims(resp *podresourcesv1.ListPodResourcesResponse) []ClaimDevice {
	var out []ClaimDevice
	for _, p := range resp.GetPodResources() {
		for _, ctr := range p.GetContainers() {
			for _, dr := range ctr.GetDynamicResources() {
				for _, r := range dr.GetClaimResources() {
					var cdi []string
					for _, d := range r.GetCdiDevices() {
						cdi = append(cdi, d.GetName())
					}
					out = append(out, ClaimDevice{
						Namespace: p.GetNamespace(), Pod: p.GetName(), Container: ctr.GetName(),
						ClaimNamespace: dr.GetClaimNamespace(), ClaimName: dr.GetClaimName(),
						Driver: r.GetDriverName(), Pool: r.GetPoolName(), Device: r.GetDeviceName(),
						ShareID: r.GetShareId(), CDIDevices: cdi,
					})
				}
			}
		}
	}
	return out
}
