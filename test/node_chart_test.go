package test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/goccy/go-yaml"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/test/k8senv"
	"github.com/gpud/gpud/test/nodeenv"
)

// The shipped DRA DaemonSet (deploy/dra) and the Helm chart
// (deploy/helm/gpud) installed on a real node as the READMEs say, with
// make image's image, and then doing their job.
//
// The DRA agent talks to the API server from its pod, as in a cluster:
// with the ServiceAccount token the kubelet mounts (k8senv.WithPodAPIAccess
// turns on ServiceAccount admission; kube-controller-manager creates the
// kube-root-ca.crt ConfigMaps). The environment has no kube-proxy, so the
// "kubernetes" Service's ClusterIP leads nowhere; the agent container gets
// KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT as on clusters that
// run without kube-proxy (Cilium's kube-proxy replacement documents the
// same patch), which is the only change to deploy/dra besides the
// runtimeClassName line the README says to delete on a simulated node.

// TestNodeShippedDRADaemonSet installs deploy/dra as deploy/dra/README.md
// says (deploy/daemonset's namespace and ConfigMap, then rbac.yaml,
// deviceclasses.yaml and daemonset.yaml; the ConfigMap told to simulate a
// DGX H100) on a real node with kube-scheduler and kube-controller-manager.
// The agent pod must become Ready under its own ServiceAccount, with the
// shipped RBAC and admission policies in force, publish its node's
// ResourceSlices (8 GPUs), and the examples' whole-GPU and 20Gi-fraction
// pods, placed by kube-scheduler, run with exactly one GPU each.
func TestNodeShippedDRADaemonSet(t *testing.T) {
	nodeenv.Require(t)
	k := k8senv.Start(t, k8senv.WithPodAPIAccess(net.ParseIP(nodeenv.PodGateway)))
	n := nodeenv.Start(t, k, nodeenv.WithControllerManager())
	importImage(t, n, shippedImage)
	labelGPUNode(t, n)

	var docs []any
	for _, f := range []string{"../deploy/daemonset/namespace.yaml", "../deploy/daemonset/configmap.yaml",
		"../deploy/dra/rbac.yaml", "../deploy/dra/deviceclasses.yaml", "../deploy/dra/daemonset.yaml"} {
		for _, obj := range draManifests(t, f) {
			switch o := obj.(type) {
			case *corev1.ConfigMap:
				o.Data["config.yaml"] += simulatedConfig
			case *appsv1.DaemonSet:
				o.Spec.Template.Spec.RuntimeClassName = nil
				c := &o.Spec.Template.Spec.Containers[0]
				c.Env = append(c.Env,
					corev1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", Value: nodeenv.PodGateway},
					corev1.EnvVar{Name: "KUBERNETES_SERVICE_PORT", Value: k.APIServerPort()})
			}
			docs = append(docs, obj)
		}
	}
	applyObjects(t, k, docs...)

	waitAgentPodReady(t, n, "gpud", "app.kubernetes.io/name=gpud-dra", 3*time.Minute)
	waitGPUs(t, k, draTimeout, 8, n.Name)
	for _, tc := range []struct{ example, name string }{{"whole-gpu", "whole"}, {"fraction-20gi", "fraction"}} {
		t.Run(tc.example, func(t *testing.T) {
			r := runDRAExample(t, n, tc.example, tc.name)
			if got := openableGPUs(r); len(got) != 1 {
				t.Errorf("pod %s (%s) can open %v (all: %v), want exactly one GPU", tc.name, tc.example, got, r.Opens)
			}
		})
	}
}

