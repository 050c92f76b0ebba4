// Package daemonset holds the manifests that deploy the gpud agent; its
// test decodes every manifest strictly into the k8s.io/api types, so a
// typo in a field name fails CI.
package daemonset

import (
	"fmt"
	"github.com/gpud/gpud/internal/manifest"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// decodeAll strictly decodes every document of every manifest file into
// its typed object (internal/manifest), keyed "<file>#<n>".
func decodeAll(t *testing.T, files []string) map[string]any {
	t.Helper()
	objs := map[string]any{}
	for _, f := range files {
		docs, err := manifest.DecodeFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range docs {
			objs[fmt.Sprintf("%s#%d", filepath.Base(f), d.Doc)] = d.Object
		}
	}
	return objs
}

func glob(t *testing.T, pattern string) []string {
	t.Helper()
	files, err := filepath.Glob(pattern)
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests match %s: %v", pattern, err)
	}
	return files
}

func TestDaemonSetManifests(t *testing.T) {
	objs := decodeAll(t, glob(t, "*.yaml"))
	var ds *appsv1.DaemonSet
	for _, o := range objs {
		if d, ok := o.(*appsv1.DaemonSet); ok {
			ds = d
		}
	}
	if ds == nil {
		t.Fatal("no DaemonSet in deploy/daemonset")
	}
	spec := ds.Spec.Template.Spec
	if !labelsMatch(ds.Spec.Selector, ds.Spec.Template.Labels) {
		t.Errorf("selector %v does not match template labels %v", ds.Spec.Selector.MatchLabels, ds.Spec.Template.Labels)
	}
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	c := spec.Containers[0]
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		if _, ok := vols[m.Name]; !ok {
			t.Errorf("mount %s names no volume", m.Name)
		}
		mounts[m.MountPath] = m.Name
	}
	tests := []struct {
		name     string
		hostPath string
		mount    string
		flag     string
	}{
		{name: "device plugin dir", hostPath: "/var/lib/kubelet/device-plugins", mount: "/var/lib/kubelet/device-plugins", flag: "--device-plugin-dir=/var/lib/kubelet/device-plugins"},
		{name: "cdi dir", hostPath: "/var/run/cdi", mount: "/var/run/cdi", flag: "--cdi-dir=/var/run/cdi"},
		{name: "pod resources", hostPath: "/var/lib/kubelet/pod-resources", mount: "/var/lib/kubelet/pod-resources"},
		{name: "dev", hostPath: "/dev", mount: "/dev"},
		{name: "admin socket", hostPath: "/run/gpud", mount: "/run/gpud", flag: "--admin-socket=/run/gpud/admin.sock"},
		{name: "mig journal", hostPath: "/var/lib/gpud", mount: "/var/lib/gpud", flag: "--mig-journal=/var/lib/gpud/mig-journal.json"},
		{name: "pod logs", hostPath: "/var/log/pods", mount: "/var/log/pods", flag: "--pod-logs-root=/var/log/pods"},
		// Device isolation (on by default) filters other containers'
		// cgroups, found through the kubelet's container log links, and
		// hooks container creation through NRI: the agent's defaults
		// (--container-logs-root, --nri-socket) at the host's paths.
		{name: "host cgroup", hostPath: "/sys/fs/cgroup", mount: "/sys/fs/cgroup"},
		{name: "container logs", hostPath: "/var/log/containers", mount: "/var/log/containers"},
		{name: "nri socket dir", hostPath: "/var/run/nri", mount: "/var/run/nri"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, ok := vols[mounts[tc.mount]]
			if !ok || v.HostPath == nil || v.HostPath.Path != tc.hostPath {
				t.Fatalf("%s: not mounted from host path %s", tc.mount, tc.hostPath)
			}
			if tc.flag != "" && !slices.Contains(c.Args, tc.flag) {
				t.Errorf("args %v lack %s", c.Args, tc.flag)
			}
		})
	}
	if spec.HostNetwork || spec.HostIPC {
		t.Error("the agent needs no host network or IPC namespace")
	}
	// NVML reports GPU processes by host PID: attribution reads their
	// cgroups and the memory watchdog signals them.
	if !spec.HostPID {
		t.Error("the agent needs the host PID namespace to attribute GPU processes to pods")
	}
	// A fresh GPU node has no label gpud sets: NFD's PCI vendor label alone,
	// or GFD's label set by hand, must be enough, and a node without
	// either gets no agent.
	if !manifest.SelectsNodesLabelled(spec, manifest.GPUNodeLabels) {
		t.Errorf("node selection (selector %v, affinity %+v) does not take a node labelled by any one of %v", spec.NodeSelector, spec.Affinity, manifest.GPUNodeLabels)
	}
	if manifest.SelectsNodesLabelled(spec, []string{"kubernetes.io/os"}) {
		t.Error("the agent would run on nodes without GPUs")
	}
	for _, c := range spec.Containers {
		if ro := manifest.TerminationPathUnwritable(c); ro != "" {
			t.Errorf("container %s: termination message path %q is in the read-only mount %s: the runtime cannot create it and the container never starts", c.Name, c.TerminationMessagePath, ro)
		}
	}
	if !slices.ContainsFunc(spec.Tolerations, func(tl corev1.Toleration) bool { return tl.Key == "nvidia.com/gpu" }) {
		t.Error("no toleration for the nvidia.com/gpu taint")
	}
	if sa := spec.ServiceAccountName; sa == "" || !hasServiceAccount(objs, sa) {
		t.Errorf("service account %q is not in the manifests", sa)
	}
}

func TestExamplePods(t *testing.T) {
	want := map[string]string{
		"pod-gpu.yaml":    "nvidia.com/gpu",
		"pod-mig.yaml":    "nvidia.com/mig-",
		"pod-shared.yaml": "nvidia.com/gpu.shared",
	}
	objs := decodeAll(t, glob(t, "../examples/pod-*.yaml"))
	seen := map[string]bool{}
	for key, o := range objs {
		file := strings.Split(key, "#")[0]
		p := o.(*corev1.Pod)
		for name := range p.Spec.Containers[0].Resources.Limits {
			if prefix, ok := want[file]; ok && strings.HasPrefix(string(name), prefix) {
				if file == "pod-gpu.yaml" && string(name) != prefix {
					continue
				}
				seen[file] = true
			}
		}
	}
	for file := range want {
		if !seen[file] {
			t.Errorf("%s does not request %s", file, want[file])
		}
	}
}

func labelsMatch(sel *metav1.LabelSelector, labels map[string]string) bool {
	if sel == nil || len(sel.MatchLabels) == 0 {
		return false
	}
	for k, v := range sel.MatchLabels {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func hasServiceAccount(objs map[string]any, name string) bool {
	for _, o := range objs {
		if sa, ok := o.(*corev1.ServiceAccount); ok && sa.Name == name {
			return true
		}
	}
	return false
}
