package enforce

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpud/gpud/internal/testkit/promtooltest"
	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/dra"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/memlimit"
	"github.com/gpud/gpud/pkg/podresources"
	"github.com/gpud/gpud/pkg/simnode"
	"github.com/gpud/gpud/pkg/timeslice"
	"github.com/gpud/gpud/pkg/usage"
)

const gib = uint64(1) << 30

// limitsNode is a simulated dgx-h100 (80 GiB GPUs) with driver version
// driver, its inventory, a memory limit manager on a cgroup2 tree in a
// temp dir, and that tree.
type limitsNode struct {
	n    *simnode.Node
	inv  gpu.Inventory
	devs []nvml.Device
	m    *memlimit.Manager
	root string
}

func newLimitsNode(t *testing.T, driver string, mps bool) limitsNode {
	t.Helper()
	n := simnode.NewBuiltin("dgx-h100", simnode.WithDriverVersion(driver))
	t.Cleanup(n.Close)
	inv, err := discovery.New(n, "node-a", nil).Inventory()
	if err != nil {
		t.Fatal(err)
	}
	count, _ := n.DeviceGetCount()
	var devs []nvml.Device
	var mdevs []memlimit.Device
	for i := range count {
		d, ret := n.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
		devs, mdevs = append(devs, d), append(mdevs, d)
	}
	root := t.TempDir()
	m, err := memlimit.New(memlimit.Config{CgroupRoot: root, DriverVersion: driver, MPS: mps, Devices: mdevs})
	if err != nil {
		t.Fatal(err)
	}
	return limitsNode{n: n, inv: inv, devs: devs, m: m, root: root}
}

