// Package dra holds the manifests of gpud's DRA mode; its test decodes
// them strictly into the k8s.io/api types and checks the DeviceClass and
// claim selectors against the devices the driver publishes for a simulated
// DGX H100 (real CEL evaluation happens on the test API server).
package dra

import (
	"fmt"
	"github.com/gpud/gpud/internal/manifest"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpud/gpud/pkg/discovery"
	dradriver "github.com/gpud/gpud/pkg/dra"
	"github.com/gpud/gpud/pkg/simnode"
)

// decodeAll strictly decodes every document of the files (internal/manifest),
// keyed "<file>#<kind>/<name>".
func decodeAll(t *testing.T, patterns ...string) map[string]any {
	t.Helper()
	objs := map[string]any{}
	for _, p := range patterns {
		files, err := filepath.Glob(p)
		if err != nil || len(files) == 0 {
			t.Fatalf("glob %s: %v (%d files)", p, err, len(files))
		}
		for _, f := range files {
			docs, err := manifest.DecodeFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range docs {
				kind := d.Object.GetObjectKind().GroupVersionKind().Kind
				name := d.Object.(metav1.Object).GetName()
				objs[fmt.Sprintf("%s#%s/%s", filepath.Base(f), kind, name)] = d.Object
			}
		}
	}
	return objs
}

// simDevices is what the driver publishes for a simulated DGX H100.
func simDevices(t *testing.T) []resourceapi.Device {
	t.Helper()
	n := simnode.NewBuiltin("dgx-h100")
	t.Cleanup(n.Close)
	inv, err := discovery.New(n, "dgx-h100", nil).Inventory()
	if err != nil {
		t.Fatal(err)
	}
	st := dradriver.NodeState{Inventory: inv, MIG: map[string]dradriver.MIGCatalog{}}
	for _, g := range inv.GPUs {
		// The H100 1g.10gb profile: seven one-slice placements.
		p := dradriver.MIGProfile{Name: "1g.10gb", ComputeSlices: 1, MemoryBytes: 10 << 30}
		for s := range 7 {
			p.Placements = append(p.Placements, dradriver.Placement{Start: s, Size: 1})
		}
		st.MIG[g.UUID] = dradriver.MIGCatalog{MemorySlices: 8, ComputeSlices: 7, Profiles: []dradriver.MIGProfile{p}, LiveModeChange: true}
	}
	pub, err := dradriver.Build("dgx-h100", st)
	if err != nil {
		t.Fatal(err)
	}
	var out []resourceapi.Device
	for _, s := range pub.Resources.Pools["dgx-h100"].Slices {
		out = append(out, s.Devices...)
	}
	return out
}

// selectorTerm matches the comparisons the shipped selectors use:
// device.driver == "x" and device.attributes["domain"].name == "x".
var selectorTerm = regexp.MustCompile(`device\.(driver|attributes\["([^"]+)"\]\.(\w+)) == "([^"]*)"`)

// matching lists the devices whose attributes satisfy every comparison in
// the selectors (all terms are joined with &&; anything else fails the
// test, so a selector this cannot read is not silently accepted).
func matching(t *testing.T, devs []resourceapi.Device, sels ...resourceapi.DeviceSelector) []string {
	t.Helper()
	type term struct{ attr, value string }
	var terms []term
	for _, s := range sels {
		expr := s.CEL.Expression
		for _, part := range strings.Split(expr, "&&") {
			m := selectorTerm.FindStringSubmatch(strings.TrimSpace(part))
			if m == nil || m[0] != strings.TrimSpace(part) {
				t.Fatalf("selector %q: cannot read %q", expr, part)
			}
			switch {
			case m[1] == "driver":
				terms = append(terms, term{attr: "", value: m[4]})
			case m[2] != dradriver.DriverName:
				t.Fatalf("selector %q: attribute domain %q, want %s", expr, m[2], dradriver.DriverName)
			default:
				terms = append(terms, term{attr: m[3], value: m[4]})
			}
		}
	}
	var out []string
	for _, d := range devs {
		ok := true
		for _, tm := range terms {
			if tm.attr == "" {
				ok = ok && tm.value == dradriver.DriverName
				continue
			}
			a, has := d.Attributes[resourceapi.QualifiedName(tm.attr)]
			ok = ok && has && a.StringValue != nil && *a.StringValue == tm.value
		}
		if ok {
			out = append(out, d.Name)
		}
	}
	return out
}

