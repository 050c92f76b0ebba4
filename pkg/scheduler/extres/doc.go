// Package extres serves extended resources backed by DRA: a pod asking
// for `nvidia.com/gpu: 1` in a cluster whose DeviceClass names
// `extendedResourceName: nvidia.com/gpu` (or the implicit name
// `deviceclass.resource.kubernetes.io/<class>`) gets its devices through a
// ResourceClaim the scheduler writes for it, as kube-scheduler v1.37's
// DynamicResources plugin does (DRAExtendedResource, GA and locked on).
//
// The claim has one request per container and resource, named
// container-<i>-request-<j>, and carries the annotation
// resource.kubernetes.io/extended-resource-claim: "true" and the pod as
// its controller; the pod's status.extendedResourceClaimStatus maps each
// container's resource to its request, which is what the kubelet reads to
// hand the devices to the container. The request layout is kube-scheduler's
// (its builder is unexported, so it is restated here, with its tests'
// cases): a DRA driver's kubelet plugin sees the same claim whichever of
// the two schedulers wrote it.
//
// As in kube-scheduler, the resource is served node by node ([PerNode]):
// a node whose allocatable lists it (a device plugin, gpud's own or
// NVIDIA's) serves it there, counted by NodeResourcesFit, and no claim is
// made; on the other nodes the DeviceClass serves it through the claim. A
// pod is given such a claim only while none exists for it; one written in
// an earlier attempt is reused as written.
package extres
