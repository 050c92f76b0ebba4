package dra

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/gpud/gpud/pkg/gpu"
)

// fakeSource is an InventorySource a test sets.
type fakeSource struct {
	mu      sync.Mutex
	inv     gpu.Inventory
	have    bool
	changed chan struct{}
}

var _ InventorySource = (*fakeSource)(nil)

func newFakeSource() *fakeSource { return &fakeSource{changed: make(chan struct{})} }

func (s *fakeSource) Inventory() (gpu.Inventory, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inv, s.have
}

func (s *fakeSource) InventoryChanged() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

func (s *fakeSource) set(inv gpu.Inventory) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inv, s.have = inv, true
	close(s.changed)
	s.changed = make(chan struct{})
}

// waitTimeout bounds every wait in these tests; a failure says what did
// not happen.
const waitTimeout = 30 * time.Second

type driverEnv struct {
	drv         *Driver
	client      *fake.Clientset
	src         *fakeSource
	st          NodeState
	pluginDir   string
	registryDir string
	cdiDir      string
	done        chan error
	cancel      context.CancelFunc
}

func startDriver(t *testing.T, m MIGManager, objects ...any) *driverEnv {
	t.Helper()
	return startDriverWith(t, m, nil, objects...)
}

// startDriverWith is startDriver with opt adjusting the driver's options
// before it starts.
func startDriverWith(t *testing.T, m MIGManager, opt func(*driverEnv, *Options), objects ...any) *driverEnv {
	t.Helper()
	_, st, _ := buildSim(t, "dgx-h100")
	base := t.TempDir()
	e := &driverEnv{src: newFakeSource(), st: st, pluginDir: filepath.Join(base, "p"), registryDir: filepath.Join(base, "r"), cdiDir: filepath.Join(base, "cdi"), done: make(chan error, 1)}
	if err := os.MkdirAll(e.registryDir, 0o755); err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dgx-h100", UID: "node-uid"}}
	objs := []any{node}
	objs = append(objs, objects...)
	e.client = fake.NewClientset()
	// The fake does not implement generateName, which the slice
	// controller uses.
	var created atomic.Int64
	e.client.PrependReactor("create", "resourceslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if s, ok := a.(k8stesting.CreateAction).GetObject().(*resourceapi.ResourceSlice); ok && s.Name == "" {
			s.Name = s.GenerateName + strconv.FormatInt(created.Add(1), 10)
		}
		return false, nil, nil
	})
	for _, o := range objs {
		var err error
		switch o := o.(type) {
		case *corev1.Node:
			_, err = e.client.CoreV1().Nodes().Create(t.Context(), o, metav1.CreateOptions{})
		case *resourceapi.ResourceClaim:
			_, err = e.client.ResourceV1().ResourceClaims(o.Namespace).Create(t.Context(), o, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	opts := Options{NodeName: "dgx-h100", KubeClient: e.client, PluginDir: e.pluginDir, RegistryDir: e.registryDir, CDIDir: e.cdiDir,
		Inventory: e.src, NodeState: func(gpu.Inventory) NodeState { return e.st }, MIG: m, Logger: testLogger(t)}
	if opt != nil {
		opt(e, &opts)
	}
	drv, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	e.drv = drv
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	go func() { e.done <- drv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-e.done:
			if err != nil {
				t.Errorf("Run = %v", err)
			}
		case <-time.After(waitTimeout):
			t.Errorf("Run did not return %v after cancel", waitTimeout)
		}
	})
	return e
}

func (e *driverEnv) waitReady(t *testing.T) {
	t.Helper()
	select {
	case <-e.drv.Ready():
	case err := <-e.done:
		t.Fatalf("Run returned before ready: %v", err)
	case <-time.After(waitTimeout):
		t.Fatalf("driver not ready after %v", waitTimeout)
	}
}