func TestManifests(t *testing.T) {
	objs := decodeAll(t, "*.yaml", "examples/*.yaml")
	devs := simDevices(t)
	classes := map[string]*resourceapi.DeviceClass{}
	for _, o := range objs {
		if c, ok := o.(*resourceapi.DeviceClass); ok {
			classes[c.Name] = c
		}
	}
	gpuClass, migClass := classes["gpu.gpud.io"], classes["mig.gpud.io"]
	if gpuClass == nil || migClass == nil {
		t.Fatalf("DeviceClasses %v, want gpu.gpud.io and mig.gpud.io", classes)
	}
	if gpuClass.Spec.ExtendedResourceName == nil || *gpuClass.Spec.ExtendedResourceName != "nvidia.com/gpu" {
		t.Errorf("gpu.gpud.io extendedResourceName = %v, want nvidia.com/gpu", gpuClass.Spec.ExtendedResourceName)
	}
	if got := matching(t, devs, gpuClass.Spec.Selectors...); len(got) != 8 || !slices.Contains(got, "gpu-0") {
		t.Errorf("gpu.gpud.io matches %v, want the 8 whole GPUs", got)
	}
	if got := matching(t, devs, migClass.Spec.Selectors...); len(got) != 56 {
		t.Errorf("mig.gpud.io matches %d devices, want 56 MIG placements", len(got))
	}

	templates := map[string]*resourceapi.ResourceClaimTemplate{}
	for _, o := range objs {
		if c, ok := o.(*resourceapi.ResourceClaimTemplate); ok {
			templates[c.Name] = c
		}
	}
	for _, tc := range []struct {
		template string
		matches  int
	}{
		{template: "whole-gpu", matches: 8},
		{template: "two-gpus-nvlink", matches: 8},
		{template: "fraction-20gi", matches: 8},
		{template: "mig-1g10gb", matches: 56},
	} {
		t.Run(tc.template, func(t *testing.T) {
			tmpl := templates[tc.template]
			if tmpl == nil {
				t.Fatalf("no ResourceClaimTemplate %s", tc.template)
			}
			reqs := tmpl.Spec.Spec.Devices.Requests
			if len(reqs) != 1 || reqs[0].Exactly == nil {
				t.Fatalf("requests = %+v", reqs)
			}
			r := reqs[0].Exactly
			class := classes[r.DeviceClassName]
			if class == nil {
				t.Fatalf("class %q is not shipped", r.DeviceClassName)
			}
			sels := append(slices.Clone(class.Spec.Selectors), r.Selectors...)
			if got := matching(t, devs, sels...); len(got) != tc.matches {
				t.Errorf("matches %d devices, want %d", len(got), tc.matches)
			}
			var pod *corev1.Pod
			for _, o := range objs {
				if p, ok := o.(*corev1.Pod); ok && len(p.Spec.ResourceClaims) > 0 && p.Spec.ResourceClaims[0].ResourceClaimTemplateName != nil &&
					*p.Spec.ResourceClaims[0].ResourceClaimTemplateName == tc.template {
					pod = p
				}
			}
			if pod == nil || len(pod.Spec.Containers[0].Resources.Claims) != 1 || pod.Spec.Containers[0].Resources.Claims[0].Name != pod.Spec.ResourceClaims[0].Name {
				t.Errorf("no pod using %s through a container claim", tc.template)
			}
		})
	}
	nv := templates["two-gpus-nvlink"].Spec.Spec.Devices
	if len(nv.Constraints) != 1 || nv.Constraints[0].MatchAttribute == nil || *nv.Constraints[0].MatchAttribute != "gpu.gpud.io/nvlinkDomain" {
		t.Errorf("two-gpus-nvlink constraints = %+v, want matchAttribute gpu.gpud.io/nvlinkDomain", nv.Constraints)
	}
	c := templates["fraction-20gi"].Spec.Spec.Devices.Requests[0].Exactly.Capacity
	if c == nil {
		t.Fatal("fraction-20gi has no capacity request")
	}
	if mem := c.Requests["memory"]; mem.Value() != 20<<30 {
		t.Errorf("fraction-20gi memory = %v, want 20Gi", mem.String())
	}
}

