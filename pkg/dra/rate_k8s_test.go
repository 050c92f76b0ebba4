package dra

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/test/k8senv"
)

// TestPrepareManyClaimsAPIRate times one NodePrepareResources of 32
// claims (4 memory fractions on each of the 8 GPUs) through the kubelet
// plugin helper on a real kube-apiserver, which reads each claim from the
// API, with the driver's client at client-go's default rate (5/s, burst
// 10) and at the agent's defaults (--kube-api-qps 50, --kube-api-burst
// 100). The figure is logged; the test fails only when the faster rate is
// not faster. Skipped without the Kubernetes binaries, and in -short.
func TestPrepareManyClaimsAPIRate(t *testing.T) {
	if testing.Short() {
		t.Skip("times API round trips at client-go's default rate")
	}
	env := k8senv.Start(t)
	const node, claims = "dgx-h100", 32
	env.CreateNode(t, node, nil)
	ctx := t.Context()
	var reqs []*drapb.Claim
	for i := range claims {
		name := fmt.Sprintf("frac-%d", i)
		rc := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu",
				Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: DriverName}}}}}}
		created, err := env.Client.ResourceV1().ResourceClaims("default").Create(ctx, rc, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("claim %s: %v", name, err)
		}
		share := types.UID(uuid.NewUUID())
		created.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
			Request: "gpu", Driver: DriverName, Pool: node, Device: GPUDeviceName(i % 8), ShareID: &share,
			ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{CapacityMemory: resource.MustParse("10Gi")}}}}}
		if _, err := env.Client.ResourceV1().ResourceClaims("default").UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("allocate claim %s: %v", name, err)
		}
		reqs = append(reqs, &drapb.Claim{Namespace: "default", Name: name, Uid: string(created.UID)})
	}
	run := func(qps float32, burst int) time.Duration {
		cfg := rest.CopyConfig(env.Config)
		cfg.QPS, cfg.Burst = qps, burst
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		took := prepareVia(ctx, t, client, node, reqs)
		t.Logf("NodePrepareResources of %d claims with the client at %v/s, burst %d: %v", claims, qps, burst, took)
		return took
	}
	slow, fast := run(5, 10), run(50, 100)
	if fast >= slow {
		t.Errorf("%d claims took %v at 50/s and %v at 5/s: the higher rate is not faster", claims, fast, slow)
	}
}

// prepareVia starts a driver on a fresh simulated node with client, waits
// until it serves, prepares reqs in one call and returns how long that
// call took.
func prepareVia(ctx context.Context, t *testing.T, client kubernetes.Interface, node string, reqs []*drapb.Claim) time.Duration {
	t.Helper()
	n, st, _ := buildSim(t, node)
	store := discovery.NewStore(discovery.New(n, node, nil), nil)
	if _, err := store.Rediscover(); err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	pluginDir, registryDir := filepath.Join(base, "p"), filepath.Join(base, "r")
	if err := os.MkdirAll(registryDir, 0o755); err != nil {
		t.Fatal(err)
	}
	drv, err := New(Options{NodeName: node, KubeClient: client, PluginDir: pluginDir, RegistryDir: registryDir, CDIDir: filepath.Join(base, "cdi"),
		Inventory: store, NodeState: func(inv gpu.Inventory) NodeState { s := st; s.Inventory = inv; return s }, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- drv.Run(runCtx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	select {
	case <-drv.Ready():
	case <-time.After(waitTimeout):
		t.Fatal("driver not ready")
	}
	time.Sleep(2 * time.Second) // the rate limiter's bucket refills after the slices' publishing
	dra := drapb.NewDRAPluginClient(dial(t, filepath.Join(pluginDir, "dra.sock")))
	start := time.Now()
	resp, err := dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: reqs})
	took := time.Since(start)
	if err != nil {
		t.Fatalf("NodePrepareResources: %v", err)
	}
	for _, c := range reqs {
		if r := resp.Claims[c.Uid]; r == nil || r.Error != "" || len(r.Devices) != 1 {
			t.Errorf("claim %s: %+v", c.Name, r)
		}
	}
	return took
}
