package dra

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/dra/prepared"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/simnode"
)

// alloc is one allocation result of this driver.
type alloc struct {
	request, pool, device string
	shareID               string
	capacity              map[resourceapi.QualifiedName]string
}

func claim(uid, name string, results ...alloc) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(uid)}}
	c.Status.Allocation = &resourceapi.AllocationResult{}
	for _, a := range results {
		r := resourceapi.DeviceRequestAllocationResult{Request: a.request, Driver: DriverName, Pool: a.pool, Device: a.device}
		if r.Request == "" {
			r.Request = "gpu"
		}
		if a.shareID != "" {
			s := types.UID(a.shareID)
			r.ShareID = &s
		}
		if a.capacity != nil {
			r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{}
			for k, v := range a.capacity {
				r.ConsumedCapacity[k] = resource.MustParse(v)
			}
		}
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, r)
	}
	return c
}

// table is a settable device table, as the driver keeps one.
type table struct {
	mu  sync.Mutex
	pub Published
}

func (t *table) devices() map[string]DeviceRef {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.pub.Devices
}

type prepEnv struct {
	t        *testing.T
	node     *simnode.Node
	name     string
	stateDir string
	cdiDir   string
	tab      *table
	mig      MIGManager
	st       NodeState
}

func newPrepEnv(t *testing.T, profile string, m MIGManager) *prepEnv {
	n, st, pub := buildSim(t, profile)
	dir := t.TempDir()
	e := &prepEnv{t: t, node: n, name: profile, stateDir: filepath.Join(dir, "plugin"), cdiDir: filepath.Join(dir, "cdi"),
		tab: &table{pub: pub}, mig: m, st: st}
	if err := os.MkdirAll(e.stateDir, 0o755); err != nil {
		t.Fatal(err)
	}
	return e
}

// preparer starts a preparer on the env's directories, as the agent does
// after a restart.
func (e *prepEnv) preparer() *Preparer {
	e.t.Helper()
	p, err := NewPreparer(PreparerConfig{NodeName: e.name, StateDir: e.stateDir, CDIDir: e.cdiDir, Devices: e.tab.devices, MIG: e.mig})
	if err != nil {
		e.t.Fatalf("NewPreparer: %v", err)
	}
	return p
}

// rediscover rebuilds the device table from the simulated node.
func (e *prepEnv) rediscover() {
	e.t.Helper()
	inv, err := discovery.New(e.node, e.name, nil).Inventory()
	if err != nil {
		e.t.Fatal(err)
	}
	e.st.Inventory = inv
	pub, err := Build(e.name, e.st)
	if err != nil {
		e.t.Fatal(err)
	}
	checkResources(e.t, e.name, pub)
	e.tab.mu.Lock()
	e.tab.pub = pub
	e.tab.mu.Unlock()
}

func prepareOne(t *testing.T, p *Preparer, c *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	t.Helper()
	res, err := p.Prepare(t.Context(), []*resourceapi.ResourceClaim{c})
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	r, ok := res[c.UID]
	if !ok || len(res) != 1 {
		t.Fatalf("Prepare result %v has no entry for %s", res, c.UID)
	}
	return r.Devices, r.Err
}

func unprepareOne(t *testing.T, p *Preparer, uid string) error {
	t.Helper()
	res, err := p.Unprepare(t.Context(), []kubeletplugin.NamespacedObject{{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "c"}, UID: types.UID(uid)}})
	if err != nil {
		t.Fatalf("Unprepare: %v", err)
	}
	if _, ok := res[types.UID(uid)]; !ok {
		t.Fatalf("Unprepare result has no entry for %s", uid)
	}
	return res[types.UID(uid)]
}

// readSpec reads a claim's CDI spec with the CDI library's own parser and
// validation.
func readSpec(t *testing.T, dir, uid string) *cdi.Spec {
	t.Helper()
	s, err := cdi.ReadSpec(cdiSpecPath(dir, types.UID(uid)), 0)
	if err != nil {
		t.Fatalf("CDI spec of %s: %v", uid, err)
	}
	return s
}

func deviceNodes(d *cdi.Device) []string {
	var out []string
	for _, n := range d.ContainerEdits.DeviceNodes {
		out = append(out, n.Path)
	}
	return out
}

