package test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/test/k8senv"
)

// TestReleaseUpgrade follows the README's upgrade on a real
// kube-apiserver: release 0.1.0 installed as Helm installs it (crds/
// created first, with an older PodGroup schema that lacks
// scheduleTimeoutSeconds, then the chart's objects), a user's PodGroup
// created; then the upgrade to 0.2.0 (what make release sets: the chart's
// version and appVersion) as the README says: the new CRDs applied
// server-side with forced conflicts, then the new render. Nothing is lost
// (the PodGroup and its spec stay), the new schema is in force (the field
// the old one pruned is kept), and the agent and the scheduler run the
// new image.
func TestReleaseUpgrade(t *testing.T) {
	t.Parallel() // only its own etcd, API server and processes: see TestMain
	if testing.Short() {
		t.Skip("starts a kube-apiserver")
	}
	env := k8senv.Start(t, k8senv.WithoutScheduler())
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(env.Client.Discovery()))
	resource := func(u *unstructured.Unstructured) dynamic.ResourceInterface {
		t.Helper()
		gvk := u.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			mapper.Reset()
			if m, err = mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
				t.Fatalf("%s: %v", gvk, err)
			}
		}
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			return dyn.Resource(m.Resource).Namespace(u.GetNamespace())
		}
		return dyn.Resource(m.Resource)
	}
	apply := func(u *unstructured.Unstructured, manager string) {
		t.Helper()
		js, err := u.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		force := true
		if _, err := resource(u).Patch(t.Context(), u.GetName(), types.ApplyPatchType, js,
			metav1.PatchOptions{FieldManager: manager, Force: &force, FieldValidation: "Strict"}); err != nil {
			t.Fatalf("apply %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
	values := map[string]any{"mode": "dra", "scheduler": map[string]any{"enabled": true}}

	// Release 0.1.0, with the PodGroup CRD as an older release shipped it.
	oldCRD, newCRD := releaseCRD(t)
	versions, _, _ := unstructured.NestedSlice(oldCRD.Object, "spec", "versions")
	for _, v := range versions {
		unstructured.RemoveNestedField(v.(map[string]any), "schema", "openAPIV3Schema", "properties", "spec", "properties", "scheduleTimeoutSeconds")
	}
	if err := unstructured.SetNestedSlice(oldCRD.Object, versions, "spec", "versions"); err != nil {
		t.Fatal(err)
	}
	if _, err := resource(oldCRD).Create(t.Context(), oldCRD, metav1.CreateOptions{FieldManager: "helm"}); err != nil {
		t.Fatalf("install the old CRD as Helm installs crds/: %v", err)
	}
	waitCRDField(t, dyn, newCRD.GetName(), false)
	apply(&unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "gpud"}}}, "test")
	for _, u := range releaseRender(t, "0.1.0", values, 1) {
		apply(u, "helm")
	}
	checkImages(t, dyn, "ghcr.io/gpud/gpud:0.1.0")

	pgGVR := schema.GroupVersionResource{Group: "scheduling.x-k8s.io", Version: "v1alpha1", Resource: "podgroups"}
	pg := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
		"metadata": map[string]any{"name": "train", "namespace": "default"}, "spec": map[string]any{"minMember": int64(4), "scheduleTimeoutSeconds": int64(60)}}}
	if _, err := dyn.Resource(pgGVR).Namespace("default").Create(t.Context(), pg, metav1.CreateOptions{}); err != nil {
		t.Fatalf("PodGroup under the old CRD: %v", err)
	}
	got, err := dyn.Resource(pgGVR).Namespace("default").Get(t.Context(), "train", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(got.Object, "spec", "scheduleTimeoutSeconds"); found {
		t.Fatal("the old CRD kept scheduleTimeoutSeconds: the test's old schema is not older")
	}

	// The upgrade, as the README says.
	apply(newCRD, "kubectl")
	waitCRDField(t, dyn, newCRD.GetName(), true)
	for _, u := range releaseRender(t, "0.2.0", values, 2) {
		apply(u, "helm")
	}

	got, err = dyn.Resource(pgGVR).Namespace("default").Get(t.Context(), "train", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the PodGroup is gone after the upgrade: %v", err)
	}
	if m, _, _ := unstructured.NestedInt64(got.Object, "spec", "minMember"); m != 4 {
		t.Errorf("PodGroup minMember %d after the upgrade, want 4", m)
	}
	if err := unstructured.SetNestedField(got.Object, int64(60), "spec", "scheduleTimeoutSeconds"); err != nil {
		t.Fatal(err)
	}
	if got, err = dyn.Resource(pgGVR).Namespace("default").Update(t.Context(), got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if s, _, _ := unstructured.NestedInt64(got.Object, "spec", "scheduleTimeoutSeconds"); s != 60 {
		t.Errorf("scheduleTimeoutSeconds %d after the upgrade, want 60 (the new CRD's schema)", s)
	}
	checkImages(t, dyn, "ghcr.io/gpud/gpud:0.2.0")
}

// releaseCRD returns the chart's PodGroup CRD twice (to change one).
func releaseCRD(t *testing.T) (*unstructured.Unstructured, *unstructured.Unstructured) {
	t.Helper()
	ch, err := loader.Load(helmChartDir)
	if err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	for _, crd := range ch.CRDObjects() {
		for _, doc := range bytes.Split(crd.File.Data, []byte("\n---")) {
			if len(bytes.TrimSpace(stripComments(doc))) == 0 {
				continue
			}
			u := yamlObject(t, doc)
			if u.GetKind() == "CustomResourceDefinition" && u.GetName() == "podgroups.scheduling.x-k8s.io" {
				out = append(out, u)
			}
		}
	}
	if len(out) != 1 {
		t.Fatalf("%d PodGroup CRDs in the chart's crds/, want 1", len(out))
	}
	return out[0], out[0].DeepCopy()
}

// releaseRender renders the chart as release version renders it (version
// and appVersion set, as make release does) for revision rev.
func releaseRender(t *testing.T, version string, values map[string]any, rev int) []*unstructured.Unstructured {
	t.Helper()
	ch, err := loader.Load(helmChartDir)
	if err != nil {
		t.Fatal(err)
	}
	ch.Metadata.Version, ch.Metadata.AppVersion = version, version
	caps := common.DefaultCapabilities.Copy()
	caps.KubeVersion = helmKubeVersion
	vals, err := chartutil.ToRenderValuesWithSchemaValidation(ch, values,
		common.ReleaseOptions{Name: "gpud", Namespace: "gpud", Revision: rev, IsInstall: rev == 1, IsUpgrade: rev > 1}, caps, false)
	if err != nil {
		t.Fatal(err)
	}
	files, err := engine.Render(ch, vals)
	if err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		for _, doc := range bytes.Split([]byte(files[name]), []byte("\n---")) {
			if len(bytes.TrimSpace(stripComments(doc))) > 0 {
				out = append(out, yamlObject(t, doc))
			}
		}
	}
	if len(out) < 5 {
		t.Fatalf("rendered %d objects, want the chart's", len(out))
	}
	return out
}

