package dra

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/test/k8senv"
)

// rediscoveringMIG is the MIG manager the wiring passes: pkg/mig's applier,
// then a rediscovery so the slices follow.
type rediscoveringMIG struct {
	*simMIG
	store *discovery.Store
}

func (m rediscoveringMIG) Create(ctx context.Context, parent, profile string, start int) (CreatedMIG, error) {
	c, err := m.simMIG.Create(ctx, parent, profile, start)
	_, _ = m.store.Rediscover()
	return c, err
}

func (m rediscoveringMIG) Destroy(ctx context.Context, parent, uuid string, restore bool) (bool, error) {
	off, err := m.simMIG.Destroy(ctx, parent, uuid, restore)
	_, _ = m.store.Rediscover()
	return off, err
}

// readManifests decodes the shipped example ResourceClaimTemplates and
// DeviceClasses.
func readManifests(t *testing.T) ([]*resourceapi.DeviceClass, map[string]resourceapi.ResourceClaimSpec) {
	t.Helper()
	var classes []*resourceapi.DeviceClass
	specs := map[string]resourceapi.ResourceClaimSpec{}
	files, _ := filepath.Glob("../../deploy/dra/examples/*.yaml")
	for _, f := range append(files, "../../deploy/dra/deviceclasses.yaml") {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range bytes.Split(data, []byte("\n---")) {
			js, err := yaml.YAMLToJSON(doc)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			var tm metav1.TypeMeta
			_ = json.Unmarshal(js, &tm)
			switch tm.Kind {
			case "DeviceClass":
				var c resourceapi.DeviceClass
				if err := json.Unmarshal(js, &c); err != nil {
					t.Fatal(err)
				}
				classes = append(classes, &c)
			case "ResourceClaimTemplate":
				var c resourceapi.ResourceClaimTemplate
				if err := json.Unmarshal(js, &c); err != nil {
					t.Fatal(err)
				}
				specs[c.Name] = c.Spec.Spec
			}
		}
	}
	return classes, specs
}

