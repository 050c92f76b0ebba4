package view

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpud/gpud/pkg/dra"
	"github.com/gpud/gpud/test/k8senv"
)

// fakeMIG is a dra.MIGManager that creates MIG devices in memory.
type fakeMIG struct {
	mu      sync.Mutex
	created []string
}

func (f *fakeMIG) Create(_ context.Context, parent, profile string, start int) (dra.CreatedMIG, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.created = append(f.created, fmt.Sprintf("%s %s@%d", parent, profile, start))
	return dra.CreatedMIG{UUID: fmt.Sprintf("MIG-%s-%s-%d", parent, profile, start), GIID: 1 + start}, nil
}

// Lookup finds a device Create made (prepare checks it still exists).
func (f *fakeMIG) Lookup(_ context.Context, parent, profile string, start int) (dra.MIGLookup, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	want := fmt.Sprintf("%s %s@%d", parent, profile, start)
	for _, c := range f.created {
		if c == want {
			return dra.MIGLookup{Device: dra.CreatedMIG{UUID: fmt.Sprintf("MIG-%s-%s-%d", parent, profile, start), GIID: 1 + start}, ModeOn: true}, nil
		}
	}
	return dra.MIGLookup{ModeOn: len(f.created) > 0}, nil
}

func (f *fakeMIG) Destroy(context.Context, string, string, bool) (bool, error) { return false, nil }

// inputs lists what the scheduler's informers would hold.
func inputs(t *testing.T, c kubernetes.Interface) Inputs {
	t.Helper()
	ctx := t.Context()
	var in Inputs
	sl, err := c.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range sl.Items {
		in.Slices = append(in.Slices, &sl.Items[i])
	}
	cl, err := c.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range cl.Items {
		in.Claims = append(in.Claims, &cl.Items[i])
	}
	dc, err := c.ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range dc.Items {
		in.Classes = append(in.Classes, &dc.Items[i])
	}
	nl, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range nl.Items {
		in.Nodes = append(in.Nodes, &nl.Items[i])
	}
	return in
}

