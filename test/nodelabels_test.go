package test

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/nodelabels"
	"github.com/gpud/gpud/pkg/nodelabels/labelsync"
	"github.com/gpud/gpud/pkg/simnode"
	"github.com/gpud/gpud/test/k8senv"
)

// TestNodeLabelsUnderDRARBAC: the agent's identity as deploy/dra/rbac.yaml
// makes it may keep GFD's labels on its own Node (add, change, remove), and
// nothing else: not another node's labels, not a label outside nvidia.com/
// and gpud.io/, not the Node's spec (taints).
func TestNodeLabelsUnderDRARBAC(t *testing.T) {
	t.Parallel() // only its own etcd, API server and processes: see TestMain
	env := k8senv.Start(t, k8senv.WithoutScheduler())
	env.CreateNode(t, "gpu-a", map[string]string{"team": "a"})
	env.CreateNode(t, "gpu-b", map[string]string{"team": "b"})
	client, err := kubernetes.NewForConfig(draAgentConfig(t, env, "gpu-a"))
	if err != nil {
		t.Fatal(err)
	}
	store, _ := simStore(t, "dgx-a100")
	updater := func(node string) *labelsync.Updater {
		u, err := labelsync.New(labelsync.Config{Client: client, NodeName: node, Inventory: store})
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	ctx := t.Context()
	want, err := updater("gpu-a").Sync(ctx)
	if err != nil {
		t.Fatalf("labels on the agent's own node: %v", err)
	}
	node, err := env.Client.CoreV1().Nodes().Get(ctx, "gpu-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for k, v := range want {
		if node.Labels[k] != v {
			t.Errorf("label %s=%q on the node, want %q", k, node.Labels[k], v)
		}
	}
	for _, k := range []string{nodelabels.Product, nodelabels.Count, nodelabels.Family, nodelabels.Memory} {
		b.WriteString(" " + k + "=" + node.Labels[k])
	}
	t.Logf("simulated dgx-a100 as gpud-dra:%s", b.String())
	if node.Labels["team"] != "a" {
		t.Errorf("team=%q, want a", node.Labels["team"])
	}

	// Removing its labels is allowed too.
	store.Set(gpu.Inventory{Node: store.Current().Node})
	if _, err := updater("gpu-a").Sync(ctx); err != nil {
		t.Fatalf("removing labels on the agent's own node: %v", err)
	}
	if node, _ = env.Client.CoreV1().Nodes().Get(ctx, "gpu-a", metav1.GetOptions{}); node.Labels[nodelabels.Present] != "" || node.Labels["team"] != "a" {
		t.Errorf("labels after the GPUs went: %v", node.Labels)
	}
	if _, err := store.Rediscover(); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name, node, patch, want string
	}{
		{"another node", "gpu-b", "", "may not change node 'gpu-b'"},
		{"a label outside nvidia.com/ and gpud.io/", "gpu-a", `{"metadata":{"labels":{"team":"b"}}}`, "only nvidia.com/ and gpud.io/ labels"},
		{"removing a foreign label", "gpu-a", `{"metadata":{"labels":{"team":null}}}`, "only nvidia.com/ and gpud.io/ labels"},
		{"a foreign annotation", "gpu-a", `{"metadata":{"annotations":{"example.com/x":"y"}}}`, "only gpud.io/ annotations"},
		{"a taint", "gpu-a", `{"spec":{"taints":[{"key":"x","effect":"NoSchedule"}]}}`, "only its Node's labels and annotations"},
		{"unschedulable", "gpu-a", `{"spec":{"unschedulable":true}}`, "only its Node's labels and annotations"},
	} {
		var err error
		if tc.patch == "" {
			_, err = updater(tc.node).Sync(ctx)
		} else {
			_, err = client.CoreV1().Nodes().Patch(ctx, tc.node, types.MergePatchType, []byte(tc.patch), metav1.PatchOptions{})
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want a denial with %q", tc.name, err, tc.want)
		}
	}
	if node, _ := env.Client.CoreV1().Nodes().Get(context.Background(), "gpu-b", metav1.GetOptions{}); node.Labels[nodelabels.Present] != "" {
		t.Errorf("gpu-b labelled by gpu-a's agent: %v", node.Labels)
	}
}

// simStore starts a simulated node of the built-in profile (closed with
// the test) and its inventory store, discovered once.
func simStore(t *testing.T, profile string) (*discovery.Store, gpu.Inventory) {
	t.Helper()
	n := simnode.NewBuiltin(profile)
	t.Cleanup(n.Close)
	store := discovery.NewStore(discovery.New(n, profile, nil), nil)
	inv, err := store.Rediscover()
	if err != nil {
		t.Fatal(err)
	}
	return store, inv
}