func TestPrepareWholeGPU(t *testing.T) {
	e := newPrepEnv(t, "dgx-h100", nil)
	p := e.preparer()
	c := claim("uid-1", "c1", alloc{pool: e.name, device: "gpu-3"})
	devs, err := prepareOne(t, p, c)
	if err != nil {
		t.Fatal(err)
	}
	want := []kubeletplugin.Device{{Requests: []string{"gpu"}, PoolName: e.name, DeviceName: "gpu-3", CDIDeviceIDs: []string{"k8s.gpu.gpud.io/claim=uid-1-gpu-3"}}}
	if !reflect.DeepEqual(devs, want) {
		t.Fatalf("devices = %+v, want %+v", devs, want)
	}
	spec := readSpec(t, e.cdiDir, "uid-1")
	d := spec.GetDevice("uid-1-gpu-3")
	if d == nil || !slices.Equal(deviceNodes(d), []string{"/dev/nvidia3"}) || len(d.ContainerEdits.Env) != 0 {
		t.Fatalf("CDI device = %+v, want /dev/nvidia3 and no MPS limits", d)
	}
	if st, err := os.Stat(cdiSpecPath(e.cdiDir, "uid-1")); err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("spec mode = %v, %v; want 0644", st.Mode(), err)
	}

	again, err := prepareOne(t, p, c)
	if err != nil || !reflect.DeepEqual(again, devs) {
		t.Errorf("second prepare = %+v, %v; want the first result", again, err)
	}
	// After a restart, the same claim gets the same result and unprepare
	// removes what prepare wrote.
	p2 := e.preparer()
	if again, err := prepareOne(t, p2, c); err != nil || !reflect.DeepEqual(again, devs) {
		t.Errorf("prepare after restart = %+v, %v; want the first result", again, err)
	}
	if err := unprepareOne(t, p2, "uid-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cdiSpecPath(e.cdiDir, "uid-1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("CDI spec left after unprepare: %v", err)
	}
	if n := len(e.preparer().Prepared()); n != 0 {
		t.Errorf("%d claims in the checkpoint after unprepare", n)
	}
	if err := unprepareOne(t, p2, "uid-1"); err != nil {
		t.Errorf("second unprepare = %v, want nil", err)
	}
}

func TestPrepareFractions(t *testing.T) {
	e := newPrepEnv(t, "dgx-h100", nil)
	p := e.preparer()
	frac := func(uid, share, mem, cores string) *resourceapi.ResourceClaim {
		capacity := map[resourceapi.QualifiedName]string{"memory": mem}
		if cores != "" {
			capacity["cores"] = cores
		}
		return claim(uid, uid, alloc{pool: e.name, device: "gpu-0", shareID: share, capacity: capacity})
	}
	devs, err := prepareOne(t, p, frac("a", "s-a", "20Gi", "50"))
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 1 || devs[0].ShareID == nil || *devs[0].ShareID != "s-a" || devs[0].CDIDeviceIDs[0] != CDIKind+"=a-gpu-0-s-a" {
		t.Fatalf("devices = %+v", devs)
	}
	env := readSpec(t, e.cdiDir, "a").GetDevice("a-gpu-0-s-a").ContainerEdits.Env
	want := []string{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=20480M"}
	if !slices.Equal(env, want) {
		t.Errorf("env = %v, want %v", env, want)
	}
	if _, err := prepareOne(t, p, frac("b", "s-b", "20Gi", "")); err != nil {
		t.Errorf("second fraction: %v", err)
	}
	if _, err := prepareOne(t, p, frac("c", "s-c", "41Gi", "")); !errors.Is(err, ErrInUse) {
		t.Errorf("fractions beyond the GPU: err = %v, want ErrInUse", err)
	}
	if _, err := prepareOne(t, p, claim("d", "d", alloc{pool: e.name, device: "gpu-0"})); !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "gpu-0") {
		t.Errorf("whole GPU under fractions: err = %v, want ErrInUse naming gpu-0", err)
	}
	if _, err := prepareOne(t, p, claim("e", "e", alloc{pool: e.name, device: "gpu-1"})); err != nil {
		t.Errorf("whole other GPU: %v", err)
	}
	if _, err := prepareOne(t, p, frac("f", "s-f", "40Gi", "")); err != nil {
		t.Errorf("a fraction filling gpu-0 up: %v", err)
	}
}

