package main

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/dynamic-resource-allocation/deviceattribute"

	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/dra"
	"github.com/gpud/gpud/pkg/mig"
	"github.com/gpud/gpud/pkg/sharingfile"
	"github.com/gpud/gpud/pkg/simnode"
	"github.com/gpud/gpud/pkg/timeslice"
)

// draArgs are agentArgs in DRA mode with the kubelet's DRA dirs in dir
// (the registry dir created, as the kubelet does).
func draArgs(t *testing.T, dir string, extra ...string) []string {
	t.Helper()
	reg := filepath.Join(dir, "plugins_registry")
	if err := os.MkdirAll(reg, 0o755); err != nil {
		t.Fatal(err)
	}
	return agentArgs(dir, append([]string{"--kubelet-api", "dra", "--kubeconfig", writeTestKubeconfig(t, dir),
		"--kubelet-plugins-dir", filepath.Join(dir, "plugins"), "--kubelet-registry-dir", reg}, extra...)...)
}

// writeTestKubeconfig writes a kubeconfig for a server that is never
// contacted.
func writeTestKubeconfig(t *testing.T, dir string) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "t"}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "c"
	p := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestDRAFlagsValidatedBeforeStarting: each bad DRA flag is refused, named
// once, before anything starts or logs.
func TestDRAFlagsValidatedBeforeStarting(t *testing.T) {
	tests := []struct {
		name string
		args func(dir string) []string
		flag string
		want string
	}{
		{"kubelet-api", func(dir string) []string { return agentArgs(dir, "--kubelet-api", "both") },
			"kubelet-api", `"both": want device-plugin or dra`},
		{"registry-dir-missing", func(dir string) []string {
			return draArgs(t, dir, "--kubelet-registry-dir", filepath.Join(dir, "nope"))
		}, "kubelet-registry-dir", "does a kubelet run on this node?"},
		{"registry-dir-file", func(dir string) []string {
			f := filepath.Join(dir, "file")
			_ = os.WriteFile(f, nil, 0o600)
			return draArgs(t, dir, "--kubelet-registry-dir", f)
		}, "kubelet-registry-dir", "is not a directory"},
		{"plugins-dir-empty", func(dir string) []string { return draArgs(t, dir, "--kubelet-plugins-dir", "") },
			"kubelet-plugins-dir", "empty"},
		{"cdi-dir-empty", func(dir string) []string { return draArgs(t, dir, "--cdi-dir", "") },
			"cdi-dir", "delivers devices through CDI specs"},
		{"kubeconfig-missing", func(dir string) []string {
			return draArgs(t, dir, "--kubeconfig", filepath.Join(dir, "missing.kubeconfig"))
		}, "kubeconfig", "missing.kubeconfig"},
		{"node-name", func(dir string) []string { return draArgs(t, dir, "--node-name", "GPU_Node") },
			"node-name", "not a Kubernetes node name"},
		{"sysfs-root-missing", func(dir string) []string {
			return draArgs(t, dir, "--sysfs-root", filepath.Join(dir, "nosys"))
		}, "sysfs-root", "mount it here"},
		{"sysfs-root-empty", func(dir string) []string { return draArgs(t, dir, "--sysfs-root", "") },
			"sysfs-root", "empty"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var logs bytes.Buffer
			args := append(tc.args(dir), "--simulate", "dgx-h100", "--http-addr", "")
			err := runAgent(t.Context(), args, io.Discard, &logs)
			if err == nil {
				t.Fatalf("%v accepted", args)
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.want) {
				t.Errorf("error %q lacks %q", msg, tc.want)
			}
			if n := strings.Count(msg, "--"+tc.flag+":"); n != 1 {
				t.Errorf("error %q names --%s %d times, want once", msg, tc.flag, n)
			}
			for _, p := range []string{"plugins", "cdi", "admin.sock"} {
				if _, err := os.Stat(filepath.Join(dir, p)); err == nil {
					t.Errorf("%s exists: the agent started something before validating", p)
				}
			}
			if logs.Len() > 0 {
				t.Errorf("the agent logged before refusing its config:\n%s", logs.String())
			}
		})
	}
}