// mkdirs creates the container cgroups rels under root.
func mkdirs(t *testing.T, root string, rels ...string) {
	t.Helper()
	for _, rel := range rels {
		if err := os.MkdirAll(filepath.Join(root, rel), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// limitsOf is GPU i's limits on the cgroup rel under root.
func (ln limitsNode) limitsOf(i int, rel string) (nvml.MemoryLimits_v1, nvml.Return) {
	return ln.devs[i].GetMemoryLimits_v1(filepath.Join(ln.root, rel))
}

// TestMemoryLimitsAtStart: a container holding a quarter of an 80 GiB GPU
// (a DRA claim's 20 GiB of memory capacity, or device plugin replica 1 of
// 4 with limitMemory) gets soft = hard = its share on exactly its own
// cgroup when it starts, before any poll; one whose claim's opaque config
// or sharing config sets a 30 GiB limit on its 20 GiB request gets soft 20
// GiB, hard 30 GiB. Its process cannot allocate past the hard limit, its
// pod's other container and its pod's cgroup get no limits; the limits go
// when the container is removed.
func TestMemoryLimitsAtStart(t *testing.T) {
	rel := "/kubepods/burstable/pod" + uidA + "/" + cid('f')
	other := "/kubepods/burstable/pod" + uidA + "/" + cid('o')
	podRel := "/kubepods/burstable/pod" + uidA
	tests := []struct {
		name string
		cfg  func(ln limitsNode, c *Config)
		want func(ln limitsNode) (soft, hard uint64)
	}{
		{name: "dra quarter", cfg: func(_ limitsNode, c *Config) {
			frac := claim("frac", dra.DriverName, dra.GPUDeviceName(2))
			frac.ShareID = "0b5e"
			whole := claim("whole", dra.DriverName, dra.GPUDeviceName(3))
			c.DRA = &DRA{Resources: &fakeResources{r: podresources.Resources{Claims: []podresources.ClaimDevice{frac, whole}}},
				Prepared: func() ([]ClaimRef, error) {
					return []ClaimRef{{Namespace: "ml", Name: "train-frac", Fractions: []ClaimFraction{{Device: "gpu-2", ShareID: "0b5e", MemoryBytes: 20 * gib}}},
						{Namespace: "ml", Name: "train-whole"}}, nil
				}}
		}, want: func(limitsNode) (uint64, uint64) { return 20 * gib, 20 * gib }},
		{name: "dra borrowing, from the driver's checkpoint", cfg: func(ln limitsNode, c *Config) {
			frac := claim("frac", dra.DriverName, dra.GPUDeviceName(2))
			frac.ShareID = "0b5e"
			c.DRA = &DRA{Resources: &fakeResources{r: podresources.Resources{Claims: []podresources.ClaimDevice{frac, claim("whole", dra.DriverName, dra.GPUDeviceName(3))}}},
				Prepared: CheckpointClaims(prepareBorrowing(t, ln, "30Gi"))}
		}, want: func(limitsNode) (uint64, uint64) { return 20 * gib, 30 * gib }},
		{name: "device plugin replica", cfg: func(ln limitsNode, c *Config) {
			c.Allocations = &fakeAllocs{as: []usage.Assignment{
				{Namespace: "ml", Pod: "train", Container: "frac", ResourceName: "nvidia.com/gpu.shared", DeviceIDs: []string{ln.inv.GPUs[2].UUID + "::1"}},
				{Namespace: "ml", Pod: "train", Container: "whole", ResourceName: "nvidia.com/gpu", DeviceIDs: []string{ln.inv.GPUs[3].UUID}},
			}}
			sharing := timeslice.Config{Devices: map[string]timeslice.Sharing{"2": {Replicas: 4, LimitMemory: true}}}
			c.Sharing = func() timeslice.Config { return sharing }
		}, want: func(ln limitsNode) (uint64, uint64) {
			q := (ln.inv.GPUs[2].MemoryBytes >> 20) / 4 << 20
			return q, q
		}},
		{name: "device plugin share borrowing", cfg: func(ln limitsNode, c *Config) {
			c.Allocations = &fakeAllocs{as: []usage.Assignment{
				{Namespace: "ml", Pod: "train", Container: "frac", ResourceName: "nvidia.com/gpu.shared", DeviceIDs: []string{ln.inv.GPUs[2].UUID + "::0"}},
				{Namespace: "ml", Pod: "train", Container: "whole", ResourceName: "nvidia.com/gpu", DeviceIDs: []string{ln.inv.GPUs[3].UUID}},
			}}
			sharing := timeslice.Config{Devices: map[string]timeslice.Sharing{"2": {Shares: []timeslice.Share{{MemoryMiB: 20 << 10, MemoryLimitMiB: 30 << 10}, {MemoryMiB: 20 << 10}}}}}
			c.Sharing = func() timeslice.Config { return sharing }
		}, want: func(limitsNode) (uint64, uint64) { return 20 * gib, 30 * gib }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ln := newLimitsNode(t, "615.40.01", true)
			if got := ln.inv.GPUs[2].MemoryBytes; got < 79*gib || got > 81*gib {
				t.Fatalf("GPU 2 has %d bytes, want an 80 GiB GPU", got)
			}
			mkdirs(t, ln.root, rel, other)
			cfg := Config{Unified: ln.root, Inventory: func() gpu.Inventory { return ln.inv }, MemoryLimits: ln.m,
				Pods: fakePods{uidA: {Namespace: "ml", Name: "train", UID: uidA}}, Containers: fakeContainers{}}
			tc.cfg(ln, &cfg)
			var logs bytes.Buffer
			e, err := New(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
			if err != nil {
				t.Fatal(err)
			}
			c := ContainerInfo{Namespace: "ml", Pod: "train", Container: "frac", CgroupsPath: rel}
			e.ContainerStarting(t.Context(), c)
			e.ContainerStarting(t.Context(), ContainerInfo{Namespace: "ml", Pod: "train", Container: "whole", CgroupsPath: other})
			soft, want := tc.want(ln)
			if l, ret := ln.limitsOf(2, rel); ret != nvml.SUCCESS || l.SoftLimit != soft || l.HardLimit != want {
				t.Fatalf("GPU 2 on %s: %+v, %v; want soft %d, hard %d", rel, l, ret, soft, want)
			}
			for _, r := range []string{other, podRel} {
				for i := range ln.devs {
					if _, ret := ln.limitsOf(i, r); ret != nvml.ERROR_NOT_FOUND {
						t.Errorf("GPU %d on %s: %v, want no limits (ERROR_NOT_FOUND)", i, r, ret)
					}
				}
			}
			for _, i := range []int{0, 1, 3} {
				if _, ret := ln.limitsOf(i, rel); ret != nvml.ERROR_NOT_FOUND {
					t.Errorf("GPU %d on %s: %v, want no limits", i, rel, ret)
				}
			}
			// The driver holds the container to the hard limit (a
			// borrower holds more than its request).
			if err := ln.n.StartProcess(2, simnode.ProcessSpec{PID: 10, MemoryBytes: want - gib, Cgroup: filepath.Join(ln.root, rel)}); err != nil {
				t.Fatal(err)
			}
			if err := ln.n.Allocate(10, 2*gib); !errors.Is(err, nvml.ERROR_MEMORY) {
				t.Errorf("allocating 1 GiB past the limit: %v, want ERROR_MEMORY", err)
			}
			if !strings.Contains(logs.String(), `msg="gpu memory limits set"`) || !strings.Contains(logs.String(), "container=ml/train/frac") {
				t.Errorf("log lacks the set, naming the container:\n%s", logs.String())
			}
			// A poll leaves the limits as they are; removal clears them.
			e.Reconcile(t.Context())
			e.ContainerRemoved(c)
			if _, ret := ln.limitsOf(2, rel); ret != nvml.ERROR_NOT_FOUND {
				t.Errorf("GPU 2 on %s after removal: %v, want no limits", rel, ret)
			}
			if err := ln.n.Allocate(10, 2*gib); err != nil {
				t.Errorf("allocation after removal: %v", err)
			}
		})
	}
}

// prepareBorrowing prepares, with pkg/dra's Preparer, a claim ml/train-frac
// of 20 GiB of GPU 2 (share 0b5e) whose opaque config sets memoryLimit,
// and returns the state dir holding the driver's checkpoint.
func prepareBorrowing(t *testing.T, ln limitsNode, limit string) string {
	t.Helper()
	dir := t.TempDir()
	g := ln.inv.GPUs[2]
	p, err := dra.NewPreparer(dra.PreparerConfig{NodeName: "node-a", StateDir: dir, CDIDir: t.TempDir(),
		Devices: func() map[string]dra.DeviceRef {
			return map[string]dra.DeviceRef{"gpu-2": {Name: "gpu-2", Type: dra.TypeGPU, GPUUUID: g.UUID, GPUIndex: 2, MemoryBytes: g.MemoryBytes, Shareable: true}}
		}})
	if err != nil {
		t.Fatal(err)
	}
	share := types.UID("0b5e")
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "train-frac", UID: "u-frac"}}
	c.Status.Allocation = &resourceapi.AllocationResult{}
	c.Status.Allocation.Devices.Results = []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: dra.DriverName, Pool: "node-a", Device: "gpu-2",
		ShareID: &share, ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{dra.CapacityMemory: resource.MustParse("20Gi")}}}
	c.Status.Allocation.Devices.Config = []resourceapi.DeviceAllocationConfiguration{{Source: resourceapi.AllocationConfigSourceClaim,
		DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: dra.DriverName,
			Parameters: runtime.RawExtension{Raw: []byte(`{"apiVersion":"gpu.gpud.io/v1alpha1","kind":"GPUConfig","memoryLimit":"` + limit + `"}`)}}}}}
	res, err := p.Prepare(t.Context(), []*resourceapi.ResourceClaim{c})
	if err != nil || res[c.UID].Err != nil {
		t.Fatalf("Prepare() = %v, %v", res, err)
	}
	return dir
}