// TestDriverOnRealKubernetes runs the driver against a real kube-apiserver
// and kube-scheduler (test/k8senv; skipped without the binaries): the API
// server validates the published slices, the upstream scheduler allocates
// the shipped example claims from them, and the test acts as the kubelet
// to prepare them, creating the MIG slice on the simulated node.
func TestDriverOnRealKubernetes(t *testing.T) {
	env := k8senv.Start(t)
	c := env.Client
	const node = "dgx-h100"
	env.CreateNode(t, node, nil)
	ctx := t.Context()
	classes, specs := readManifests(t)
	for _, dc := range classes {
		if _, err := c.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil {
			t.Fatalf("DeviceClass %s: %v", dc.Name, err)
		}
	}

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
	mig := rediscoveringMIG{simMIG: newSimMIG(n, filepath.Join(base, "journal.json")), store: store}
	drv, err := New(Options{NodeName: node, KubeClient: c, PluginDir: pluginDir, RegistryDir: registryDir, CDIDir: filepath.Join(base, "cdi"),
		Inventory: store, NodeState: func(inv gpu.Inventory) NodeState { s := st; s.Inventory = inv; return s }, MIG: mig, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- drv.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
	waitAPISlices(t, c, "the API server to accept 5 slices of 208 devices", func(m map[string]*resourceapi.ResourceSlice) bool {
		n := 0
		for _, s := range m {
			n += len(s.Spec.Devices)
		}
		return len(m) == 5 && n == 208
	})

	// The shipped example claims, one pod each, scheduled one at a time.
	cases := []struct{ claim, template string }{
		{"whole", "whole-gpu"}, {"frac-a", "fraction-20gi"}, {"frac-b", "fraction-20gi"}, {"nvlink", "two-gpus-nvlink"}, {"mig", "mig-1g10gb"},
		{"borrow", "fraction-borrowing"},
	}
	allocated := map[string][]resourceapi.DeviceRequestAllocationResult{}
	for _, tc := range cases {
		spec, ok := specs[tc.template]
		if !ok {
			t.Fatalf("no example template %s", tc.template)
		}
		rc := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: tc.claim, Namespace: "default"}, Spec: spec}
		if _, err := c.ResourceV1().ResourceClaims("default").Create(ctx, rc, metav1.CreateOptions{}); err != nil {
			t.Fatalf("claim %s: %v", tc.claim, err)
		}
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod-" + tc.claim, Namespace: "default"}, Spec: corev1.PodSpec{
			ResourceClaims: []corev1.PodResourceClaim{{Name: "c", ResourceClaimName: &rc.Name}},
			Containers: []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
				Claims:   []corev1.ResourceClaim{{Name: "c"}},
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
			}}},
		}}
		if _, err := c.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if got := env.WaitForPodBound(t, "default", p.Name, time.Minute); got != node {
			t.Fatalf("pod %s bound to %q\n%s", p.Name, got, env.DescribePod("default", p.Name))
		}
		got, err := c.ResourceV1().ResourceClaims("default").Get(ctx, tc.claim, metav1.GetOptions{})
		if err != nil || got.Status.Allocation == nil {
			t.Fatalf("claim %s: %v, allocation %+v", tc.claim, err, got.Status.Allocation)
		}
		allocated[tc.claim] = got.Status.Allocation.Devices.Results
		for _, r := range allocated[tc.claim] {
			mem := r.ConsumedCapacity["memory"]
			t.Logf("kube-scheduler allocated claim %s (%s) -> %s/%s consumed memory %s", tc.claim, tc.template, r.Pool, r.Device, mem.String())
		}
	}
	devs := drv.Devices()
	if r := allocated["whole"]; len(r) != 1 || devs[r[0].Device].Type != TypeGPU {
		t.Errorf("whole: %+v", r)
	}
	a, b := allocated["frac-a"], allocated["frac-b"]
	if len(a) != 1 || len(b) != 1 || a[0].Device != b[0].Device || a[0].ShareID == nil || b[0].ShareID == nil {
		t.Errorf("two 20Gi fractions not on one GPU: %+v %+v", a, b)
	}
	if r := allocated["borrow"]; len(r) != 1 || r[0].ShareID == nil {
		t.Errorf("borrow: %+v, want one share", r)
	} else if q := r[0].ConsumedCapacity["memory"]; q.String() != "20Gi" {
		t.Errorf("borrow consumed %s, want its 20Gi request (the 40Gi memoryLimit is the driver's, not the scheduler's)", q.String())
	}
	if r := allocated["nvlink"]; len(r) != 2 || r[0].Device == r[1].Device {
		t.Errorf("nvlink: %+v", r)
	}
	m := allocated["mig"]
	if len(m) != 1 || devs[m[0].Device].Profile != "1g.10gb" || !devs[m[0].Device].Dynamic() {
		t.Fatalf("mig: %+v", m)
	}

	// The kubelet's side: prepare every claim over gRPC.
	select {
	case <-drv.Ready():
	case <-time.After(waitTimeout):
		t.Fatal("driver not ready")
	}
	dra := drapb.NewDRAPluginClient(dial(t, filepath.Join(pluginDir, "dra.sock")))
	var claims []*drapb.Claim
	for _, tc := range cases {
		got, err := c.ResourceV1().ResourceClaims("default").Get(ctx, tc.claim, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		claims = append(claims, &drapb.Claim{Namespace: "default", Name: tc.claim, Uid: string(got.UID)})
	}
	resp, err := dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: claims})
	if err != nil {
		t.Fatalf("NodePrepareResources: %v", err)
	}
	for _, cl := range claims {
		r := resp.Claims[cl.Uid]
		if r == nil || r.Error != "" || len(r.Devices) == 0 {
			t.Errorf("prepare %s: %+v", cl.Name, r)
			continue
		}
		for _, d := range r.Devices {
			t.Logf("prepared %s: %s -> %v", cl.Name, d.DeviceName, d.CdiDeviceIds)
			if len(d.CdiDeviceIds) != 1 || !strings.HasPrefix(d.CdiDeviceIds[0], CDIKind+"=") {
				t.Errorf("prepare %s: CDI IDs %v", cl.Name, d.CdiDeviceIds)
			}
		}
	}
	// The MIG slice now exists: the inventory shows it and the driver
	// republishes it, under the same name, with its UUID.
	migName := m[0].Device
	waitAPISlices(t, c, migName+" published as an existing MIG device", func(sl map[string]*resourceapi.ResourceSlice) bool {
		d := sliceDevice(sl, migName)
		return d != nil && d.Attributes["uuid"].StringValue != nil
	})
	if _, err := dra.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: claims}); err != nil {
		t.Fatalf("NodeUnprepareResources: %v", err)
	}
	inv, _ := store.Inventory()
	for _, g := range inv.GPUs {
		if len(g.MIGDevices) != 0 {
			t.Errorf("gpu %d keeps MIG devices %+v after unprepare", g.Index, g.MIGDevices)
		}
	}
	if n := len(drv.Preparer().Prepared()); n != 0 {
		t.Errorf("%d claims still prepared", n)
	}
}