func TestDaemonSetDRAMode(t *testing.T) {
	objs := decodeAll(t, "daemonset.yaml", "rbac.yaml")
	ds, ok := objs["daemonset.yaml#DaemonSet/gpud-dra"].(*appsv1.DaemonSet)
	if !ok {
		t.Fatalf("no DaemonSet gpud-dra in %v", objs)
	}
	spec := ds.Spec.Template.Spec
	args := strings.Join(spec.Containers[0].Args, " ")
	for _, want := range []string{"--kubelet-api=dra", "--node-name=$(NODE_NAME)", "--kubelet-plugins-dir=/var/lib/kubelet/plugins",
		"--kubelet-registry-dir=/var/lib/kubelet/plugins_registry", "--cdi-dir=/var/run/cdi"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %s", args, want)
		}
	}
	if strings.Contains(args, "device-plugin") {
		t.Errorf("DRA mode runs the device plugin: %q", args)
	}
	if !manifest.SelectsNodesLabelled(spec, manifest.GPUNodeLabels) || manifest.SelectsNodesLabelled(spec, []string{"kubernetes.io/os"}) {
		t.Errorf("node selection (selector %v, affinity %+v): want any node labelled by one of %v, and no other", spec.NodeSelector, spec.Affinity, manifest.GPUNodeLabels)
	}
	for _, c := range spec.Containers {
		if ro := manifest.TerminationPathUnwritable(c); ro != "" {
			t.Errorf("container %s: termination message path %q is in the read-only mount %s: the runtime cannot create it and the container never starts", c.Name, c.TerminationMessagePath, ro)
		}
	}
	mounts := map[string]string{}
	for _, m := range spec.Containers[0].VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	for _, v := range spec.Volumes {
		if v.Name == "mps-shm" {
			// MPS: the host's <mps-root>/shm is the agent's /dev/shm, where
			// the daemons it starts keep the segments a fraction's
			// container maps from the same host dir.
			if v.HostPath == nil || v.HostPath.Path != "/run/gpud/mps/shm" || mounts[v.Name] != "/dev/shm" {
				t.Errorf("volume mps-shm: %+v mounted at %q, want host /run/gpud/mps/shm at /dev/shm", v.VolumeSource, mounts[v.Name])
			}
			continue
		}
		if v.HostPath != nil && mounts[v.Name] != "" && mounts[v.Name] != v.HostPath.Path {
			t.Errorf("volume %s: host %s mounted at %s; the kubelet needs the same path", v.Name, v.HostPath.Path, mounts[v.Name])
		}
	}
	if _, ok := mounts["mps-shm"]; !ok {
		t.Errorf("no mps-shm mount: MPS daemons for DRA fractions need the host's shm dir as /dev/shm")
	}
	caps := ""
	for _, e := range spec.Containers[0].Env {
		if e.Name == "NVIDIA_DRIVER_CAPABILITIES" {
			caps = e.Value
		}
	}
	if caps != "compute,utility" {
		t.Errorf("NVIDIA_DRIVER_CAPABILITIES = %q, want compute,utility (compute brings the MPS binaries)", caps)
	}
	if spec.ServiceAccountName != "gpud-dra" {
		t.Errorf("serviceAccountName = %s", spec.ServiceAccountName)
	}
	role := objs["rbac.yaml#ClusterRole/gpud-dra"].(*rbacv1.ClusterRole)
	allowed := map[string][]string{}
	for _, r := range role.Rules {
		for _, res := range r.Resources {
			allowed[res] = append(allowed[res], r.Verbs...)
		}
	}
	if len(allowed) != 4 || !slices.Equal(allowed["resourceclaims"], []string{"get"}) || !slices.Equal(allowed["nodes"], []string{"get", "patch"}) ||
		!slices.Equal(allowed["events"], []string{"create", "patch"}) {
		t.Errorf("ClusterRole grants %v, want resourceslices, get resourceclaims, get and patch (node labels) nodes, create and patch events (--kube-events) only", allowed)
	}
	for _, r := range role.Rules {
		if slices.Contains(r.Resources, "events") && !slices.Equal(r.APIGroups, []string{"events.k8s.io"}) {
			t.Errorf("events granted in %v, want events.k8s.io (the agent writes events.k8s.io/v1)", r.APIGroups)
		}
	}
	if _, ok := objs["rbac.yaml#ValidatingAdmissionPolicy/gpud-dra-resourceslices"]; !ok {
		t.Errorf("no admission policy limiting slices to the agent's node")
	}
	if _, ok := objs["rbac.yaml#ValidatingAdmissionPolicy/gpud-dra-node-labels"]; !ok {
		t.Errorf("no admission policy limiting node patches to the agent's node and GPU labels")
	}
}
