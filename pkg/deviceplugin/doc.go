// Package deviceplugin serves the kubelet device plugin API
// (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1) for a node's GPUs: whole
// GPUs, MIG slices (strategies none, single and mixed) and time-sliced
// replicas, one gRPC server per resource on a unix socket in the kubelet's
// device-plugin directory, each registered with kubelet.sock.
//
// The [Manager] reads the node from a [Source] (the agent's inventory, with
// health already applied) and never touches NVML: it imports no go-nvml. On
// every inventory change it rebuilds the advertised devices, rewrites the
// CDI spec in the CDI directory, pushes full lists through ListAndWatch,
// registers new resources and empties the ones that are gone, without a
// restart. It re-registers when the kubelet restarts (kubelet.sock
// recreated) and when its own socket is deleted, and retries with backoff
// while no kubelet listens.
//
// Preferred allocation is topology-aware through pkg/topology; replicas are
// packed onto one GPU, onto GPUs already shared before untouched ones.
// Allocate answers with CDI device names (kind nvidia.com/gpu, named by
// UUID) and NVIDIA_VISIBLE_DEVICES, plus MPS limits for replicas.
package deviceplugin
