package schedbench

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/gpud/gpud/test/k8senv"
)

var flagFootprint = flag.Int("footprint", 0, "TestFootprint: bound pods, each with an allocated one-GPU claim, to write and measure (0 skips; docs/scale.md's figures)")

// TestFootprint measures what one cluster's control plane pays per GPU pod
// as gpud runs it: etcd bytes and keys and kube-apiserver memory per bound
// pod with its allocated claim, and the write rate one client reaches. It
// prints a table; it asserts only that every object was written.
func TestFootprint(t *testing.T) {
	n := *flagFootprint
	if n <= 0 {
		t.Skip("set -footprint N")
	}
	env := k8senv.Start(t, k8senv.WithoutScheduler())
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = 2000, 4000
	client := kubernetes.NewForConfigOrDie(cfg)
	ctx := t.Context()
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fp"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	before := footprint(t, ctx, env, client)
	var writes atomic.Int64
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for i := range n {
		g.Go(func() error { return writePod(gctx, client, i, &writes) })
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	time.Sleep(5 * time.Second) // let etcd's and the apiserver's gauges catch up
	after := footprint(t, ctx, env, client)
	per := func(a, b float64) string { return strconv.FormatFloat((b-a)/float64(n), 'f', 0, 64) }
	t.Logf("footprint of %d bound pods with an allocated 1-GPU claim each (%d API writes in %s, %.0f writes/s from 32 workers):\n"+
		"etcd db in use: %.1f MiB -> %.1f MiB (%s bytes per pod+claim)\netcd keys: %.0f -> %.0f\n"+
		"kube-apiserver RSS: %.0f MiB -> %.0f MiB (%s bytes per pod+claim)",
		n, writes.Load(), took.Round(time.Millisecond), float64(writes.Load())/took.Seconds(),
		before.etcdBytes/(1<<20), after.etcdBytes/(1<<20), per(before.etcdBytes, after.etcdBytes),
		before.etcdKeys, after.etcdKeys,
		before.apiRSS/(1<<20), after.apiRSS/(1<<20), per(before.apiRSS, after.apiRSS))
}

// writePod writes claim i with an allocation and reservedFor (as gpud
// scheduler leaves it) and its pod bound to one of 1,000 node names.
func writePod(ctx context.Context, c kubernetes.Interface, i int, writes *atomic.Int64) error {
	name := fmt.Sprintf("p-%06d", i)
	node := fmt.Sprintf("node-%04d", i%1000)
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "fp"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.gpud.io", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}}}}}}
	cl, err := c.ResourceV1().ResourceClaims("fp").Create(ctx, claim, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("claim %s: %w", name, err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "fp", Labels: map[string]string{"app": "train"}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "registry.example.com/train:1",
			Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(name)}}}}
	p, err := c.CoreV1().Pods("fp").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("pod %s: %w", name, err)
	}
	cl.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
		Request: "gpu", Driver: "gpu.gpud.io", Pool: node, Device: fmt.Sprintf("gpu-%d", i%8)}}}}
	cl.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: name, UID: p.UID}}
	if _, err := c.ResourceV1().ResourceClaims("fp").UpdateStatus(ctx, cl, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("claim %s status: %w", name, err)
	}
	writes.Add(3)
	return nil
}

type controlPlane struct{ etcdBytes, etcdKeys, apiRSS float64 }

func footprint(t *testing.T, ctx context.Context, env *k8senv.Env, c kubernetes.Interface) controlPlane {
	t.Helper()
	var out controlPlane
	etcd, err := httpGet(ctx, env.EtcdURL+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	out.etcdBytes = metric(etcd, "etcd_mvcc_db_total_size_in_use_in_bytes")
	out.etcdKeys = metric(etcd, "etcd_debugging_mvcc_keys_total")
	api, err := c.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out.apiRSS = metric(string(api), "process_resident_memory_bytes")
	return out
}

// metric is the value of the first unlabelled sample of name in a
// Prometheus text exposition, 0 if absent.
func metric(text, name string) float64 {
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 1<<16), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			v, _ := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v
		}
	}
	return 0
}

func httpGet(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("get %s: %w", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return "", fmt.Errorf("get %s: %w", url, err)
	}
	return string(b), nil
}