// TestDRAModeWiring: --kubelet-api dra runs the DRA driver instead of the
// device plugin; device-plugin mode (the default) runs no driver.
func TestDRAModeWiring(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		name       string
		dra        bool
		want, drop string
	}{{"dra", true, "dra", "deviceplugin"}, {"device-plugin", false, "deviceplugin", "dra"}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			args := agentArgs(dir, "--simulate", "dgx-h100", "--http-addr", "")
			if tc.dra {
				args = draArgs(t, dir, "--simulate", "dgx-h100", "--http-addr", "")
			}
			names := wiredTaskNames(t, args, log)
			if !slices.Contains(names, tc.want) || slices.Contains(names, tc.drop) {
				t.Errorf("tasks %v: want %s and no %s", names, tc.want, tc.drop)
			}
		})
	}
}

func TestDRANodeNameMustBeANodeName(t *testing.T) {
	o := draOptions{kubeletAPI: kubeletAPIDRA, kubeconfig: writeTestKubeconfig(t, t.TempDir()), pluginsDir: t.TempDir(), registryDir: t.TempDir()}
	_, err := newDRADriver(&o, draDeps{node: "My_Host", cdiDir: t.TempDir(), log: slog.New(slog.DiscardHandler)})
	if err == nil || !strings.Contains(err.Error(), "--node-name:") {
		t.Fatalf("newDRADriver with node My_Host = %v, want a --node-name error", err)
	}
}

func TestDRAInClusterConfigMissing(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	_, err := draRESTConfig(&draOptions{})
	if err == nil || !strings.Contains(err.Error(), "--kubeconfig: empty, and no in-cluster config") || !strings.Contains(err.Error(), rest.ErrNotInCluster.Error()) {
		t.Fatalf("restConfig outside a cluster = %v", err)
	}
}

// TestDRADeployDaemonSetUsesAgentFlags: the DRA DaemonSet's args are agent
// flags.
func TestDRADeployDaemonSetUsesAgentFlags(t *testing.T) {
	data, err := os.ReadFile("../../deploy/dra/daemonset.yaml")
	if err != nil {
		t.Skipf("no DRA DaemonSet: %v", err)
	}
	var ds appsv1.DaemonSet
	if err := decodeManifest(data, &ds); err != nil {
		t.Fatal(err)
	}
	fs, c := agentFlagSet(io.Discard)
	args := ds.Spec.Template.Spec.Containers[0].Args
	if len(args) == 0 || args[0] != "agent" {
		t.Fatalf("args %v: want the agent subcommand first", args)
	}
	if err := fs.Parse(args[1:]); err != nil {
		t.Fatalf("DaemonSet args: %v", err)
	}
	if !draEnabled(&c.dra) {
		t.Errorf("DRA DaemonSet runs --kubelet-api %q", c.dra.kubeletAPI)
	}
}

// wiredDriver is the DRA driver as the agent wires it, on a simulated
// node's inventory store and a fake API server.
type wiredDriver struct {
	drv    *dra.Driver
	client *fake.Clientset
	node   *simnode.Node
	store  *discovery.Store
}

