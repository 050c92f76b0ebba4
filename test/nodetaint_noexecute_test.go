package test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/nodetaint"
	"github.com/gpud/gpud/test/k8senv"
)

// TestNodeTaintNoExecuteUnderDRARBAC: the node taint's NoExecute step
// (--node-taint-noexecute-after) under deploy/dra/rbac.yaml's identity and
// admission policy. A GPU that fails again taints the Node NoSchedule; a
// minute later, still failing, the agent adds the NoExecute taint of the
// same key and value (the policy allows it beside the NoSchedule one, not
// with another value), and both go once the GPUs stay healthy.
func TestNodeTaintNoExecuteUnderDRARBAC(t *testing.T) {
	t.Parallel() // only its own etcd, API server and processes: see TestMain
	env := k8senv.Start(t, k8senv.WithoutScheduler())
	env.CreateNode(t, "gpu-a", nil)
	ctx := t.Context()
	client, err := kubernetes.NewForConfig(draAgentConfig(t, env, "gpu-a"))
	if err != nil {
		t.Fatal(err)
	}
	store, inv := simStore(t, "dgx-a100")
	now := time.Now()
	s, err := nodetaint.NewSyncer(nodetaint.SyncerConfig{Client: client, NodeName: "gpu-a", Inventory: store, Now: func() time.Time { return now },
		Tracker: nodetaint.Config{MaxGPUs: 3, ClearAfter: time.Minute, NoExecuteAfter: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	ours := func() map[corev1.TaintEffect]string {
		t.Helper()
		nd, err := env.Client.CoreV1().Nodes().Get(ctx, "gpu-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[corev1.TaintEffect]string{}
		for _, tn := range nd.Spec.Taints {
			if tn.Key == nodetaint.TaintKey {
				out[tn.Effect] = tn.Value
			}
		}
		return out
	}
	bad := inv.GPUs[2].UUID
	step := func(after time.Duration, h gpu.Health) {
		t.Helper()
		now = now.Add(after)
		store.SetHealth(bad, h, "Xid 79")
		if _, err := s.Sync(ctx); err != nil {
			t.Fatalf("sync as the agent: %v", err)
		}
	}
	step(0, gpu.Unhealthy)
	step(time.Minute, gpu.Healthy)
	step(time.Minute, gpu.Unhealthy)
	if got := ours(); len(got) != 1 || got[corev1.TaintEffectNoSchedule] != nodetaint.ValueRepeated {
		t.Fatalf("taints %v after the GPU failed again, want NoSchedule alone", got)
	}
	step(59*time.Second, gpu.Unhealthy)
	if got := ours(); len(got) != 1 {
		t.Fatalf("taints %v before --node-taint-noexecute-after, want NoSchedule alone", got)
	}
	step(time.Second, gpu.Unhealthy)
	if got := ours(); len(got) != 2 || got[corev1.TaintEffectNoExecute] != nodetaint.ValueRepeated {
		t.Fatalf("taints %v a minute tainted and still failing, want NoSchedule and NoExecute %s", got, nodetaint.ValueRepeated)
	}
	// The policy lets the NoExecute taint carry only the NoSchedule one's
	// value.
	nd, err := env.Client.CoreV1().Nodes().Get(ctx, "gpu-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, tn := range nd.Spec.Taints {
		if tn.Key == nodetaint.TaintKey && tn.Effect == corev1.TaintEffectNoExecute {
			patch := fmt.Sprintf(`[{"op":"replace","path":"/spec/taints/%d/value","value":"other"}]`, i)
			_, err := client.CoreV1().Nodes().Patch(ctx, "gpu-a", types.JSONPatchType, []byte(patch), metav1.PatchOptions{})
			if err == nil || !strings.Contains(err.Error(), "only its Node's labels and annotations") {
				t.Errorf("a NoExecute taint of another value as the agent: err %v, want a denial", err)
			}
		}
	}
	step(time.Second, gpu.Healthy)
	step(time.Minute, gpu.Healthy)
	if got := ours(); len(got) != 0 {
		t.Fatalf("taints %v after a minute healthy, want both removed", got)
	}
}