// waitAPISlices lists the slices and watches from there until ok accepts
// them; a watch the server ends is resumed from a fresh list.
func waitAPISlices(t testing.TB, c kubernetes.Interface, what string, ok func(map[string]*resourceapi.ResourceSlice) bool) {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		list, err := c.ResourceV1().ResourceSlices().List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatalf("list slices: %v", err)
		}
		cur := map[string]*resourceapi.ResourceSlice{}
		for i := range list.Items {
			cur[list.Items[i].Name] = &list.Items[i]
		}
		if ok(cur) {
			return
		}
		w, err := c.ResourceV1().ResourceSlices().Watch(t.Context(), metav1.ListOptions{ResourceVersion: list.ResourceVersion})
		if err != nil {
			t.Fatalf("watch slices: %v", err)
		}
	events:
		for {
			select {
			case ev, open := <-w.ResultChan():
				if !open {
					break events
				}
				s, isSlice := ev.Object.(*resourceapi.ResourceSlice)
				if !isSlice {
					t.Logf("slice watch: %s %v", ev.Type, ev.Object)
					break events
				}
				if ev.Type == watch.Deleted {
					delete(cur, s.Name)
				} else {
					cur[s.Name] = s
				}
				if ok(cur) {
					w.Stop()
					return
				}
			case <-deadline:
				w.Stop()
				t.Fatalf("no %s after a minute; %d slices", what, len(cur))
			}
		}
		w.Stop()
	}
}

// TestSlicesPassAPIValidation creates (dry run) every slice the builder
// makes for each simulated profile, healthy and with its variants (taints,
// existing MIG devices, exclusive-only GPUs), on a real kube-apiserver:
// its validation accepts them and drops no field.
func TestSlicesPassAPIValidation(t *testing.T) {
	env := k8senv.Start(t, k8senv.WithoutScheduler())
	type variant struct {
		name   string
		change func(st *NodeState)
	}
	variants := []variant{
		{name: "healthy", change: func(*NodeState) {}},
		{name: "tainted", change: func(st *NodeState) {
			st.Inventory.GPUs[0].Health, st.Inventory.GPUs[0].HealthReason = gpu.Lost, "xid 79: gpu fell off the bus"
			st.Inventory.GPUs[1].Health, st.Inventory.GPUs[1].HealthReason = gpu.Unhealthy, "xid 31"
		}},
		{name: "exclusive", change: func(st *NodeState) {
			st.ExclusiveOnly = map[string]bool{st.Inventory.GPUs[0].UUID: true}
		}},
		{name: "mig-enabled", change: func(st *NodeState) {
			g := &st.Inventory.GPUs[0]
			if !g.MIGCapable {
				return
			}
			g.MIGEnabled = true
			g.MIGDevices = []gpu.MIGDevice{{UUID: "MIG-x", Profile: "3g.40gb", MemoryBytes: 40 << 30, GPUInstanceID: 2, PlacementStart: 4, PlacementSize: 4,
				Health: gpu.Unhealthy, HealthReason: "xid 43"}}
		}},
	}
	for _, profile := range []string{"dgx-a100", "dgx-h100", "dgx-h200", "pcie-l40s"} {
		for _, v := range variants {
			t.Run(profile+"/"+v.name, func(t *testing.T) {
				_, st, _ := buildSim(t, profile)
				st.Inventory.GPUs = append([]gpu.GPU(nil), st.Inventory.GPUs...)
				v.change(&st)
				pool := profile + "-" + v.name
				pub, err := Build(pool, st)
				if err != nil {
					t.Fatal(err)
				}
				checkResources(t, pool, pub)
				sl := pub.Resources.Pools[pool].Slices
				for i, s := range sl {
					obj := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{GenerateName: pool + "-"}, Spec: resourceapi.ResourceSliceSpec{
						Driver: DriverName, NodeName: &pool, Devices: s.Devices, SharedCounters: s.SharedCounters,
						Pool: resourceapi.ResourcePool{Name: pool, Generation: 1, ResourceSliceCount: int64(len(sl))}}}
					got, err := env.Client.ResourceV1().ResourceSlices().Create(t.Context(), obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
					if err != nil {
						t.Fatalf("slice %d: %v", i, err)
					}
					if len(got.Spec.Devices) != len(s.Devices) || len(got.Spec.SharedCounters) != len(s.SharedCounters) {
						t.Fatalf("slice %d: the API server kept %d devices and %d counter sets of %d and %d", i,
							len(got.Spec.Devices), len(got.Spec.SharedCounters), len(s.Devices), len(s.SharedCounters))
					}
					for j, d := range got.Spec.Devices {
						want := s.Devices[j]
						if len(d.Taints) != len(want.Taints) || len(d.ConsumesCounters) != len(want.ConsumesCounters) ||
							(d.AllowMultipleAllocations == nil) != (want.AllowMultipleAllocations == nil) || len(d.Attributes) != len(want.Attributes) {
							t.Errorf("slice %d device %s: the API server dropped fields: %+v", i, d.Name, d)
						}
						for name, c := range want.Capacity {
							if (c.RequestPolicy == nil) != (d.Capacity[name].RequestPolicy == nil) {
								t.Errorf("device %s capacity %s: request policy dropped", d.Name, name)
							}
						}
					}
				}
			})
		}
	}
}

