package test

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/pkg/deviceplugin"
	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/timeslice"
	"github.com/gpud/gpud/test/kubeletstub"
)

const gpuRes = "nvidia.com/gpu"

func TestRegistersWhenKubeletComesLate(t *testing.T) {
	r := startRig(t, "dgx-h100", false)
	// The plugin retries against the missing kubelet.sock: wait until it
	// has failed twice, so the kubelet below comes up late for a plugin
	// that is already retrying, and must get the registration without a
	// plugin restart.
	testwait.For(t, waitTimeout, "two failed registrations of "+gpuRes+" without a kubelet", func() bool {
		return r.logs.count("registration with kubelet failed") >= 2
	})
	if n := r.logs.count("registered with kubelet"); n != 0 {
		t.Fatalf("registered %d times without a kubelet", n)
	}
	r.startKubelet(t)
	reg, err := r.kubelet.WaitRegistered(ctxT(t), gpuRes, 1)
	if err != nil {
		t.Fatal(err)
	}
	if reg.Version != pluginapi.Version || !reg.Options.GetPreferredAllocationAvailable || reg.Options.PreStartRequired {
		t.Fatalf("registration = %v", reg)
	}
	devs, err := watch(t, r.client(t, gpuRes, 1)).WaitFor(ctxT(t), kubeletstub.Count(8, pluginapi.Healthy))
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range devs {
		wantNUMA := int64(i / 4) // dgx-h100: GPUs 0-3 on NUMA 0, 4-7 on NUMA 1
		if d.ID != r.uuid(i) || d.Topology == nil || len(d.Topology.Nodes) != 1 || d.Topology.Nodes[0].ID != wantNUMA {
			t.Errorf("device %d = %v, want %s on NUMA node %d", i, d, r.uuid(i), wantNUMA)
		}
	}
}