// TestMemoryLimitsOlderDriver: on a driver before r615 the GPUs are in MPS
// mode (with MPS daemons) or watchdog mode (without) with the reason, and
// a fraction's container starts with nothing set and nothing failed.
func TestMemoryLimitsOlderDriver(t *testing.T) {
	tests := []struct {
		name string
		mps  bool
		want memlimit.Mode
	}{
		{name: "mps", mps: true, want: memlimit.ModeMPS},
		{name: "watchdog", want: memlimit.ModeWatchdog},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ln := newLimitsNode(t, "550.54.15", tc.mps)
			for _, d := range ln.m.Decisions() {
				if d.Mode != tc.want || !strings.Contains(d.Reason, "driver 550.54.15 predates r615") {
					t.Errorf("%s: %s (%s), want %s because the driver predates r615", d.UUID, d.Mode, d.Reason, tc.want)
				}
			}
			if s := ln.m.Status(); !strings.Contains(s, string(tc.want)+" on GPUs 0,1,2,3,4,5,6,7 (") || !strings.Contains(s, "predates r615") {
				t.Errorf("Status() = %q, want all 8 GPUs in %s with the reason", s, tc.want)
			}
			rel := "/kubepods/burstable/pod" + uidA + "/" + cid('f')
			mkdirs(t, ln.root, rel)
			reg := prometheus.NewRegistry()
			metrics, err := NewMetrics(reg)
			if err != nil {
				t.Fatal(err)
			}
			frac := claim("frac", dra.DriverName, dra.GPUDeviceName(2))
			frac.ShareID = "0b5e"
			e, err := New(Config{Unified: ln.root, Inventory: func() gpu.Inventory { return ln.inv }, MemoryLimits: ln.m, Metrics: metrics,
				DRA: &DRA{Resources: &fakeResources{r: podresources.Resources{Claims: []podresources.ClaimDevice{frac}}},
					Prepared: func() ([]ClaimRef, error) {
						return []ClaimRef{{Namespace: "ml", Name: "train-frac", Fractions: []ClaimFraction{{Device: "gpu-2", ShareID: "0b5e", MemoryBytes: 20 * gib}}}}, nil
					}},
				Pods: fakePods{uidA: {Namespace: "ml", Name: "train", UID: uidA}}, Containers: fakeContainers{}}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			e.ContainerStarting(t.Context(), ContainerInfo{Namespace: "ml", Pod: "train", Container: "frac", CgroupsPath: rel})
			if _, ret := ln.limitsOf(2, rel); ret != nvml.ERROR_NOT_SUPPORTED {
				t.Errorf("GPU 2: %v, want ERROR_NOT_SUPPORTED (no driver limits)", ret)
			}
			if got := testutil.ToFloat64(metrics.sets.WithLabelValues("failure")); got != 0 {
				t.Errorf("failures = %v, want 0: a GPU without driver limits is not a failure", got)
			}
			if s := e.Status(); strings.Contains(s, "not set") {
				t.Errorf("Status() = %q, want no failure", s)
			}
		})
	}
}