// BenchmarkXidToTaint measures the time from an Xid on a simulated GPU to
// the device taint on a real kube-apiserver: NVML event -> health monitor
// -> inventory store -> driver -> ResourceSlice update (seen through a
// list and watch). Each op is a new Xid, on the GPUs in turn.
func BenchmarkXidToTaint(b *testing.B) {
	env := k8senv.Start(b, k8senv.WithoutScheduler())
	const node = "dgx-h100"
	env.CreateNode(b, node, nil)
	n, st, _ := buildSim(b, node)
	store := discovery.NewStore(discovery.New(n, node, nil), nil)
	if _, err := store.Rediscover(); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	mon := discovery.NewHealthMonitor(n, discovery.HealthConfig{IgnoredXids: []uint64{}, WaitTimeout: 10 * time.Millisecond}, store.SetHealth, nil)
	base := b.TempDir()
	if err := os.MkdirAll(filepath.Join(base, "r"), 0o755); err != nil {
		b.Fatal(err)
	}
	drv, err := New(Options{NodeName: node, KubeClient: env.Client, PluginDir: filepath.Join(base, "p"), RegistryDir: filepath.Join(base, "r"),
		CDIDir: filepath.Join(base, "cdi"), Inventory: store, NodeState: func(inv gpu.Inventory) NodeState { s := st; s.Inventory = inv; return s }})
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 2)
	go func() { done <- mon.Run(ctx) }()
	go func() { done <- drv.Run(ctx) }()
	b.Cleanup(func() {
		cancel()
		for range 2 {
			if err := <-done; err != nil {
				b.Errorf("run: %v", err)
			}
		}
	})
	waitAPISlices(b, env.Client, "the first slices", func(m map[string]*resourceapi.ResourceSlice) bool { return len(m) == 5 })
	xid := uint64(1000)
	i := 0
	for b.Loop() {
		xid++
		gpuIndex := i % 8
		i++
		if err := n.InjectXid(gpuIndex, xid); err != nil {
			b.Fatal(err)
		}
		want := "xid-" + strconv.FormatUint(xid, 10)
		name := GPUDeviceName(gpuIndex)
		waitAPISlices(b, env.Client, want+" on "+name, func(m map[string]*resourceapi.ResourceSlice) bool {
			d := sliceDevice(m, name)
			return d != nil && len(d.Taints) == 1 && d.Taints[0].Value == want
		})
	}
}
