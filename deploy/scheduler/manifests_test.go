// Package scheduler holds the manifests of `gpud scheduler`; its test
// decodes them strictly into their API types (the PodGroup into
// pkg/scheduler/podgroup's) and checks what the scheduler relies on: the
// RBAC rules it uses, the Deployment's probes and lease, the examples'
// schedulerName, claims and classes, and the queue file. The Deployment's
// args are parsed by the real flag set in cmd/gpud's tests.
package scheduler

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpud/gpud/internal/manifest"
	"github.com/gpud/gpud/pkg/jobsim"
	"github.com/gpud/gpud/pkg/scheduler/learn"
	"github.com/gpud/gpud/pkg/scheduler/podgroup"
	"github.com/gpud/gpud/pkg/scheduler/podgroup/agwatch"
	"github.com/gpud/gpud/pkg/scheduler/queues"
)

// decodeSched decodes the documents of a file strictly: PodGroups into
// podgroup.PodGroup, everything else through internal/manifest. Keys are
// "<kind>/<name>".
func decodeSched(t *testing.T, path string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]any{}
	for i, doc := range bytes.Split(data, []byte("\n---")) {
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			t.Fatalf("%s doc %d: %v", path, i, err)
		}
		var tm metav1.TypeMeta
		if err := json.Unmarshal(js, &tm); err != nil {
			t.Fatalf("%s doc %d: %v", path, i, err)
		}
		if tm.Kind == "PodGroup" {
			var pg podgroup.PodGroup
			if err := manifest.DecodeInto(doc, &pg); err != nil {
				t.Fatalf("%s doc %d: PodGroup: %v", path, i, err)
			}
			if pg.Namespace == "" {
				pg.Namespace = metav1.NamespaceDefault // as kubectl apply sets it
			}
			if _, err := podgroup.ToGroup(&pg); err != nil {
				t.Fatalf("%s doc %d: %v", path, i, err)
			}
			out["PodGroup/"+pg.Name] = &pg
			continue
		}
		objs, err := manifest.Decode(doc)
		if err != nil {
			t.Fatalf("%s doc %d: %v", path, i, err)
		}
		for _, o := range objs {
			out[fmt.Sprintf("%s/%s", o.Object.GetObjectKind().GroupVersionKind().Kind, o.Object.(metav1.Object).GetName())] = o.Object
		}
	}
	return out
}

func TestSchedulerRBAC(t *testing.T) {
	objs := decodeSched(t, "rbac.yaml")
	role, ok := objs["ClusterRole/gpud-scheduler"].(*rbacv1.ClusterRole)
	if !ok {
		t.Fatalf("no ClusterRole gpud-scheduler in %v", objs)
	}
	got := map[string][]string{}
	for _, r := range role.Rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				got[g+"/"+res] = append(got[g+"/"+res], r.Verbs...)
			}
		}
	}
	read := []string{"get", "list", "watch"}
	want := map[string][]string{
		"/nodes": read, "/pods": append(read, "delete"), "/pods/binding": {"create"}, "/pods/eviction": {"create"}, "/pods/status": {"patch"},
		"resource.k8s.io/resourceslices": read, "resource.k8s.io/resourceclaims": append(read, "update", "create", "delete"), "resource.k8s.io/deviceclasses": read, "resource.k8s.io/devicetaintrules": read,
		"resource.k8s.io/resourceclaims/status": {"update"}, "resource.k8s.io/resourceclaims/binding": {"update"},
		"policy/poddisruptionbudgets":   read,
		"scheduling.x-k8s.io/podgroups": read, "scheduling.k8s.io/podgroups": read,
		// Queue objects (queue-crd.yaml, pkg/scheduler/queues): read live, the leader writes their status.
		"scheduling.gpud.io/queues": read, "scheduling.gpud.io/queues/status": {"patch"},
		"events.k8s.io/events": {"create", "patch"},
		// The telemetry stream's node identity: the agents' tokens.
		"authentication.k8s.io/tokenreviews": {"create"},
		// kube-scheduler's plugins in pkg/scheduler/rules (test/scheduler_rules_test.go grants the same).
		"/persistentvolumeclaims": append(read, "update"), "/persistentvolumes": append(read, "update"), "/namespaces": read, "/services": read,
		"/replicationcontrollers": read, "apps/replicasets": read, "apps/statefulsets": read,
		"storage.k8s.io/storageclasses": read, "storage.k8s.io/csinodes": read, "storage.k8s.io/csidrivers": read,
		"storage.k8s.io/csistoragecapacities": read, "storage.k8s.io/volumeattachments": read,
	}
	// --auto-gangs reads every workload API agwatch knows.
	for _, k := range agwatch.Kinds {
		want[k.Group+"/"+k.Resource] = read
	}
	for k, v := range want {
		if !slices.Equal(got[k], v) {
			t.Errorf("ClusterRole %s: %v, want %v", k, got[k], v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("ClusterRole grants %s %v, which the scheduler does not use", k, got[k])
		}
	}
	lease, ok := objs["Role/gpud-scheduler-leader-election"].(*rbacv1.Role)
	if !ok || lease.Namespace != "gpud" {
		t.Fatalf("no Role for the lease in namespace gpud")
	}
	for _, r := range lease.Rules {
		if !slices.Equal(r.APIGroups, []string{"coordination.k8s.io"}) || !slices.Equal(r.Resources, []string{"leases"}) {
			t.Errorf("lease Role rule %+v grants more than leases", r)
		}
	}
	// Learned runtimes and usage: the ConfigMaps --learn-runtimes-configmap
	// and --learn-usage-configmap name by default, nothing else.
	rt, ok := objs["Role/gpud-scheduler-runtimes"].(*rbacv1.Role)
	if !ok || rt.Namespace != "gpud" {
		t.Fatalf("no Role for the learned runtimes' ConfigMap in namespace gpud")
	}
	for _, r := range rt.Rules {
		if !slices.Equal(r.APIGroups, []string{""}) || !slices.Equal(r.Resources, []string{"configmaps"}) ||
			(!slices.Equal(r.Verbs, []string{"create"}) && !slices.Equal(r.ResourceNames, []string{learn.DefaultConfigMap, learn.DefaultUsageConfigMap})) {
			t.Errorf("runtimes Role rule %+v grants more than the ConfigMaps %s and %s", r, learn.DefaultConfigMap, learn.DefaultUsageConfigMap)
		}
	}
	for _, b := range []string{"ClusterRoleBinding/gpud-scheduler", "RoleBinding/gpud-scheduler-leader-election", "RoleBinding/gpud-scheduler-runtimes"} {
		if objs[b] == nil {
			t.Errorf("no %s", b)
		}
	}
}