func TestPrepareRejects(t *testing.T) {
	e := newPrepEnv(t, "dgx-h100", nil)
	e.st.ExclusiveOnly = map[string]bool{e.st.Inventory.GPUs[2].UUID: true}
	pub, err := Build(e.name, e.st)
	if err != nil {
		t.Fatal(err)
	}
	e.tab.pub = pub
	p := e.preparer()
	notAllocated := claim("na", "na")
	notAllocated.Status.Allocation = nil
	tooMany := claim("tm", "tm")
	for range resourceapi.AllocationResultsMaxSize + 1 {
		tooMany.Status.Allocation.Devices.Results = append(tooMany.Status.Allocation.Devices.Results,
			resourceapi.DeviceRequestAllocationResult{Request: "r", Driver: DriverName, Pool: e.name, Device: "gpu-0"})
	}
	tests := []struct {
		name    string
		claim   *resourceapi.ResourceClaim
		wantErr error
		want    string
	}{
		{name: "unknown device", claim: claim("u1", "u1", alloc{pool: e.name, device: "gpu-99"}), wantErr: ErrUnknownDevice, want: `"gpu-99"`},
		{name: "other pool", claim: claim("u2", "u2", alloc{pool: "node-b", device: "gpu-0"}), wantErr: ErrUnknownDevice, want: `"node-b"`},
		{name: "not allocated", claim: notAllocated, want: "not allocated"},
		{name: "too many results", claim: tooMany, want: "33 allocation results"},
		{name: "memory above the GPU", claim: claim("m", "m", alloc{pool: e.name, device: "gpu-0", capacity: map[resourceapi.QualifiedName]string{"memory": "81Gi"}}), want: "consumed memory"},
		{name: "zero memory", claim: claim("z", "z", alloc{pool: e.name, device: "gpu-0", capacity: map[resourceapi.QualifiedName]string{"memory": "0"}}), want: "consumed memory"},
		{name: "cores above 100", claim: claim("k", "k", alloc{pool: e.name, device: "gpu-0", capacity: map[resourceapi.QualifiedName]string{"cores": "101"}}), want: "consumed cores"},
		{name: "unknown capacity", claim: claim("x", "x", alloc{pool: e.name, device: "gpu-0", capacity: map[resourceapi.QualifiedName]string{"watts": "1"}}), want: `"watts"`},
		{name: "fraction of exclusive GPU", claim: claim("ex", "ex", alloc{pool: e.name, device: "gpu-2", capacity: map[resourceapi.QualifiedName]string{"memory": "1Gi"}}), want: "exclusive-only"},
		{name: "bad share ID", claim: claim("sh", "sh", alloc{pool: e.name, device: "gpu-0", shareID: "a/b"}), want: "share ID"},
		{name: "dynamic MIG without manager", claim: claim("mg", "mg", alloc{pool: e.name, device: "gpu-0-mig-1g10gb-0"}), want: "no MIG manager"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := prepareOne(t, p, tc.claim)
			if err == nil || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %v containing %s", err, tc.wantErr, tc.want)
			}
		})
	}
	if n := len(p.Prepared()); n != 0 {
		t.Errorf("%d claims left in the checkpoint by failed prepares", n)
	}
	entries, _ := os.ReadDir(e.cdiDir)
	if len(entries) != 0 {
		t.Errorf("CDI specs left by failed prepares: %v", entries)
	}
	other := claim("other-driver", "o")
	other.Status.Allocation.Devices.Results = []resourceapi.DeviceRequestAllocationResult{{Request: "r", Driver: "gpu.nvidia.com", Pool: "x", Device: "gpu-0"}}
	if devs, err := prepareOne(t, p, other); err != nil || len(devs) != 0 {
		t.Errorf("claim of another driver: %+v, %v; want nothing", devs, err)
	}
	if _, err := p.Prepare(t.Context(), make([]*resourceapi.ResourceClaim, MaxClaimsPerCall+1)); err == nil {
		t.Errorf("Prepare accepted %d claims", MaxClaimsPerCall+1)
	}
}

func TestPrepareDynamicMIG(t *testing.T) {
	f := &fakeMIG{}
	e := newPrepEnv(t, "dgx-h100", f)
	p := e.preparer()
	g := e.st.Inventory.GPUs[1]
	c := claim("m1", "m1", alloc{pool: e.name, device: "gpu-1-mig-1g10gb-6"})
	devs, err := prepareOne(t, p, c)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.created, []string{g.UUID + " 1g.10gb@6"}) {
		t.Fatalf("created = %v", f.created)
	}
	d := readSpec(t, e.cdiDir, "m1").GetDevice("m1-gpu-1-mig-1g10gb-6")
	gi, ci := migCapMinor(g.Minor, 13, 0)
	wantNodes := []string{"/dev/nvidia1", "/dev/nvidia-caps/nvidia-cap" + itoa(gi), "/dev/nvidia-caps/nvidia-cap" + itoa(ci)}
	if d == nil || !slices.Equal(deviceNodes(d), wantNodes) {
		t.Fatalf("CDI device nodes = %v, want %v", deviceNodes(d), wantNodes)
	}
	if again, err := prepareOne(t, e.preparer(), c); err != nil || !reflect.DeepEqual(again, devs) || len(f.created) != 1 {
		t.Errorf("prepare after restart = %+v, %v, creates %v; want the same result and no second create", again, err, f.created)
	}
	if err := unprepareOne(t, e.preparer(), "m1"); err != nil {
		t.Fatal(err)
	}
	if f.liveCount() != 0 || len(f.destroyed) != 1 {
		t.Errorf("after unprepare: live %d, destroyed %v", f.liveCount(), f.destroyed)
	}
}