// TestAllocationsOnRealKubernetes publishes gpud's slices of a dgx-h100
// and a dgx-a100 (MIG on for two GPUs) to a real kube-apiserver (no
// kube-scheduler), creates pods with claims of every kind, places them
// with the view, writes each claim's status with its resourceVersion and
// checks that the API server keeps the allocation as written, that the
// re-read cluster is not over-allocated, that a stale write conflicts, and
// that pkg/dra's Preparer prepares every claim on its node.
func TestAllocationsOnRealKubernetes(t *testing.T) {
	env := k8senv.Start(t, k8senv.WithoutScheduler())
	c := env.Client
	ctx := t.Context()
	local := newCluster(t)
	for _, dc := range local.in.Classes {
		if _, err := c.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil {
			t.Fatalf("DeviceClass %s: %v", dc.Name, err)
		}
	}
	for _, n := range local.in.Nodes {
		env.CreateNode(t, n.Name, nil)
	}
	for _, s := range local.in.Slices {
		if _, err := c.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("slice %s: %v", s.Name, err)
		}
	}
	domain := resourceapi.FullyQualifiedName("gpu.gpud.io/nvlinkDomain")
	nvl := claim("nvlink", exact("gpus", "gpu.gpud.io", 2))
	nvl.Spec.Devices.Constraints = []resourceapi.DeviceConstraint{{Requests: []string{"gpus"}, MatchAttribute: &domain}}
	claims := []*resourceapi.ResourceClaim{
		claim("whole", exact("gpu", "gpu.gpud.io", 1)),
		nvl,
		claim("frac-a", fraction("gpu", "20Gi", "")),
		claim("frac-b", fraction("gpu", "20Gi", "30")),
		claim("mig-h100", migReq("mig", "1g.10gb")),
		claim("mig-a100", migReq("mig", "3g.20gb")),
		claim("a100", exact("gpu", "gpu.gpud.io", 1, `device.attributes["gpu.gpud.io"].productName.contains("A100")`)),
		claim("two-requests", exact("a", "gpu.gpud.io", 1), fraction("b", "10Gi", "")),
	}
	now := time.Now()
	written := map[string]*resourceapi.ResourceClaim{}
	for _, cl := range claims {
		cl.UID = ""
		created, err := c.ResourceV1().ResourceClaims("default").Create(ctx, cl, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("claim %s: %v", cl.Name, err)
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod-" + cl.Name, Namespace: "default"}, Spec: corev1.PodSpec{
			SchedulerName:  "gpud-scheduler",
			ResourceClaims: []corev1.PodResourceClaim{{Name: "c", ResourceClaimName: &created.Name}},
			Containers: []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
				Claims: []corev1.ResourceClaim{{Name: "c"}}, Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
			}}},
		}}
		pod, err = c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// As the loop will: a fresh view from the informers, decide, write.
		v, skips := Build(inputs(t, c))
		if len(skips) > 0 {
			t.Fatalf("skips: %v", skips)
		}
		items, _, err := v.Demand([]*resourceapi.ResourceClaim{created})
		if err != nil {
			t.Fatalf("Demand %s: %v", cl.Name, err)
		}
		allocs, err := v.Place(items, Options{})
		if err != nil || len(allocs) != 1 {
			t.Fatalf("Place %s: %v", cl.Name, err)
		}
		st, err := allocs[0].Status(pod, now)
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.ResourceV1().ResourceClaims("default").UpdateStatus(ctx, st, metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("UpdateStatus %s: %v", cl.Name, err)
		}
		if !equality.Semantic.DeepEqual(got.Status.Allocation.Devices, st.Status.Allocation.Devices) ||
			!equality.Semantic.DeepEqual(got.Status.Allocation.NodeSelector, st.Status.Allocation.NodeSelector) ||
			!equality.Semantic.DeepEqual(got.Status.ReservedFor, st.Status.ReservedFor) {
			t.Errorf("claim %s: the API server changed the allocation:\nwrote %+v\ngot   %+v", cl.Name, st.Status, got.Status)
		}
		for _, r := range got.Status.Allocation.Devices.Results {
			mem := r.ConsumedCapacity["memory"]
			t.Logf("claim %s -> %s/%s share %v memory %s", cl.Name, r.Pool, r.Device, r.ShareID != nil, mem.String())
		}
		// A write from an older read conflicts.
		if _, err := c.ResourceV1().ResourceClaims("default").UpdateStatus(ctx, st, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
			t.Errorf("claim %s: stale UpdateStatus = %v, want a conflict", cl.Name, err)
		}
		written[cl.Name] = got
	}
	v, skips := Build(inputs(t, c))
	if len(skips) > 0 {
		t.Fatalf("skips: %v", skips)
	}
	if err := Check(v); err != nil {
		t.Fatalf("the written allocations: %v", err)
	}
	if a, b := written["frac-a"].Status.Allocation.Devices.Results[0], written["frac-b"].Status.Allocation.Devices.Results[0]; a.Pool != b.Pool || a.Device != b.Device {
		t.Errorf("two small fractions on different GPUs (%s/%s, %s/%s): the gpud policy packs them", a.Pool, a.Device, b.Pool, b.Device)
	}

	// The node's side: pkg/dra's Preparer over the same published devices.
	for _, n := range local.in.Nodes {
		pub := local.pub[n.Name]
		mig := &fakeMIG{}
		p, err := dra.NewPreparer(dra.PreparerConfig{NodeName: n.Name, StateDir: t.TempDir(), CDIDir: t.TempDir(),
			Devices: func() map[string]dra.DeviceRef { return pub.Devices }, MIG: mig})
		if err != nil {
			t.Fatal(err)
		}
		var mine []*resourceapi.ResourceClaim
		for _, cl := range written {
			if cl.Status.Allocation.Devices.Results[0].Pool == n.Name {
				mine = append(mine, cl)
			}
		}
		res, err := p.Prepare(ctx, mine)
		if err != nil {
			t.Fatalf("%s: Prepare: %v", n.Name, err)
		}
		for _, cl := range mine {
			r, ok := res[cl.UID]
			if !ok || r.Err != nil || len(r.Devices) != len(cl.Status.Allocation.Devices.Results) {
				t.Errorf("%s: prepare %s: %+v", n.Name, cl.Name, r)
			}
		}
		t.Logf("%s: prepared %d claims, MIG devices created: %v", n.Name, len(mine), mig.created)
	}
}