// TestMemoryLimitsSetFails: the driver refuses the container's limit: the
// container still starts (the hook returns), the failure is logged once,
// counted, and shown in Status; the next poll retries and sets the limit
// once the driver takes it, and the count of unlimited containers drops.
func TestMemoryLimitsSetFails(t *testing.T) {
	ln := newLimitsNode(t, "615.40.01", true)
	rel := "/kubepods/burstable/pod" + uidA + "/" + cid('f')
	mkdirs(t, ln.root, rel)
	reg := prometheus.NewRegistry()
	metrics, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	frac := claim("frac", dra.DriverName, dra.GPUDeviceName(2))
	frac.ShareID = "0b5e"
	var logs bytes.Buffer
	events := &fakeLimitEvents{}
	e, err := New(Config{Unified: ln.root, Inventory: func() gpu.Inventory { return ln.inv }, MemoryLimits: ln.m, Metrics: metrics, Events: events,
		DRA: &DRA{Resources: &fakeResources{r: podresources.Resources{Claims: []podresources.ClaimDevice{frac}}},
			Prepared: func() ([]ClaimRef, error) {
				return []ClaimRef{{Namespace: "ml", Name: "train-frac", Fractions: []ClaimFraction{{Device: "gpu-2", ShareID: "0b5e", MemoryBytes: 20 * gib}}}}, nil
			}},
		Pods: fakePods{uidA: {Namespace: "ml", Name: "train", UID: uidA}}, Containers: fakeContainers{}}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	gpu2 := 2
	ln.n.InjectFault("SetMemoryLimits_v1", simnode.FaultSpec{GPU: &gpu2, Times: -1, Return: nvml.ERROR_NO_PERMISSION})
	e.ContainerStarting(t.Context(), ContainerInfo{Namespace: "ml", Pod: "train", PodUID: uidA, Container: "frac", CgroupsPath: rel})
	e.Reconcile(t.Context())
	wantFailed := "failed ml/train/" + uidA + "/frac [" + ln.inv.GPUs[2].UUID + "]"
	if len(events.got) != 1 || !strings.HasPrefix(events.got[0], wantFailed) || !strings.Contains(events.got[0], nvml.ERROR_NO_PERMISSION.Error()) {
		t.Errorf("events %q, want one %q with the driver's error (once, not per retry)", events.got, wantFailed)
	}
	if _, ret := ln.limitsOf(2, rel); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("GPU 2 after a refused Set: %v, want no limits", ret)
	}
	if n := strings.Count(logs.String(), `msg="gpu memory limits not set`); n != 1 || !strings.Contains(logs.String(), "ERROR_NO_PERMISSION") && !strings.Contains(logs.String(), nvml.ERROR_NO_PERMISSION.Error()) {
		t.Errorf("%d failure warnings, want 1 with the driver's error:\n%s", n, logs.String())
	}
	if got := testutil.ToFloat64(metrics.sets.WithLabelValues("failure")); got != 1 {
		t.Errorf("failures = %v, want 1 (once per container, not per retry)", got)
	}
	if got := testutil.ToFloat64(metrics.unlimited); got != 1 {
		t.Errorf("unset containers = %v, want 1", got)
	}
	if s := e.Status(); !strings.Contains(s, "gpu memory limits not set on 1 container(s)") {
		t.Errorf("Status() = %q, want the failure", s)
	}

	ln.n.ClearFaults()
	e.Reconcile(t.Context())
	if l, ret := ln.limitsOf(2, rel); ret != nvml.SUCCESS || l.HardLimit != 20*gib {
		t.Errorf("GPU 2 after the retry: %+v, %v; want hard 20 GiB", l, ret)
	}
	if got := testutil.ToFloat64(metrics.unlimited); got != 0 {
		t.Errorf("unset containers after the retry = %v, want 0", got)
	}
	if got := testutil.ToFloat64(metrics.sets.WithLabelValues("success")); got != 1 {
		t.Errorf("successes = %v, want 1", got)
	}
	for _, kind := range []string{"soft", "hard"} {
		if got := testutil.ToFloat64(metrics.limits.WithLabelValues("ml", "train", "frac", ln.inv.GPUs[2].UUID, kind)); got != float64(20*gib) {
			t.Errorf("gpud_container_memory_limit_bytes{kind=%q} = %v, want 20 GiB", kind, got)
		}
	}
	promtoolGather(t, reg)
	wantSet := fmt.Sprintf("set ml/train/%s/frac %s soft=%d hard=%d", uidA, ln.inv.GPUs[2].UUID, 20*gib, 20*gib)
	if len(events.got) != 2 || events.got[1] != wantSet {
		t.Errorf("events %q, want the failure then %q", events.got, wantSet)
	}
	if s := e.Status(); strings.Contains(s, "not set") {
		t.Errorf("Status() = %q after the retry", s)
	}
	// The cgroup goes: the poll forgets the container and its limits.
	if err := os.RemoveAll(filepath.Join(ln.root, "kubepods")); err != nil {
		t.Fatal(err)
	}
	e.Reconcile(t.Context())
	if len(e.tracked) != 0 {
		t.Errorf("tracked after the cgroup went: %v", e.tracked)
	}
	if n := testutil.CollectAndCount(metrics.limits); n != 0 {
		t.Errorf("%d gpud_container_memory_limit_bytes series after the container went, want none", n)
	}
}