func TestPrepareMIGFailureLeavesNothing(t *testing.T) {
	f := &fakeMIG{failCreate: 2}
	e := newPrepEnv(t, "dgx-h100", f)
	p := e.preparer()
	c := claim("m2", "m2", alloc{request: "a", pool: e.name, device: "gpu-0-mig-1g10gb-0"}, alloc{request: "b", pool: e.name, device: "gpu-0-mig-1g10gb-1"})
	if _, err := prepareOne(t, p, c); err == nil || !strings.Contains(err.Error(), "gpu-0-mig-1g10gb-1") {
		t.Fatalf("err = %v, want the failed device named", err)
	}
	if f.liveCount() != 0 || len(f.destroyed) != 1 {
		t.Errorf("live %d destroyed %v; want the first slice destroyed", f.liveCount(), f.destroyed)
	}
	if n := len(e.preparer().Prepared()); n != 0 {
		t.Errorf("%d claims left in the checkpoint", n)
	}
	if _, err := os.Stat(cdiSpecPath(e.cdiDir, "m2")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("CDI spec written for a failed claim: %v", err)
	}
}

func TestPrepareResumesInterruptedPrepare(t *testing.T) {
	// A crash after a MIG device was created but before the claim was
	// prepared leaves it in the checkpoint as Preparing: a retry finishes
	// without creating another, and unprepare destroys it.
	f := &fakeMIG{}
	e := newPrepEnv(t, "dgx-h100", f)
	ref := e.tab.pub.Devices["gpu-2-mig-2g20gb-4"]
	created, err := f.Create(context.Background(), ref.GPUUUID, ref.Profile, 4)
	if err != nil {
		t.Fatal(err)
	}
	ref.MIGUUID, ref.GIID = created.UUID, created.GIID
	cp := prepared.Checkpoint{Claims: map[types.UID]PreparedClaim{"m3": {Namespace: "ns", Name: "m3", State: prepared.StatePreparing,
		Devices: []PreparedDevice{{Requests: []string{"gpu"}, Device: ref, Created: true}}}}}
	if err := prepared.Write(e.stateDir, cp); err != nil {
		t.Fatal(err)
	}
	c := claim("m3", "m3", alloc{pool: e.name, device: "gpu-2-mig-2g20gb-4"})
	devs, err := prepareOne(t, e.preparer(), c)
	if err != nil || len(devs) != 1 || len(f.created) != 1 {
		t.Fatalf("resume = %+v, %v, creates %v; want one device and no second create", devs, err, f.created)
	}
	if err := unprepareOne(t, e.preparer(), "m3"); err != nil || f.liveCount() != 0 {
		t.Fatalf("unprepare = %v, live %d", err, f.liveCount())
	}
}