func TestSchedulerDeployment(t *testing.T) {
	objs := decodeSched(t, "deployment.yaml")
	d, ok := objs["Deployment/gpud-scheduler"].(*appsv1.Deployment)
	if !ok {
		t.Fatalf("no Deployment gpud-scheduler in %v", objs)
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas = %v, want 2", d.Spec.Replicas)
	}
	// Only the leader is ready: a rolling update would never progress.
	if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("strategy %s, want Recreate (a follower never becomes ready)", d.Spec.Strategy.Type)
	}
	spec := d.Spec.Template.Spec
	if spec.ServiceAccountName != "gpud-scheduler" || d.Namespace != "gpud" {
		t.Errorf("service account %s in %s, want gpud-scheduler in gpud", spec.ServiceAccountName, d.Namespace)
	}
	c := spec.Containers[0]
	if len(c.Args) == 0 || c.Args[0] != "scheduler" || !slices.Contains(c.Args, "--leader-elect=true") {
		t.Errorf("args = %v, want the scheduler subcommand with leader election", c.Args)
	}
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" || c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("probes: liveness %+v readiness %+v", c.LivenessProbe, c.ReadinessProbe)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Errorf("no resource requests: %v", c.Resources.Requests)
	}
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "POD_NAMESPACE" && e.ValueFrom != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace"
	}) {
		t.Error("no POD_NAMESPACE from the downward API (the lease's namespace)")
	}
	// The image is the agent's.
	ds := decodeSched(t, "../dra/daemonset.yaml")["DaemonSet/gpud-dra"].(*appsv1.DaemonSet)
	if img := ds.Spec.Template.Spec.Containers[0].Image; c.Image != img {
		t.Errorf("image %s, want %s as deploy/dra", c.Image, img)
	}
	svc, ok := objs["Service/gpud-scheduler-metrics"].(*corev1.Service)
	if !ok || svc.Spec.Ports[0].TargetPort.String() != "metrics" {
		t.Errorf("no metrics Service on the metrics port: %+v", svc)
	}
	for k, v := range svc.Spec.Selector {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("Service selector %s=%s does not select the pods", k, v)
		}
	}
}

func TestSchedulerKustomization(t *testing.T) {
	data, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		APIVersion string   `yaml:"apiVersion"`
		Kind       string   `yaml:"kind"`
		Resources  []string `yaml:"resources"`
	}
	if err := yaml.UnmarshalWithOptions(data, &k, yaml.Strict()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"rbac.yaml", "deployment.yaml", "podgroup-crd.yaml", "queue-crd.yaml", "queue-admission.yaml"} {
		if !slices.Contains(k.Resources, want) {
			t.Errorf("kustomization lacks %s", want)
		}
	}
	for _, r := range k.Resources {
		if strings.Contains(r, "..") {
			t.Errorf("%s: kustomize refuses files outside the directory", r)
		}
		if _, err := os.Stat(r); err != nil {
			t.Errorf("kustomization: %v", err)
		}
	}
}