// startWiredDriver runs the driver newDRADriver builds on a simulated
// dgx-h100 until the test ends, and waits for it to be ready. Node, store,
// client and dirs are filled in, and the simulated node as with --simulate;
// setup, when not nil, adjusts the options and deps after that.
func startWiredDriver(t *testing.T, setup func(t *testing.T, n *simnode.Node, o *draOptions, deps *draDeps)) *wiredDriver {
	t.Helper()
	n := simnode.NewBuiltin("dgx-h100")
	t.Cleanup(n.Close)
	store := discovery.NewStore(discovery.New(n, "dgx-h100", nil), nil)
	if _, err := store.Rediscover(); err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dgx-h100", UID: "node-uid"}})
	// The fake does not implement generateName, which the slice
	// controller uses.
	var created atomic.Int64
	client.PrependReactor("create", "resourceslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if s, ok := a.(k8stesting.CreateAction).GetObject().(*resourceapi.ResourceSlice); ok && s.Name == "" {
			s.Name = s.GenerateName + strconv.FormatInt(created.Add(1), 10)
		}
		return false, nil, nil
	})
	dir := t.TempDir()
	reg := filepath.Join(dir, "reg")
	if err := os.MkdirAll(reg, 0o755); err != nil {
		t.Fatal(err)
	}
	o := draOptions{kubeletAPI: kubeletAPIDRA, pluginsDir: filepath.Join(dir, "plugins"), registryDir: reg, sysfsRoot: defaultSysfsRoot}
	deps := draDeps{node: "dgx-h100", inventory: store, client: client, cdiDir: filepath.Join(dir, "cdi"), sim: n,
		migState: func() (mig.State, error) { return mig.ReadState(n) }, log: slog.New(slog.DiscardHandler)}
	if setup != nil {
		setup(t, n, &o, &deps)
	}
	drv, err := newDRADriver(&o, deps)
	if err != nil {
		t.Fatal(err)
	}
	testwait.Run(t, "dra driver", drv.Run)
	select {
	case <-drv.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("dra driver not ready after 30s")
	}
	return &wiredDriver{drv: drv, client: client, node: n, store: store}
}

// device returns the published device name, nil when it is not published.
func (w *wiredDriver) device(t *testing.T, name string) *resourceapi.Device {
	t.Helper()
	list, err := w.client.ResourceV1().ResourceSlices().List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list.Items {
		for i := range s.Spec.Devices {
			if s.Spec.Devices[i].Name == name {
				return &s.Spec.Devices[i]
			}
		}
	}
	return nil
}

// TestDRADriverFollowsInventory: the wired driver republishes at every
// inventory change of the store, with no forwarder between them (a change
// during a publish is pkg/dra's TestDriverChangeDuringFirstPublishIsPublished).
func TestDRADriverFollowsInventory(t *testing.T) {
	w := startWiredDriver(t, nil)
	testwait.For(t, 30*time.Second, "gpu-3 published untainted", func() bool {
		d := w.device(t, "gpu-3")
		return d != nil && len(d.Taints) == 0
	})
	if err := w.node.FallOffBus(3); err != nil {
		t.Fatal(err)
	}
	if _, err := w.store.Rediscover(); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 30*time.Second, "gpu-3 tainted after it fell off the bus", func() bool {
		d := w.device(t, "gpu-3")
		return d != nil && len(d.Taints) == 1 && d.Taints[0].Effect == resourceapi.DeviceTaintEffectNoExecute
	})
}

// TestDRAPCIeRoots: the wired driver publishes resource.kubernetes.io/pcieRoot
// on every GPU: from the simulated node's topology with --simulate, from
// --sysfs-root otherwise (a fake sysfs with the simulated GPUs' bus IDs;
// GPU 7 is missing from it and has no attribute).
func TestDRAPCIeRoots(t *testing.T) {
	fakeRoots := map[string]string{}
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, n *simnode.Node, o *draOptions, deps *draDeps)
		want  func(n *simnode.Node, i int) string
	}{
		{"simulated", nil, func(n *simnode.Node, i int) string { r, _ := n.PCIeRoot(i); return r }},
		{"sysfs", func(t *testing.T, n *simnode.Node, o *draOptions, deps *draDeps) {
			deps.sim = nil
			o.sysfsRoot = t.TempDir()
			for i := range 7 {
				pci, _ := n.Device(i).GetPciInfo()
				id := fmt.Sprintf("0000:%02x:00.0", pci.Bus)
				fakeRoots[strconv.Itoa(i)] = fmt.Sprintf("pci0000:%02x", 0x10*(i/2)) // two GPUs per root
				dev := filepath.Join("devices", fakeRoots[strconv.Itoa(i)], id)
				if err := os.MkdirAll(filepath.Join(o.sysfsRoot, dev), 0o755); err != nil {
					t.Fatal(err)
				}
				bus := filepath.Join(o.sysfsRoot, "bus", "pci", "devices")
				if err := os.MkdirAll(bus, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(filepath.Join("..", "..", "..", dev), filepath.Join(bus, id)); err != nil {
					t.Fatal(err)
				}
			}
		}, func(_ *simnode.Node, i int) string { return fakeRoots[strconv.Itoa(i)] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := startWiredDriver(t, tc.setup)
			testwait.For(t, 30*time.Second, "gpu-0 published", func() bool { return w.device(t, "gpu-0") != nil })
			for i := range 8 {
				d := w.device(t, dra.GPUDeviceName(i))
				if d == nil {
					t.Fatalf("gpu-%d not published", i)
				}
				got := ""
				if a, ok := d.Attributes[deviceattribute.StandardDeviceAttributePCIeRoot]; ok && a.StringValue != nil {
					got = *a.StringValue
				}
				if want := tc.want(w.node, i); got != want {
					t.Errorf("gpu-%d pcieRoot %q, want %q", i, got, want)
				}
			}
		})
	}
}