func dial(t *testing.T, path string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial %s: %v", path, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// waitSlices reads ResourceSlice events until ok accepts the node's
// current slices.
func waitSlices(t *testing.T, w watch.Interface, what string, ok func(map[string]*resourceapi.ResourceSlice) bool) map[string]*resourceapi.ResourceSlice {
	t.Helper()
	cur := map[string]*resourceapi.ResourceSlice{}
	timeout := time.After(waitTimeout)
	for {
		select {
		case ev, open := <-w.ResultChan():
			if !open {
				t.Fatalf("slice watch closed waiting for %s", what)
			}
			s, isSlice := ev.Object.(*resourceapi.ResourceSlice)
			if !isSlice {
				continue
			}
			if ev.Type == watch.Deleted {
				delete(cur, s.Name)
			} else {
				cur[s.Name] = s
			}
			if ok(cur) {
				return cur
			}
		case <-timeout:
			t.Fatalf("no %s after %v; slices: %d", what, waitTimeout, len(cur))
		}
	}
}

func sliceDevice(slices map[string]*resourceapi.ResourceSlice, name string) *resourceapi.Device {
	for _, s := range slices {
		for i := range s.Spec.Devices {
			if s.Spec.Devices[i].Name == name {
				return &s.Spec.Devices[i]
			}
		}
	}
	return nil
}

// TestDriverAsKubelet plays the kubelet over real gRPC: registration
// GetInfo, DRA v1 NodePrepareResources/NodeUnprepareResources and the
// health stream, and checks the slices on the (fake) API server.
func TestDriverAsKubelet(t *testing.T) {
	f := &fakeMIG{}
	whole := claim("uid-w", "whole", alloc{pool: "dgx-h100", device: "gpu-2"})
	slice := claim("uid-m", "slice", alloc{pool: "dgx-h100", device: "gpu-4-mig-1g10gb-6"})
	e := startDriver(t, f, whole, slice)
	w, err := e.client.ResourceV1().ResourceSlices().Watch(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	e.src.set(e.st.Inventory)
	e.waitReady(t)

	got := waitSlices(t, w, "5 slices of 208 devices", func(m map[string]*resourceapi.ResourceSlice) bool {
		n := 0
		for _, s := range m {
			n += len(s.Spec.Devices)
		}
		return len(m) == 5 && n == 208
	})
	for _, s := range got {
		if s.Spec.Driver != DriverName || s.Spec.Pool.Name != "dgx-h100" || s.Spec.NodeName == nil || *s.Spec.NodeName != "dgx-h100" {
			t.Errorf("slice %s: driver %s pool %s", s.Name, s.Spec.Driver, s.Spec.Pool.Name)
		}
	}

	reg := registerapi.NewRegistrationClient(dial(t, filepath.Join(e.registryDir, DriverName+"-reg.sock")))
	info, err := reg.GetInfo(t.Context(), &registerapi.InfoRequest{})
	if err != nil {
		t.Fatalf("GetInfo: %v", err)
	}
	if info.Type != registerapi.DRAPlugin || info.Name != DriverName || info.Endpoint != filepath.Join(e.pluginDir, "dra.sock") ||
		!slices.Contains(info.SupportedVersions, drapb.DRAPluginService) || !slices.Contains(info.SupportedVersions, drahealthv1.DRAResourceHealthService) {
		t.Fatalf("GetInfo = %+v", info)
	}
	if _, err := reg.NotifyRegistrationStatus(t.Context(), &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatalf("NotifyRegistrationStatus: %v", err)
	}

	conn := dial(t, info.Endpoint)
	dra := drapb.NewDRAPluginClient(conn)
	resp, err := dra.NodePrepareResources(t.Context(), &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{
		{Namespace: "ns", Uid: "uid-w", Name: "whole"}, {Namespace: "ns", Uid: "uid-m", Name: "slice"}}})
	if err != nil {
		t.Fatalf("NodePrepareResources: %v", err)
	}
	for uid, want := range map[string]string{"uid-w": CDIKind + "=uid-w-gpu-2", "uid-m": CDIKind + "=uid-m-gpu-4-mig-1g10gb-6"} {
		r := resp.Claims[uid]
		if r == nil || r.Error != "" || len(r.Devices) != 1 || !slices.Equal(r.Devices[0].CdiDeviceIds, []string{want}) || r.Devices[0].PoolName != "dgx-h100" {
			t.Errorf("claim %s: %+v, want CDI device %s", uid, r, want)
		}
	}
	if len(f.created) != 1 {
		t.Errorf("MIG creates = %v, want one", f.created)
	}
	un, err := dra.NodeUnprepareResources(t.Context(), &drapb.NodeUnprepareResourcesRequest{Claims: []*drapb.Claim{
		{Namespace: "ns", Uid: "uid-w", Name: "whole"}, {Namespace: "ns", Uid: "uid-m", Name: "slice"}}})
	if err != nil {
		t.Fatalf("NodeUnprepareResources: %v", err)
	}
	for uid, r := range un.Claims {
		if r.Error != "" {
			t.Errorf("unprepare %s: %s", uid, r.Error)
		}
	}
	if f.liveCount() != 0 {
		t.Errorf("MIG devices left after unprepare: %d", f.liveCount())
	}

	// Health: the kubelet's stream sees all devices healthy, then the
	// lost GPU; the slices carry a NoExecute taint on it.
	health, err := drahealthv1.NewDRAResourceHealthClient(conn).NodeWatchResources(t.Context(), &drahealthv1.NodeWatchResourcesRequest{})
	if err != nil {
		t.Fatalf("NodeWatchResources: %v", err)
	}
	first, err := health.Recv()
	if err != nil || len(first.Devices) != 208 {
		t.Fatalf("first health report: %d devices, %v", len(first.GetDevices()), err)
	}
	inv := e.st.Inventory
	inv.GPUs = slices.Clone(inv.GPUs)
	inv.GPUs[3].Health, inv.GPUs[3].HealthReason = gpu.Lost, "xid 79: gpu fell off the bus"
	e.src.set(inv)
	for {
		r, err := health.Recv()
		if err != nil {
			t.Fatalf("health stream: %v", err)
		}
		i := slices.IndexFunc(r.Devices, func(d *drahealthv1.DeviceHealth) bool { return d.Device.DeviceName == "gpu-3" })
		if i >= 0 && r.Devices[i].Health == drahealthv1.HealthStatus_UNHEALTHY {
			break
		}
	}
	waitSlices(t, w, "a NoExecute taint on gpu-3", func(m map[string]*resourceapi.ResourceSlice) bool {
		d := sliceDevice(m, "gpu-3")
		return d != nil && len(d.Taints) == 1 && d.Taints[0].Effect == resourceapi.DeviceTaintEffectNoExecute
	})

	e.cancel()
	select {
	case err := <-e.done:
		if err != nil {
			t.Fatalf("Run = %v", err)
		}
		e.done <- nil
	case <-time.After(waitTimeout):
		t.Fatalf("Run did not return after cancel")
	}
	if _, err := os.Stat(filepath.Join(e.registryDir, DriverName+"-reg.sock")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("registration socket left after Run: %v", err)
	}
}

// notifier is a source of changes the inventory does not show, as the
// sharing runtime is: Changed returns a channel closed at the next change.
type notifier struct {
	mu sync.Mutex
	ch chan struct{}
}

func newNotifier() *notifier { return &notifier{ch: make(chan struct{})} }

func (n *notifier) Changed() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ch
}