func TestReregisters(t *testing.T) {
	tests := []struct {
		name    string
		disrupt func(t *testing.T, r *rig)
	}{
		{name: "kubelet restart", disrupt: func(t *testing.T, r *rig) {
			if err := r.kubelet.Restart(); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "own socket deleted", disrupt: func(t *testing.T, r *rig) {
			if err := os.Remove(filepath.Join(r.dir, r.kubelet.Registrations(gpuRes)[0].Endpoint)); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "kubelet socket recreated, plugin socket kept", disrupt: func(t *testing.T, r *rig) {
			r.kubelet.Stop()
			r.startKubelet(t)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := startRig(t, "dgx-h100", true)
			if _, err := watch(t, r.client(t, gpuRes, 1)).WaitFor(ctxT(t), kubeletstub.Count(8, pluginapi.Healthy)); err != nil {
				t.Fatal(err)
			}
			k := r.kubelet
			before := len(k.Registrations(gpuRes))
			tc.disrupt(t, r)
			if r.kubelet != k {
				before = 0 // a new kubelet has seen no registration yet
			}
			if _, err := r.kubelet.WaitRegistered(ctxT(t), gpuRes, before+1); err != nil {
				t.Fatal(err)
			}
			// The registered endpoint serves: a fresh ListAndWatch sees all GPUs.
			c := r.client(t, gpuRes, before+1)
			if _, err := watch(t, c).WaitFor(ctxT(t), kubeletstub.Count(8, pluginapi.Healthy)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestKubeletRestartRegistersOncePerStart restarts the kubelet five times:
// each start gets exactly one registration of the resource, none refused as
// "already connected" (which makes the kubelet drop the live plugin too),
// and the endpoint it got serves every GPU. The socket-created event, the
// 200ms poll and the plugin's re-serve all fire on each restart.
func TestKubeletRestartRegistersOncePerStart(t *testing.T) {
	r := startRig(t, "dgx-h100", true)
	if _, err := watch(t, r.client(t, gpuRes, 1)).WaitFor(ctxT(t), kubeletstub.Count(8, pluginapi.Healthy)); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 5; i++ {
		if err := r.kubelet.Restart(); err != nil {
			t.Fatal(err)
		}
		if _, err := r.kubelet.WaitRegistered(ctxT(t), gpuRes, i+1); err != nil {
			t.Fatalf("restart %d: %v", i, err)
		}
		// Every trigger has fired well within 5 polls; a second
		// registration would be in by then.
		time.Sleep(time.Second)
		if n := len(r.kubelet.Registrations(gpuRes)); n != i+1 {
			t.Fatalf("restart %d: %d registrations in all, want %d (one per kubelet start)", i, n, i+1)
		}
		if refused := r.kubelet.Refused(""); len(refused) > 0 {
			t.Fatalf("restart %d: the kubelet refused %d registrations as already connected, the first of %s", i, len(refused), refused[0].ResourceName)
		}
	}
	if _, err := watch(t, r.client(t, gpuRes, 6)).WaitFor(ctxT(t), kubeletstub.Count(8, pluginapi.Healthy)); err != nil {
		t.Fatal(err)
	}
}

func TestXidMakesUnhealthyThenRecovers(t *testing.T) {
	r := startRig(t, "dgx-h100", true)
	mon := discovery.NewHealthMonitor(r.node, discovery.HealthConfig{RecoveryPeriod: 2 * time.Second, WaitTimeout: 50 * time.Millisecond}, r.src.SetHealth, nil)
	testwait.Run(t, "health monitor", mon.Run)

	c := r.client(t, gpuRes, 1)
	w := watch(t, c)
	if _, err := w.WaitFor(ctxT(t), kubeletstub.Count(8, pluginapi.Healthy)); err != nil {
		t.Fatal(err)
	}
	bad := r.uuid(2)
	unhealthy := func(devs []*pluginapi.Device) bool { return kubeletstub.HealthOf(devs, bad) == pluginapi.Unhealthy }
	// The monitor registers its events asynchronously: repeat the Xid until it lands.
	var injected time.Time
	testwait.For(t, waitTimeout, "xid 48 to make GPU 2 unhealthy", func() bool {
		injected = time.Now()
		if err := r.node.InjectXid(2, 48); err != nil {
			t.Fatal(err)
		}
		wctx, wcancel := context.WithTimeout(t.Context(), time.Second)
		defer wcancel()
		_, err := w.WaitFor(wctx, unhealthy)
		return err == nil
	})
	t.Logf("unhealthy pushed %v after the xid", time.Since(injected))
	devs := w.Lists()[len(w.Lists())-1]
	for _, d := range devs {
		if d.ID != bad && d.Health != pluginapi.Healthy {
			t.Errorf("device %s is %s, want Healthy", d.ID, d.Health)
		}
	}
	_, err := c.AllocateIDs(ctxT(t), []string{r.uuid(1), bad})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), bad) {
		t.Fatalf("Allocate(unhealthy) = %v, want FailedPrecondition naming %s", err, bad)
	}
	if _, err := w.WaitFor(ctxT(t), kubeletstub.Count(8, pluginapi.Healthy)); err != nil {
		t.Fatalf("GPU did not recover: %v", err)
	}
	if _, err := c.AllocateIDs(ctxT(t), []string{bad}); err != nil {
		t.Fatalf("Allocate(recovered) = %v", err)
	}
}

func TestPreferredAllocation(t *testing.T) {
	tests := []struct {
		name    string
		profile string
		avail   []int // GPU indices available
		must    []int
		size    int
		check   func(t *testing.T, r *rig, got []string)
	}{
		{name: "pcie pair shares a PCIe switch", profile: "pcie-l40s", avail: []int{0, 1, 2, 3}, size: 2,
			check: samePCIeSwitch},
		{name: "pcie pair with must-include takes its switch peer", profile: "pcie-l40s", avail: []int{0, 1, 2, 3}, must: []int{2}, size: 2,
			check: func(t *testing.T, r *rig, got []string) {
				if want := []string{r.uuid(2), r.uuid(3)}; !slices.Equal(got, want) {
					t.Errorf("got %v, want %v", got, want)
				}
			}},
		{name: "pcie pair avoids a split switch", profile: "pcie-l40s", avail: []int{0, 2, 3}, size: 2,
			check: samePCIeSwitch},
		{name: "dgx four of eight over NVLink", profile: "dgx-h100", avail: []int{0, 1, 2, 3, 4, 5, 6, 7}, must: []int{5}, size: 4,
			check: allNVLinked},
		{name: "dgx from a partial node", profile: "dgx-h100", avail: []int{1, 3, 4, 6}, size: 3, check: allNVLinked},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := startRig(t, tc.profile, true)
			c := r.client(t, gpuRes, 1)
			var avail, must []string
			for _, i := range tc.avail {
				avail = append(avail, r.uuid(i))
			}
			for _, i := range tc.must {
				must = append(must, r.uuid(i))
			}
			got, err := c.Preferred(ctxT(t), avail, must, tc.size)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tc.size {
				t.Fatalf("got %d devices %v, want %d", len(got), got, tc.size)
			}
			for _, id := range got {
				if !slices.Contains(avail, id) {
					t.Errorf("%s was not available", id)
				}
			}
			for _, id := range must {
				if !slices.Contains(got, id) {
					t.Errorf("must-include %s missing from %v", id, got)
				}
			}
			tc.check(t, r, got)
		})
	}
}

// linkLevel returns the inventory's link level between two GPUs.
func linkLevel(r *rig, a, b string) gpu.LinkLevel {
	inv, _ := r.src.Inventory()
	for _, l := range inv.Links {
		if (l.A == a && l.B == b) || (l.A == b && l.B == a) {
			return l.Level
		}
	}
	return gpu.LinkUnknown
}

func samePCIeSwitch(t *testing.T, r *rig, got []string) {
	if lvl := linkLevel(r, got[0], got[1]); lvl != gpu.LinkPIX {
		t.Errorf("pair %v is linked by %v, want PIX (one PCIe switch)", got, lvl)
	}
}

func allNVLinked(t *testing.T, r *rig, got []string) {
	for i := range got {
		for j := i + 1; j < len(got); j++ {
			if lvl := linkLevel(r, got[i], got[j]); lvl != gpu.LinkNVLink {
				t.Errorf("%s-%s linked by %v, want NVLink", got[i], got[j], lvl)
			}
		}
	}
}

func TestBadRequests(t *testing.T) {
	r := startRig(t, "dgx-h100", true)
	c := r.client(t, gpuRes, 1)
	tests := []struct {
		name     string
		call     func() error
		wantCode codes.Code
		wantIn   string
	}{
		{name: "allocate unknown device", wantCode: codes.InvalidArgument, wantIn: "GPU-nope",
			call: func() error { _, err := c.AllocateIDs(ctxT(t), []string{r.uuid(0), "GPU-nope"}); return err }},
		{name: "allocate replica of unshared GPU", wantCode: codes.InvalidArgument, wantIn: timeslice.ReplicaID(r.uuid(0), 0),
			call: func() error {
				_, err := c.AllocateIDs(ctxT(t), []string{timeslice.ReplicaID(r.uuid(0), 0)})
				return err
			}},
		{name: "allocate empty container", wantCode: codes.InvalidArgument, wantIn: "no device",
			call: func() error { _, err := c.AllocateIDs(ctxT(t), []string{}); return err }},
		{name: "preferred unknown device", wantCode: codes.InvalidArgument, wantIn: "GPU-nope",
			call: func() error { _, err := c.Preferred(ctxT(t), []string{r.uuid(0), "GPU-nope"}, nil, 1); return err }},
		{name: "preferred more than available", wantCode: codes.InvalidArgument, wantIn: "allocation size 3",
			call: func() error { _, err := c.Preferred(ctxT(t), []string{r.uuid(0), r.uuid(1)}, nil, 3); return err }},
		{name: "preferred must-include not available", wantCode: codes.InvalidArgument, wantIn: r.uuid(4),
			call: func() error {
				_, err := c.Preferred(ctxT(t), []string{r.uuid(0), r.uuid(1)}, []string{r.uuid(4)}, 2)
				return err
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if status.Code(err) != tc.wantCode || !strings.Contains(status.Convert(err).Message(), tc.wantIn) {
				t.Fatalf("err = %v, want %v naming %q", err, tc.wantCode, tc.wantIn)
			}
		})
	}
	// Nothing was allocated by the failures: a good request still works.
	resp, err := c.AllocateIDs(ctxT(t), []string{r.uuid(0)})
	if err != nil || len(resp.ContainerResponses) != 1 {
		t.Fatalf("Allocate = %v, %v", resp, err)
	}
}

func TestReplicas(t *testing.T) {
	sharing := timeslice.Config{Devices: map[string]timeslice.Sharing{
		"0": {Replicas: 4, LimitMemory: true},
		"1": {Replicas: 2},
	}}
	r := startRig(t, "dgx-h100", true, func(c *deviceplugin.Config) { c.Sharing = sharing })
	shared := r.client(t, gpuRes+".shared", 1)
	devs, err := watch(t, shared).WaitFor(ctxT(t), kubeletstub.Count(6, pluginapi.Healthy))
	if err != nil {
		t.Fatal(err)
	}
	rep := func(gpu, n int) string { return timeslice.ReplicaID(r.uuid(gpu), n) }
	wantIDs := []string{rep(0, 0), rep(0, 1), rep(0, 2), rep(0, 3), rep(1, 0), rep(1, 1)}
	if got := kubeletstub.IDs(devs); !slices.Equal(got, wantIDs) {
		t.Fatalf("shared devices = %v, want %v", got, wantIDs)
	}
	if _, err := watch(t, r.client(t, gpuRes, 1)).WaitFor(ctxT(t), kubeletstub.Count(6, pluginapi.Healthy)); err != nil {
		t.Fatalf("whole GPUs: %v", err)
	}

	t.Run("preferred", func(t *testing.T) {
		tests := []struct {
			name  string
			avail []string
			size  int
			want  []string
		}{
			{name: "pair on one GPU, the one it fills", avail: wantIDs, size: 2, want: []string{rep(1, 0), rep(1, 1)}},
			{name: "already shared GPU before untouched", avail: []string{rep(0, 1), rep(0, 2), rep(0, 3), rep(1, 0), rep(1, 1)}, size: 2,
				want: []string{rep(0, 1), rep(0, 2)}},
			{name: "three on the GPU that holds three", avail: wantIDs, size: 3, want: []string{rep(0, 0), rep(0, 1), rep(0, 2)}},
			{name: "more than one GPU holds: fewest GPUs", avail: wantIDs, size: 5,
				want: []string{rep(0, 0), rep(0, 1), rep(0, 2), rep(0, 3), rep(1, 0)}},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				got, err := shared.Preferred(ctxT(t), tc.avail, nil, tc.size)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, tc.want) {
					t.Fatalf("got %v, want %v", got, tc.want)
				}
			})
		}
	})

	t.Run("allocate two replicas of one GPU", func(t *testing.T) {
		resp, err := shared.AllocateIDs(ctxT(t), []string{rep(0, 1), rep(0, 2)})
		if err != nil {
			t.Fatal(err)
		}
		cr := resp.ContainerResponses[0]
		inv, _ := r.src.Inventory()
		memMiB := inv.GPUs[0].MemoryBytes >> 20
		wantEnv := map[string]string{
			"NVIDIA_VISIBLE_DEVICES":            r.uuid(0),
			"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50",
			"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT":  "0=" + itoa(2*(memMiB/4)) + "M",
		}
		if !mapsEqual(cr.Envs, wantEnv) {
			t.Errorf("envs = %v, want %v", cr.Envs, wantEnv)
		}
		if len(cr.CdiDevices) != 1 || cr.CdiDevices[0].Name != "nvidia.com/gpu="+r.uuid(0) {
			t.Errorf("CDI devices = %v, want the one GPU", cr.CdiDevices)
		}
	})

	t.Run("without renaming replicas share the gpu resource", func(t *testing.T) {
		r := startRig(t, "dgx-h100", true, func(c *deviceplugin.Config) { c.Sharing, c.RenameShared = sharing, false })
		devs, err := watch(t, r.client(t, gpuRes, 1)).WaitFor(ctxT(t), kubeletstub.Count(12, pluginapi.Healthy))
		if err != nil {
			t.Fatal(err)
		}
		if ids := kubeletstub.IDs(devs); !slices.Contains(ids, rep(1, 1)) || !slices.Contains(ids, r.uuid(7)) || slices.Contains(ids, r.uuid(0)) {
			t.Fatalf("devices = %v, want GPU 0 and 1 as replicas only", ids)
		}
	})
}