// TestNodeHelmChart installs the Helm chart on a real node as the
// README's install section says, in both modes: make image's image under
// the name the user gave it (image.repository, image.tag),
// agent.runtimeClassName="" for a node without the NVIDIA runtime, and
// the simulated DGX H100 through agent.extraArgs. What `helm install`
// sends is what is applied: the chart's crds/, then everything it renders
// (Helm's SDK renders it, as helm_test.go does), by server-side apply, as
// Helm 4 applies.
//
//   - device-plugin (the chart's default): the agent pod becomes Ready,
//     the node advertises 8 nvidia.com/gpu, and a pod asking for one runs
//     with exactly one GPU.
//   - the README's command (mode=dra, scheduler.enabled=true, namespace
//     gpud-system), with agent.extraEnv and scheduler.extraEnv pointing
//     the pods at the API server (no kube-proxy): the agent publishes 8
//     GPUs under the chart's RBAC and admission policies, a gpud scheduler
//     replica leads, and the examples' whole-GPU and 20Gi-fraction pods,
//     given to gpud-scheduler, run with one GPU each.
func TestNodeHelmChart(t *testing.T) {
	nodeenv.Require(t)
	t.Run("device-plugin", func(t *testing.T) {
		k := k8senv.Start(t, k8senv.WithPodAPIAccess(net.ParseIP(nodeenv.PodGateway)))
		n := nodeenv.Start(t, k, nodeenv.WithControllerManager())
		installChart(t, n, "gpud", map[string]any{
			"agent": map[string]any{
				"runtimeClassName": "",
				"extraArgs":        []any{"--simulate=dgx-h100", "--sim-dev-root=/run/gpud/dev"},
			},
		})
		waitAgentPodReady(t, n, "gpud", "app.kubernetes.io/component=agent", 3*time.Minute)
		waitAllocatable(t, n, map[corev1.ResourceName]int64{gpuResource: 8}, 2*time.Minute)
		r := runProbePod(t, n, "one-gpu", gpus(1))
		if got := openableGPUs(r); len(got) != 1 {
			t.Errorf("a pod with %s: 1 can open %v (all: %v), want exactly one GPU", gpuResource, got, r.Opens)
		}
	})
	t.Run("dra with the scheduler", func(t *testing.T) {
		k := k8senv.Start(t, k8senv.WithPodAPIAccess(net.ParseIP(nodeenv.PodGateway)))
		n := nodeenv.Start(t, k, nodeenv.WithControllerManager())
		apiServer := []any{
			map[string]any{"name": "KUBERNETES_SERVICE_HOST", "value": nodeenv.PodGateway},
			map[string]any{"name": "KUBERNETES_SERVICE_PORT", "value": k.APIServerPort()},
		}
		const ns = "gpud-system"
		installChart(t, n, ns, map[string]any{
			"mode": "dra",
			"agent": map[string]any{
				"runtimeClassName": "",
				"extraArgs":        []any{"--simulate=dgx-h100", "--sim-dev-root=/run/gpud/dev"},
				"extraEnv":         apiServer,
			},
			"scheduler": map[string]any{"enabled": true, "extraEnv": apiServer},
		})
		waitAgentPodReady(t, n, ns, "app.kubernetes.io/component=agent", 3*time.Minute)
		waitGPUs(t, k, draTimeout, 8, n.Name)
		// Only the leader is Ready.
		testwait.ForErr(t, 3*time.Minute, "a Ready gpud scheduler replica", func() error {
			pods, err := k.Client.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=scheduler"})
			if err != nil {
				return err
			}
			var states []string
			for _, p := range pods.Items {
				for _, c := range p.Status.Conditions {
					if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
						return nil
					}
				}
				states = append(states, p.Name+": "+string(p.Status.Phase))
			}
			return fmt.Errorf("scheduler pods %v", states)
		})
		toGpudScheduler := func(p *corev1.Pod) { p.Spec.SchedulerName = "gpud-scheduler" }
		for _, tc := range []struct{ example, name string }{{"whole-gpu", "whole"}, {"fraction-20gi", "fraction"}} {
			t.Run(tc.example, func(t *testing.T) {
				r := runDRAExample(t, n, tc.example, tc.name, toGpudScheduler)
				if got := openableGPUs(r); len(got) != 1 {
					t.Errorf("pod %s (%s) can open %v (all: %v), want exactly one GPU", tc.name, tc.example, got, r.Opens)
				}
			})
		}
	})
}

// installChart does what `helm install gpud deploy/helm/gpud -n namespace
// --create-namespace --set image.repository=ghcr.io/you/gpud --set
// image.tag=0.1.0` with values does, make image's image tagged so and
// imported into n, n labelled as a GPU node: the chart's crds/, the
// namespace, then what the chart renders, applied server-side.
func installChart(t *testing.T, n *nodeenv.Node, namespace string, values map[string]any) {
	t.Helper()
	importImage(t, n, "ghcr.io/you/gpud:0.1.0")
	labelGPUNode(t, n)
	ch, err := loader.Load(helmChartDir)
	if err != nil {
		t.Fatal(err)
	}
	var docs []any
	for _, crd := range ch.CRDObjects() {
		docs = append(docs, stripDocs(crd.File.Data)...)
	}
	docs = append(docs, []byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: "+namespace+"}\n"))
	values["image"] = map[string]any{"repository": "ghcr.io/you/gpud", "tag": "0.1.0"}
	files, err := helmTemplateIn(t, namespace, values, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		docs = append(docs, stripDocs([]byte(files[name]))...)
	}
	applyObjects(t, n.K8s, docs...)
}

// stripDocs splits a YAML stream into its documents, leaving out those
// with nothing but comments.
func stripDocs(data []byte) []any {
	var out []any
	for _, doc := range bytes.Split(data, []byte("\n---")) {
		if len(bytes.TrimSpace(stripComments(doc))) != 0 {
			out = append(out, doc)
		}
	}
	return out
}

// applyObjects applies each object (a YAML document as []byte, or a typed
// API object) to k's API server in order, by server-side apply with strict
// field validation, as `kubectl apply --server-side` and Helm 4 do. A
// kind whose CRD was applied just before is found once discovery shows it.
func applyObjects(t *testing.T, k *k8senv.Env, objs ...any) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(k.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(k.Client.Discovery()))
	for i, obj := range objs {
		var js []byte
		if doc, ok := obj.([]byte); ok {
			js, err = yaml.YAMLToJSON(doc)
		} else {
			js, err = json.Marshal(obj)
		}
		if err != nil {
			t.Fatalf("object %d: %v", i, err)
		}
		var u unstructured.Unstructured
		if err := u.UnmarshalJSON(js); err != nil {
			t.Fatalf("object %d: %v", i, err)
		}
		gvk := u.GroupVersionKind()
		var m *meta.RESTMapping
		testwait.ForErr(t, 30*time.Second, fmt.Sprintf("the API server to serve %s", gvk), func() error {
			if m, err = mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
				mapper.Reset()
			}
			return err
		})
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			ri = dyn.Resource(m.Resource).Namespace(u.GetNamespace())
		}
		opts := metav1.PatchOptions{FieldManager: "gpud-node-test", Force: ptrTo(true), FieldValidation: "Strict"}
		if _, err := ri.Patch(t.Context(), u.GetName(), types.ApplyPatchType, js, opts); err != nil {
			t.Fatalf("apply %s %s/%s: %v", gvk.Kind, u.GetNamespace(), u.GetName(), err)
		}
	}
}