func (n *notifier) notify() {
	n.mu.Lock()
	defer n.mu.Unlock()
	close(n.ch)
	n.ch = make(chan struct{})
}

// TestDriverChangeDuringFirstPublishIsPublished: a change that lands after
// the driver read its first state (here while it builds it, the widest
// such window: the slices are then built, the plugin started and the
// slices published before the driver waits) is republished without
// another change. Without the fix the driver took its inventory-change
// channel only after publishing, so the change waited for the next one.
func TestDriverChangeDuringFirstPublishIsPublished(t *testing.T) {
	lostGPU3 := func(st NodeState) gpu.Inventory {
		inv := st.Inventory
		inv.GPUs = slices.Clone(inv.GPUs)
		inv.GPUs[3].Health, inv.GPUs[3].HealthReason = gpu.Lost, "xid 79: gpu fell off the bus"
		return inv
	}
	for _, tc := range []struct {
		name string
		// hook makes the change from inside the first NodeState call;
		// want checks the slices show it.
		opt  func(*driverEnv, *Options)
		want func(map[string]*resourceapi.ResourceSlice) bool
	}{
		{"inventory", func(e *driverEnv, o *Options) {
			var first sync.Once
			o.NodeState = func(gpu.Inventory) NodeState {
				first.Do(func() { e.src.set(lostGPU3(e.st)) })
				return e.st
			}
		}, func(m map[string]*resourceapi.ResourceSlice) bool {
			d := sliceDevice(m, "gpu-3")
			return d != nil && len(d.Taints) == 1
		}},
		{"changed", func(e *driverEnv, o *Options) {
			n := newNotifier()
			var exclusive atomic.Bool
			o.Changed = n.Changed
			o.NodeState = func(gpu.Inventory) NodeState {
				st := e.st
				if exclusive.Swap(true) {
					st.ExclusiveOnly = map[string]bool{st.Inventory.GPUs[2].UUID: true}
				} else {
					n.notify()
				}
				return st
			}
		}, func(m map[string]*resourceapi.ResourceSlice) bool {
			d := sliceDevice(m, "gpu-2")
			return d != nil && d.AllowMultipleAllocations == nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := startDriverWith(t, nil, tc.opt)
			w, err := e.client.ResourceV1().ResourceSlices().Watch(t.Context(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			e.src.set(e.st.Inventory)
			e.waitReady(t)
			waitSlices(t, w, "republish of the change made during the first publish", tc.want)
		})
	}
}

func TestDriverOptions(t *testing.T) {
	_, err := New(Options{HealthResend: time.Minute})
	for _, want := range []string{"NodeName", "KubeClient", "PluginDir", "Inventory", "HealthResend"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New(empty) = %v, want it to name %s", err, want)
		}
	}
}

func TestDriverStopsBeforeFirstInventory(t *testing.T) {
	e := startDriver(t, nil)
	e.cancel()
	select {
	case err := <-e.done:
		if err != nil {
			t.Fatalf("Run = %v", err)
		}
		e.done <- nil
	case <-time.After(waitTimeout):
		t.Fatal("Run did not return after cancel while waiting for the inventory")
	}
	select {
	case <-e.drv.Ready():
		t.Error("ready without an inventory")
	default:
	}
}

// testLogger logs warnings and errors through t.Log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