// fakeLimitEvents records what the enforcer tells the Events.
type fakeLimitEvents struct{ got []string }

func (f *fakeLimitEvents) MemoryLimitSet(ns, pod, uid, ctr, gpu string, soft, hard uint64) {
	f.got = append(f.got, fmt.Sprintf("set %s/%s/%s/%s %s soft=%d hard=%d", ns, pod, uid, ctr, gpu, soft, hard))
}

func (f *fakeLimitEvents) MemoryLimitFailed(ns, pod, uid, ctr string, gpus []string, err error) {
	f.got = append(f.got, fmt.Sprintf("failed %s/%s/%s/%s %v: %v", ns, pod, uid, ctr, gpus, err))
}

func (f *fakeLimitEvents) MemoryBorrowerEvicted(ns, pod, uid, ctr, gpu string, soft, before, after uint64) {
	f.got = append(f.got, fmt.Sprintf("evicted %s/%s/%s/%s %s soft=%d before=%d after=%d", ns, pod, uid, ctr, gpu, soft, before, after))
}

// TestMemoryLimitsUnreadableCheckpoint: when the driver's checkpoint
// cannot be read, the container with a share is counted as unlimited (and
// retried), while filters and other containers go on.
func TestMemoryLimitsUnreadableCheckpoint(t *testing.T) {
	ln := newLimitsNode(t, "615.40.01", true)
	rel := "/kubepods/burstable/pod" + uidA + "/" + cid('f')
	relB := "/kubepods/burstable/pod" + uidA + "/" + cid('b')
	mkdirs(t, ln.root, rel, relB)
	frac := claim("frac", dra.DriverName, dra.GPUDeviceName(2))
	frac.ShareID = "0b5e"
	e, err := New(Config{Unified: ln.root, Inventory: func() gpu.Inventory { return ln.inv }, MemoryLimits: ln.m,
		DRA: &DRA{Resources: &fakeResources{r: podresources.Resources{Claims: []podresources.ClaimDevice{frac, claim("whole", dra.DriverName, dra.GPUDeviceName(3))}}},
			Prepared: func() ([]ClaimRef, error) { return nil, errors.New("checkpoint corrupt") }},
		Pods: fakePods{uidA: {Namespace: "ml", Name: "train", UID: uidA}}, Containers: fakeContainers{}}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	e.ContainerStarting(t.Context(), ContainerInfo{Namespace: "ml", Pod: "train", Container: "frac", CgroupsPath: rel})
	e.ContainerStarting(t.Context(), ContainerInfo{Namespace: "ml", Pod: "train", Container: "whole", CgroupsPath: relB})
	if tr := e.tracked[rel]; tr == nil || !tr.limitsFailed {
		t.Errorf("share's container: %+v, want its limits failed", tr)
	}
	if tr := e.tracked[relB]; tr == nil || tr.limitsFailed {
		t.Errorf("whole GPU's container: %+v, want no failure", tr)
	}
}

// TestNewMetricsPromtool: the enforcer's metrics pass promtool's lint.
func TestNewMetricsPromtool(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := NewMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := NewMetrics(reg); err == nil {
		t.Error("second NewMetrics on one registry: no error")
	}
	promtoolGather(t, reg)
}

// promtoolGather runs promtool's lint on everything reg has; no finding
// is allowed.
func promtoolGather(t *testing.T, reg *prometheus.Registry) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	promtooltest.CheckMetrics(t, buf.Bytes(), func(string) bool { return false })
}