func TestMIGMixedReadvertisesAndCDI(t *testing.T) {
	r := startRig(t, "dgx-h100", true, func(c *deviceplugin.Config) { c.MIGStrategy = deviceplugin.MIGMixed })
	whole := watch(t, r.client(t, gpuRes, 1))
	if _, err := whole.WaitFor(ctxT(t), kubeletstub.Count(8, pluginapi.Healthy)); err != nil {
		t.Fatal(err)
	}
	enableMIG(t, r.node, 0, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, 7)
	r.rediscover(t)
	inv, _ := r.src.Inventory()
	if len(inv.GPUs[0].MIGDevices) != 7 {
		t.Fatalf("GPU 0 has %d MIG devices, want 7", len(inv.GPUs[0].MIGDevices))
	}
	migRes := "nvidia.com/mig-" + inv.GPUs[0].MIGDevices[0].Profile
	mig := r.client(t, migRes, 1)
	migW := watch(t, mig)
	devs, err := migW.WaitFor(ctxT(t), kubeletstub.Count(7, pluginapi.Healthy))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := whole.WaitFor(ctxT(t), kubeletstub.Count(7, pluginapi.Healthy)); err != nil {
		t.Fatalf("whole GPUs after MIG: %v", err)
	}

	t.Run("preferred packs slices", func(t *testing.T) {
		got, err := mig.Preferred(ctxT(t), kubeletstub.IDs(devs), nil, 3)
		if err != nil || len(got) != 3 {
			t.Fatalf("Preferred = %v, %v", got, err)
		}
	})

	t.Run("cdi spec valid and names every allocated device", func(t *testing.T) {
		path := filepath.Join(r.cdiDir, deviceplugin.CDISpecName)
		spec, err := cdi.ReadSpec(path, 0) // the library's own parser and validation
		if err != nil {
			t.Fatal(err)
		}
		if spec.GetVendor() != "nvidia.com" || spec.GetClass() != "gpu" {
			t.Fatalf("spec kind = %s", spec.Kind)
		}
		cache, err := cdi.NewCache(cdi.WithSpecDirs(r.cdiDir), cdi.WithAutoRefresh(false))
		if err != nil {
			t.Fatal(err)
		}
		if errs := cache.GetErrors(); len(errs) != 0 {
			t.Fatalf("CDI cache errors: %v", errs)
		}
		entries, _ := os.ReadDir(r.cdiDir)
		if len(entries) != 1 {
			t.Errorf("CDI dir holds %d files, want only the spec (no temp files)", len(entries))
		}
		wc := r.client(t, gpuRes, 1)
		for _, tc := range []struct {
			name     string
			c        *kubeletstub.Client
			ids      []string
			wantNode string
		}{
			{name: "mig slice", c: mig, ids: []string{devs[0].ID}, wantNode: "/dev/nvidia-caps/nvidia-cap"},
			{name: "whole gpu", c: wc, ids: []string{r.uuid(3)}, wantNode: "/dev/nvidia3"},
		} {
			resp, err := tc.c.AllocateIDs(ctxT(t), tc.ids)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			cr := resp.ContainerResponses[0]
			if len(cr.CdiDevices) != 1 || cr.Envs["NVIDIA_VISIBLE_DEVICES"] != tc.ids[0] {
				t.Fatalf("%s: response %v", tc.name, cr)
			}
			d := cache.GetDevice(cr.CdiDevices[0].Name)
			if d == nil {
				t.Fatalf("%s: CDI device %s not in the spec", tc.name, cr.CdiDevices[0].Name)
			}
			var nodes []string
			for _, n := range d.ContainerEdits.DeviceNodes {
				nodes = append(nodes, n.Path)
			}
			if !slices.ContainsFunc(nodes, func(p string) bool { return strings.HasPrefix(p, tc.wantNode) }) {
				t.Errorf("%s: device nodes %v, want %s", tc.name, nodes, tc.wantNode)
			}
		}
	})

	t.Run("MIG removed: resource emptied, GPU back", func(t *testing.T) {
		disableMIG(t, r, 0)
		r.rediscover(t)
		if _, err := migW.WaitFor(ctxT(t), kubeletstub.Count(0, pluginapi.Healthy)); err != nil {
			t.Fatal(err)
		}
		if _, err := whole.WaitFor(ctxT(t), kubeletstub.Count(8, pluginapi.Healthy)); err != nil {
			t.Fatal(err)
		}
	})
}

func disableMIG(t *testing.T, r *rig, index int) {
	t.Helper()
	d := r.node.Device(index)
	info, ret := d.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	gis, ret := d.GetGpuInstances(&info)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	for _, gi := range gis {
		ciInfo, ret := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
		cis, _ := gi.GetComputeInstances(&ciInfo)
		for _, ci := range cis {
			if ret := ci.Destroy(); ret != nvml.SUCCESS {
				t.Fatal(ret)
			}
		}
		if ret := gi.Destroy(); ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
	}
	if ret, _ := d.SetMigMode(nvml.DEVICE_MIG_DISABLE); ret == nvml.ERROR_RESET_REQUIRED {
		if err := r.node.ResetGPU(index); err != nil {
			t.Fatal(err)
		}
	} else if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

func mapsEqual(a, b map[string]string) bool { return maps.Equal(a, b) }
