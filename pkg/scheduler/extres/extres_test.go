package extres

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// classes resolves nvidia.com/gpu to gpu.gpud.io and the implicit name of
// mig.gpud.io, as the cluster's ExtendedResourceCache would.
type classes map[corev1.ResourceName]string

func (c classes) GetDeviceClass(name corev1.ResourceName) *resourceapi.DeviceClass {
	if n, ok := c[name]; ok {
		return &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: n}}
	}
	return nil
}

var resolver = classes{"nvidia.com/gpu": "gpu.gpud.io", corev1.ResourceName(resourceapi.ResourceDeviceClassPrefix + "mig.gpud.io"): "mig.gpud.io"}

func ctr(name string, req map[string]string) corev1.Container {
	c := corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{}}}
	for k, v := range req {
		c.Resources.Requests[corev1.ResourceName(k)] = resource.MustParse(v)
	}
	return c
}

func req(name, class string, n int64) resourceapi.DeviceRequest {
	return resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: n}}
}

func mapping(ctr, res, req string) corev1.ContainerExtendedResourceRequest {
	return corev1.ContainerExtendedResourceRequest{ContainerName: ctr, ResourceName: res, RequestName: req}
}

// TestFor checks the claim's requests and the status mappings against the
// layout kube-scheduler v1.37 writes (its createRequestsAndMappings cases):
// the kubelet and the DRA driver read them, whichever scheduler wrote them.
func TestFor(t *testing.T) {
	sidecar := ctr("sidecar", map[string]string{"nvidia.com/gpu": "1"})
	sidecar.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
	tests := []struct {
		name     string
		init     []corev1.Container
		ctrs     []corev1.Container
		want     []resourceapi.DeviceRequest
		mappings []corev1.ContainerExtendedResourceRequest
	}{
		{name: "the request index counts every resource of the container, sorted",
			ctrs: []corev1.Container{ctr("main", map[string]string{"cpu": "1", "nvidia.com/gpu": "2"})},
			want: []resourceapi.DeviceRequest{req("container-0-request-1", "gpu.gpud.io", 2)},
			mappings: []corev1.ContainerExtendedResourceRequest{
				mapping("main", "nvidia.com/gpu", "container-0-request-1")}},
		{name: "two containers, two requests",
			ctrs: []corev1.Container{ctr("a", map[string]string{"nvidia.com/gpu": "1"}), ctr("b", map[string]string{"nvidia.com/gpu": "3"})},
			want: []resourceapi.DeviceRequest{req("container-0-request-0", "gpu.gpud.io", 1), req("container-1-request-0", "gpu.gpud.io", 3)},
			mappings: []corev1.ContainerExtendedResourceRequest{
				mapping("a", "nvidia.com/gpu", "container-0-request-0"), mapping("b", "nvidia.com/gpu", "container-1-request-0")}},
		{name: "an init container reuses the devices of the containers after it",
			init: []corev1.Container{ctr("init", map[string]string{"nvidia.com/gpu": "1"})},
			ctrs: []corev1.Container{ctr("main", map[string]string{"nvidia.com/gpu": "2"})},
			want: []resourceapi.DeviceRequest{req("container-1-request-0", "gpu.gpud.io", 2)},
			mappings: []corev1.ContainerExtendedResourceRequest{
				mapping("main", "nvidia.com/gpu", "container-1-request-0"), mapping("init", "nvidia.com/gpu", "container-1-request-0")}},
		{name: "an init container asks for what the later containers do not cover",
			init: []corev1.Container{ctr("init", map[string]string{"nvidia.com/gpu": "3"})},
			ctrs: []corev1.Container{ctr("main", map[string]string{"nvidia.com/gpu": "2"})},
			want: []resourceapi.DeviceRequest{req("container-0-request-0", "gpu.gpud.io", 1), req("container-1-request-0", "gpu.gpud.io", 2)},
			mappings: []corev1.ContainerExtendedResourceRequest{
				mapping("main", "nvidia.com/gpu", "container-1-request-0"),
				mapping("init", "nvidia.com/gpu", "container-1-request-0"), mapping("init", "nvidia.com/gpu", "container-0-request-0")}},
		{name: "an init container reuses a sidecar after it; one after the sidecar asks for its own",
			init: []corev1.Container{ctr("i0", map[string]string{"nvidia.com/gpu": "1"}), sidecar, ctr("i2", map[string]string{"nvidia.com/gpu": "3"})},
			ctrs: []corev1.Container{ctr("main", map[string]string{"cpu": "1"})},
			want: []resourceapi.DeviceRequest{req("container-1-request-0", "gpu.gpud.io", 1), req("container-2-request-0", "gpu.gpud.io", 3)},
			mappings: []corev1.ContainerExtendedResourceRequest{
				mapping("sidecar", "nvidia.com/gpu", "container-1-request-0"),
				mapping("i0", "nvidia.com/gpu", "container-1-request-0"), mapping("i2", "nvidia.com/gpu", "container-2-request-0")}},
		{name: "run-once init containers share the largest request",
			init: []corev1.Container{ctr("i0", map[string]string{"nvidia.com/gpu": "1"}), ctr("i1", map[string]string{"nvidia.com/gpu": "2"})},
			ctrs: []corev1.Container{ctr("main", map[string]string{"cpu": "1"})},
			want: []resourceapi.DeviceRequest{req("container-1-request-0", "gpu.gpud.io", 2)},
			mappings: []corev1.ContainerExtendedResourceRequest{
				mapping("i0", "nvidia.com/gpu", "container-1-request-0"), mapping("i1", "nvidia.com/gpu", "container-1-request-0")}},
		{name: "the implicit name of a class",
			ctrs: []corev1.Container{ctr("main", map[string]string{resourceapi.ResourceDeviceClassPrefix + "mig.gpud.io": "1"})},
			want: []resourceapi.DeviceRequest{req("container-0-request-0", "mig.gpud.io", 1)},
			mappings: []corev1.ContainerExtendedResourceRequest{
				mapping("main", resourceapi.ResourceDeviceClassPrefix+"mig.gpud.io", "container-0-request-0")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-1"},
				Spec: corev1.PodSpec{InitContainers: tc.init, Containers: tc.ctrs}}
			got := For(pod, resolver, nil)
			if got == nil {
				t.Fatal("no claim")
			}
			if !reflect.DeepEqual(got.Claim.Spec.Devices.Requests, tc.want) {
				t.Errorf("requests %+v\nwant %+v", got.Claim.Spec.Devices.Requests, tc.want)
			}
			if !reflect.DeepEqual(got.Mappings, tc.mappings) {
				t.Errorf("mappings %+v\nwant %+v", got.Mappings, tc.mappings)
			}
			c := got.Claim
			if !IsPlaceholder(c) || !IsExtendedClaim(c, pod.UID) || IsExtendedClaim(c, "other") {
				t.Errorf("claim %s: placeholder %v, the pod's %v", c.Name, IsPlaceholder(c), IsExtendedClaim(c, pod.UID))
			}
			if c.GenerateName != "p-extended-resources-" || c.Namespace != "ns" {
				t.Errorf("claim generateName %q namespace %q", c.GenerateName, c.Namespace)
			}
			w := ForWrite(c)
			if w.Name != "" || w.UID != "" || w.GenerateName == "" {
				t.Errorf("claim to create: name %q uid %q generateName %q", w.Name, w.UID, w.GenerateName)
			}
		})
	}
}

// TestForNone: resources no class serves (a device plugin's, CPU) need no
// claim; an existing claim is reused with the mappings computed again.
func TestForNone(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "u"}, Spec: corev1.PodSpec{Containers: []corev1.Container{
		ctr("main", map[string]string{"cpu": "2", "example.com/nic": "1", "nvidia.com/gpu": "0"})}}}
	if got := For(pod, resolver, nil); got != nil {
		t.Errorf("claim %+v for a pod without DRA-backed resources", got.Claim)
	}
	if got := For(pod, nil, nil); got != nil {
		t.Error("claim without a resolver")
	}
	pod.Spec.Containers[0] = ctr("main", map[string]string{"nvidia.com/gpu": "1"})
	old := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "p-extended-resources-x", ResourceVersion: "7"}}
	got := For(pod, resolver, old)
	if got.Claim != old || IsPlaceholder(got.Claim) || len(got.Mappings) != 1 {
		t.Errorf("existing claim not reused: %+v", got)
	}
}