// TestDRAExclusiveGPUs: a GPU the sharing config marks exclusive is
// published whole (not multi-allocatable, no fractions), and a sharing
// change through the runtime (as PUT /v1/sharing or a changed
// --sharing-config makes) republishes the slices.
func TestDRAExclusiveGPUs(t *testing.T) {
	var rt *timeslice.Runtime
	w := startWiredDriver(t, func(t *testing.T, n *simnode.Node, o *draOptions, deps *draDeps) {
		inv, _ := deps.inventory.Inventory()
		cfg, err := sharingfile.ParseConfig([]byte("devices:\n  " + inv.GPUs[2].UUID + ": {exclusive: true}\n"))
		if err != nil {
			t.Fatal(err)
		}
		store := deps.inventory.(*discovery.Store)
		rt = timeslice.NewRuntime(timeslice.RuntimeConfig{Initial: cfg, Inventory: store.Current})
		deps.sharing = rt
	})
	shareable := func(name string) func() bool {
		return func() bool {
			d := w.device(t, name)
			return d != nil && d.AllowMultipleAllocations != nil && *d.AllowMultipleAllocations
		}
	}
	exclusive := func(name string) func() bool {
		return func() bool {
			d := w.device(t, name)
			return d != nil && d.AllowMultipleAllocations == nil && d.Capacity[dra.CapacityMemory].RequestPolicy == nil
		}
	}
	testwait.For(t, 30*time.Second, "gpu-2 published exclusive", exclusive("gpu-2"))
	for _, name := range []string{"gpu-1", "gpu-3"} {
		if !shareable(name)() {
			t.Errorf("%s not multi-allocatable", name)
		}
	}
	next, err := sharingfile.ParseConfig([]byte("default: {exclusive: true}\ndevices:\n  \"2\": {replicas: 2}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if changed, err := rt.Update(t.Context(), next); err != nil || !changed {
		t.Fatalf("sharing update = %v, %v", changed, err)
	}
	testwait.For(t, 30*time.Second, "gpu-2 shareable after the sharing change", shareable("gpu-2"))
	for _, name := range []string{"gpu-0", "gpu-1", "gpu-7"} {
		if !exclusive(name)() {
			t.Errorf("%s not exclusive under the default", name)
		}
	}
}

// wiredTaskNames wires an agent from args (without running it) and returns
// the names of the tasks it would run.
func wiredTaskNames(t *testing.T, args []string, log *slog.Logger) []string {
	t.Helper()
	cfg, err := loadAgentConfig(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	lib, sim, closeLib, err := openNVML(cfg.nvml)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeLib)
	node, err := resolveNodeName(cfg.nvml, sim)
	if err != nil {
		t.Fatal(err)
	}
	src, err := newNodeSources(cfg, lib, node, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close(log) })
	tasks, err := wireAgent(cfg, args, lib, sim, src, log)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tk := range tasks {
		names = append(names, tk.Name)
	}
	return names
}