func TestPrepareRealMIG(t *testing.T) {
	e := newPrepEnv(t, "dgx-h100", nil)
	n := e.node
	e.mig = newSimMIG(n, filepath.Join(t.TempDir(), "journal.json"))
	p := e.preparer()
	c := claim("r1", "r1", alloc{pool: e.name, device: "gpu-5-mig-1g10gb-6"})
	devs, err := prepareOne(t, p, c)
	if err != nil {
		t.Fatal(err)
	}
	e.rediscover()
	ref := e.tab.pub.Devices["gpu-5-mig-1g10gb-6"]
	if ref.MIGUUID == "" || devs[0].DeviceName != ref.Name {
		t.Fatalf("after prepare the slice is %+v; want it existing under the same name", ref)
	}
	if _, ok := e.tab.pub.Devices["gpu-5"]; ok {
		t.Errorf("gpu-5 is published whole while in MIG mode")
	}
	if _, ok := e.tab.pub.Devices["gpu-5-mig-1g20gb-6"]; ok {
		t.Errorf("a placement overlapping the new slice is still published")
	}
	d := readSpec(t, e.cdiDir, "r1").GetDevice("r1-gpu-5-mig-1g10gb-6")
	gi, ci := migCapMinor(5, ref.GIID, ref.CIID)
	if want := []string{"/dev/nvidia5", "/dev/nvidia-caps/nvidia-cap" + itoa(gi), "/dev/nvidia-caps/nvidia-cap" + itoa(ci)}; !slices.Equal(deviceNodes(d), want) {
		t.Errorf("device nodes = %v, want %v", deviceNodes(d), want)
	}
	if err := unprepareOne(t, e.preparer(), "r1"); err != nil {
		t.Fatal(err)
	}
	e.rediscover()
	if r := e.tab.pub.Devices["gpu-5-mig-1g10gb-6"]; r.MIGUUID != "" || !r.Dynamic() {
		t.Errorf("after unprepare the slice is %+v; want it gone (dynamic again)", r)
	}

	// A compute-instance failure rolls the GPU instance back: nothing is
	// left, and the claim is not recorded.
	n.InjectFault("CreateComputeInstance", simnode.FaultSpec{Return: nvml.ERROR_UNKNOWN})
	c2 := claim("r2", "r2", alloc{pool: e.name, device: "gpu-6-mig-3g40gb-4"})
	if _, err := prepareOne(t, e.preparer(), c2); err == nil {
		t.Fatal("prepare succeeded through an injected failure")
	}
	e.rediscover()
	for _, g := range e.st.Inventory.GPUs {
		if g.Index == 6 && len(g.MIGDevices) != 0 {
			t.Errorf("gpu 6 has MIG devices %+v after a failed prepare", g.MIGDevices)
		}
	}
	if n := len(e.preparer().Prepared()); n != 0 {
		t.Errorf("%d claims in the checkpoint", n)
	}
}

func TestUnprepareAfterCrashDuringCreate(t *testing.T) {
	// The agent died inside Create: the checkpoint says Creating and has no
	// UUID; the slice exists (the inventory shows it). Unprepare destroys
	// it; a retry of a destroy that failed finishes the job.
	f := &fakeMIG{}
	e := newPrepEnv(t, "dgx-h100", f)
	ref := e.tab.pub.Devices["gpu-1-mig-3g40gb-0"]
	made, err := f.Create(context.Background(), ref.GPUUUID, ref.Profile, 0)
	if err != nil {
		t.Fatal(err)
	}
	cp := prepared.Checkpoint{Claims: map[types.UID]PreparedClaim{"m4": {Namespace: "ns", Name: "m4", State: prepared.StatePreparing,
		Devices: []PreparedDevice{{Requests: []string{"gpu"}, Device: ref, Created: true, Creating: true}}}}}
	if err := prepared.Write(e.stateDir, cp); err != nil {
		t.Fatal(err)
	}
	e.st.Inventory = withMIG(e.st.Inventory, 1, gpu.MIGDevice{UUID: made.UUID, Profile: "3g.40gb", MemoryBytes: 40 << 30,
		GPUInstanceID: made.GIID, PlacementStart: 0, PlacementSize: 4})
	pub, err := Build(e.name, e.st)
	if err != nil {
		t.Fatal(err)
	}
	e.tab.pub = pub
	f.failDestroys = 1
	p := e.preparer()
	if err := unprepareOne(t, p, "m4"); err == nil || !strings.Contains(err.Error(), made.UUID) {
		t.Fatalf("unprepare with a failing destroy = %v, want an error naming %s", err, made.UUID)
	}
	if _, ok := e.preparer().Prepared()["m4"]; !ok {
		t.Fatal("claim forgotten although its slice was not destroyed")
	}
	if err := unprepareOne(t, e.preparer(), "m4"); err != nil {
		t.Fatalf("second unprepare: %v", err)
	}
	if f.liveCount() != 0 || !slices.Equal(f.destroyed, []string{made.UUID}) {
		t.Errorf("live %d, destroyed %v; want %s destroyed", f.liveCount(), f.destroyed, made.UUID)
	}
}

func TestCheckpointErrors(t *testing.T) {
	for name, data := range map[string]string{
		"garbage":       "{not json",
		"other version": `{"version":99,"claims":{}}`,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(prepared.Path(dir), []byte(data), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := NewPreparer(PreparerConfig{NodeName: "n", StateDir: dir, CDIDir: dir, Devices: func() map[string]DeviceRef { return nil }})
			if err == nil || !strings.Contains(err.Error(), prepared.Path(dir)) {
				t.Errorf("NewPreparer = %v, want an error naming %s", err, prepared.Path(dir))
			}
		})
	}
}