func yamlObject(t *testing.T, doc []byte) *unstructured.Unstructured {
	t.Helper()
	js, err := yaml.YAMLToJSON(doc)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(js); err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	return u
}

// waitCRDField waits until the PodGroup CRD's schema has (or lacks)
// spec.scheduleTimeoutSeconds and the CRD is Established.
func waitCRDField(t *testing.T, dyn dynamic.Interface, name string, want bool) {
	t.Helper()
	testwait.For(t, 30*time.Second, fmt.Sprintf("CRD %s established, scheduleTimeoutSeconds in its schema: %v", name, want), func() bool {
		crd, err := dyn.Resource(crdGVR).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
		has := false
		for _, v := range versions {
			_, found, _ := unstructured.NestedFieldNoCopy(v.(map[string]any), "schema", "openAPIV3Schema", "properties", "spec", "properties", "scheduleTimeoutSeconds")
			has = has || found
		}
		conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
		established := false
		for _, c := range conds {
			m := c.(map[string]any)
			established = established || (m["type"] == "Established" && m["status"] == "True")
		}
		return has == want && established
	})
}

// checkImages checks that every DaemonSet and Deployment in namespace
// gpud runs gpud at image.
func checkImages(t *testing.T, dyn dynamic.Interface, image string) {
	t.Helper()
	n := 0
	for _, res := range []string{"daemonsets", "deployments"} {
		l, err := dyn.Resource(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: res}).Namespace("gpud").List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range l.Items {
			cs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
			js, _ := json.Marshal(cs)
			for _, c := range cs {
				img, _ := c.(map[string]any)["image"].(string)
				if strings.Contains(img, "gpud/gpud") {
					n++
					if img != image {
						t.Errorf("%s %s runs %s, want %s (%s)", res, u.GetName(), img, image, js)
					}
				}
			}
		}
	}
	if n < 2 {
		t.Errorf("%d gpud containers in DaemonSets and Deployments, want the agent's and the scheduler's", n)
	}
}