func TestSchedulerExamples(t *testing.T) {
	classes := map[string]bool{}
	for _, o := range decodeSched(t, "../dra/deviceclasses.yaml") {
		if c, ok := o.(*resourceapi.DeviceClass); ok {
			classes[c.Name] = true
		}
	}
	files, err := filepath.Glob("examples/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pods := 0
	for _, f := range files {
		if filepath.Base(f) == "queues.yaml" {
			continue
		}
		t.Run(filepath.Base(f), func(t *testing.T) {
			objs := decodeSched(t, f)
			templates := map[string]*resourceapi.ResourceClaimTemplate{}
			for _, o := range objs {
				if tm, ok := o.(*resourceapi.ResourceClaimTemplate); ok {
					templates[tm.Name] = tm
					for _, r := range tm.Spec.Spec.Devices.Requests {
						if r.Exactly == nil || !classes[r.Exactly.DeviceClassName] {
							t.Errorf("template %s request %s: class not shipped in deploy/dra", tm.Name, r.Name)
						}
					}
				}
			}
			for _, o := range objs {
				p, ok := o.(*corev1.Pod)
				if !ok {
					continue
				}
				pods++
				if p.Spec.SchedulerName != "gpud-scheduler" {
					t.Errorf("pod %s: schedulerName %q", p.Name, p.Spec.SchedulerName)
				}
				for _, rc := range p.Spec.ResourceClaims {
					if rc.ResourceClaimTemplateName == nil || templates[*rc.ResourceClaimTemplateName] == nil {
						t.Errorf("pod %s claim %s: no template in the file", p.Name, rc.Name)
					}
				}
				if g := p.Labels["scheduling.x-k8s.io/pod-group"]; g != "" && objs["PodGroup/"+g] == nil {
					t.Errorf("pod %s: PodGroup %s not in the file", p.Name, g)
				}
			}
		})
	}
	if pods < 6 {
		t.Errorf("%d example pods, want whole, fraction, MIG, 2 GPUs and a gang of 2", pods)
	}
	qs, _, err := jobsim.ReadQueueFile("examples/queues.yaml")
	if err != nil || len(qs) < 2 {
		t.Errorf("examples/queues.yaml: %d queues, %v", len(qs), err)
	}
}

// The Queue CRD names what pkg/scheduler/queues reads (group, version,
// plural, cluster scope, the status subresource), and queue-admission.yaml
// guards the namespace label with the verb bind, which only the admin
// role grants.
func TestQueueManifests(t *testing.T) {
	data, err := os.ReadFile("queue-crd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs := bytes.Split(data, []byte("\n---\n"))
	js, err := yaml.YAMLToJSON(docs[len(docs)-1])
	if err != nil {
		t.Fatal(err)
	}
	// The fields pkg/scheduler/queues relies on (the API server checks the
	// whole CRD in test/queues_test.go).
	var crd struct {
		Kind     string
		Metadata struct{ Name string }
		Spec     struct {
			Group string
			Scope string
			Names struct{ Kind, Plural string }
			// Versions' subresources.status is {} when served.
			Versions []struct {
				Name         string
				Subresources struct {
					Status *struct{} `json:"status"`
				}
			}
		}
	}
	if err := json.Unmarshal(js, &crd); err != nil {
		t.Fatal(err)
	}
	if crd.Kind != "CustomResourceDefinition" || crd.Metadata.Name != queues.Resource+"."+queues.GroupVersion.Group ||
		crd.Spec.Group != queues.GroupVersion.Group || crd.Spec.Names.Plural != queues.Resource || crd.Spec.Names.Kind != queues.Kind ||
		crd.Spec.Scope != "Cluster" || len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != queues.GroupVersion.Version ||
		crd.Spec.Versions[0].Subresources.Status == nil {
		t.Errorf("the Queue CRD %+v does not serve what pkg/scheduler/queues reads", crd)
	}
	adm := decodeSched(t, "queue-admission.yaml")
	vap, ok := adm["ValidatingAdmissionPolicy/gpud-queue-namespace-label"].(*admissionv1.ValidatingAdmissionPolicy)
	if !ok || adm["ValidatingAdmissionPolicyBinding/gpud-queue-namespace-label"] == nil {
		t.Fatal("no ValidatingAdmissionPolicy and binding gpud-queue-namespace-label")
	}
	if len(vap.Spec.Validations) != 1 || !strings.Contains(vap.Spec.Validations[0].Expression, "check('bind')") ||
		!strings.Contains(vap.Spec.Variables[0].Expression, queues.NamespaceLabel) {
		t.Errorf("the policy does not ask for bind on the queue of label %s: %+v", queues.NamespaceLabel, vap.Spec)
	}
	for name, wantBind := range map[string]bool{"gpud-queue-admin": true, "gpud-queue-reader": false} {
		role, ok := adm["ClusterRole/"+name].(*rbacv1.ClusterRole)
		if !ok {
			t.Fatalf("no ClusterRole %s", name)
		}
		bind := false
		for _, r := range role.Rules {
			bind = bind || slices.Contains(r.Verbs, "bind")
		}
		if bind != wantBind {
			t.Errorf("ClusterRole %s grants bind: %v, want %v", name, bind, wantBind)
		}
	}
}