// TestMemoryLimitsPoll: without NRI the poll sets a named container's
// limits; when its replica moves to another GPU, the new GPU is limited
// and the old one cleared; a container not named yet gets none (its pod's
// fractions are not its own).
func TestMemoryLimitsPoll(t *testing.T) {
	ln := newLimitsNode(t, "615.40.01", true)
	rel := "/kubepods/burstable/pod" + uidA + "/" + cid('f')
	unnamed := "/kubepods/burstable/pod" + uidA + "/" + cid('u')
	mkdirs(t, ln.root, rel, unnamed)
	allocs := &fakeAllocs{as: []usage.Assignment{
		{Namespace: "ml", Pod: "train", Container: "frac", ResourceName: "nvidia.com/gpu.shared", DeviceIDs: []string{ln.inv.GPUs[2].UUID + "::0"}},
	}}
	sharing := timeslice.Config{Default: &timeslice.Sharing{Shares: []timeslice.Share{{MemoryMiB: 20 << 10}, {MemoryMiB: 10 << 10}}}}
	e, err := New(Config{Unified: ln.root, Inventory: func() gpu.Inventory { return ln.inv }, MemoryLimits: ln.m,
		Allocations: allocs, Sharing: func() timeslice.Config { return sharing },
		Pods: fakePods{uidA: {Namespace: "ml", Name: "train", UID: uidA}}, Containers: fakeContainers{cid('f'): {"ml", "train", "frac"}}}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	e.Reconcile(t.Context())
	if l, ret := ln.limitsOf(2, rel); ret != nvml.SUCCESS || l.SoftLimit != 20*gib || l.HardLimit != 20*gib {
		t.Fatalf("GPU 2 after a poll: %+v, %v; want 20 GiB", l, ret)
	}
	for i := range ln.devs {
		if _, ret := ln.limitsOf(i, unnamed); ret != nvml.ERROR_NOT_FOUND {
			t.Errorf("unnamed container, GPU %d: %v, want no limits", i, ret)
		}
	}
	allocs.as[0].DeviceIDs = []string{ln.inv.GPUs[4].UUID + "::1"}
	e.Reconcile(t.Context())
	if l, ret := ln.limitsOf(4, rel); ret != nvml.SUCCESS || l.HardLimit != 10*gib {
		t.Errorf("GPU 4 after the move: %+v, %v; want 10 GiB", l, ret)
	}
	if _, ret := ln.limitsOf(2, rel); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("GPU 2 after the move: %v, want cleared", ret)
	}
	allocs.as = nil
	e.Reconcile(t.Context())
	if _, ret := ln.limitsOf(4, rel); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("GPU 4 once the container holds no fraction: %v, want cleared", ret)
	}
}

// The event's limits of a GPU add the container's fractions there as the
// manager does: a hard limit of 0 is the request.
func TestLimitsOnSumsFractions(t *testing.T) {
	fs := []memlimit.Fraction{
		{GPUUUID: "GPU-a", RequestBytes: 20 * gib, LimitBytes: 30 * gib},
		{GPUUUID: "GPU-a", RequestBytes: 10 * gib},
		{GPUUUID: "GPU-b", RequestBytes: 5 * gib},
	}
	if soft, hard := limitsOn(fs, "GPU-a"); soft != 30*gib || hard != 40*gib {
		t.Errorf("GPU-a: soft %d GiB hard %d GiB, want 30 and 40", soft/gib, hard/gib)
	}
	if got := fractionGPUs(fs); !slices.Equal(got, []string{"GPU-a", "GPU-b"}) {
		t.Errorf("fractionGPUs = %v", got)
	}
}
