package manifest

import (
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// GPUNodeLabels are the node labels a GPU agent's DaemonSet may select on,
// each with value "true": NFD's PCI vendor label for NVIDIA (10de), which a
// fresh node gets from NFD before any GPU software runs, and GPU Feature
// Discovery's (gpud sets it too), which an admin can also set by hand.
var GPUNodeLabels = []string{"feature.node.kubernetes.io/pci-10de.present", "nvidia.com/gpu.present"}

// TerminationPathUnwritable returns the read-only volume mount under which
// a container's termination message path lies (the kubelet's default is
// /dev/termination-log), or "" when the runtime can create it. runc cannot
// create the file in a read-only bind mount, and the container never
// starts ("read-only file system").
func TerminationPathUnwritable(c corev1.Container) string {
	p := c.TerminationMessagePath
	if p == "" {
		p = corev1.TerminationMessagePathDefault
	}
	for _, m := range c.VolumeMounts {
		mp := path.Clean(m.MountPath)
		if m.ReadOnly && (p == mp || strings.HasPrefix(p, mp+"/")) {
			return m.MountPath
		}
	}
	return ""
}

// SelectsNodesLabelled reports whether a pod spec can be placed on a node
// that has exactly one of labels set to "true" and no other label: each
// label alone must be enough (an OR, as nodeAffinity terms are), so a node
// labelled only by NFD, or only by hand, runs the pod. It evaluates the
// spec's nodeSelector and required node affinity as kube-scheduler does.
func SelectsNodesLabelled(spec corev1.PodSpec, labels []string) bool {
	required := nodeaffinity.GetRequiredNodeAffinity(&corev1.Pod{Spec: spec})
	for _, l := range labels {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-node", Labels: map[string]string{l: "true"}}}
		if ok, err := required.Match(node); err != nil || !ok {
			return false
		}
	}
	return true
}
