package enforce

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/pkg/devcgroup"
	"github.com/gpud/gpud/pkg/dra"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/podresources"
)

// fakeResources is a kubelet answering ListResources.
type fakeResources struct{ r podresources.Resources }

func (f *fakeResources) ListResources(context.Context) (podresources.Resources, error) {
	return f.r, nil
}

// migInventory: GPUs 0-2; GPU 2 in MIG mode with a 1g.10gb at slice 4
// (GI 3, CI 0) and a 1g.10gb+me at slice 6 (GI 5, CI 0).
func migInventory() gpu.Inventory {
	return gpu.Inventory{GPUs: []gpu.GPU{
		{UUID: "GPU-0", Index: 0, Minor: 0},
		{UUID: "GPU-1", Index: 1, Minor: 1},
		{UUID: "GPU-2", Index: 2, Minor: 2, MIGEnabled: true, MIGDevices: []gpu.MIGDevice{
			{UUID: "MIG-a", Profile: "1g.10gb", GPUInstanceID: 3, ComputeInstanceID: 0, PlacementStart: 4, PlacementSize: 1},
			{UUID: "MIG-b", Profile: "1g.10gb+me", GPUInstanceID: 5, ComputeInstanceID: 0, PlacementStart: 6, PlacementSize: 1},
		}},
	}}
}

func TestDRADeviceUUID(t *testing.T) {
	inv := migInventory()
	tests := []struct {
		name, device, want string
	}{
		{"whole gpu", dra.GPUDeviceName(1), "GPU-1"},
		{"mig", dra.MIGDeviceName(2, "1g.10gb", 4), "MIG-a"},
		{"mig with media", dra.MIGDeviceName(2, "1g.10gb+me", 6), "MIG-b"},
		{"mig placement that does not exist", dra.MIGDeviceName(2, "1g.10gb", 5), ""},
		{"gpu not on the node", "gpu-7", ""},
		{"another naming", "GPU-1", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := draDeviceUUID(inv, tc.device)
			if got != tc.want || ok != (tc.want != "") {
				t.Errorf("draDeviceUUID(%q) = %q, %v; want %q", tc.device, got, ok, tc.want)
			}
		})
	}
}

// claim is one device of one claim of a container in namespace ml, pod
// train.
func claim(ctr, driver, device string) podresources.ClaimDevice {
	return podresources.ClaimDevice{Namespace: "ml", Pod: "train", Container: ctr, ClaimNamespace: "ml", ClaimName: "train-" + ctr,
		Driver: driver, Pool: "node-a", Device: device}
}

// TestReconcileDRA: each container opens exactly its claims' devices: a
// whole GPU, a fraction (the same device, shared), a MIG device (its
// parent GPU and its GI and CI caps); an unknown device name and another
// driver's device grant nothing; a container without claims opens none.
func TestReconcileDRA(t *testing.T) {
	rel := func(c byte) string { return "/kubepods/burstable/pod" + uidA + "/" + cid(c) }
	relB := "/kubepods/besteffort/pod" + uidB + "/" + cid('b')
	inv := migInventory()
	frac := claim("frac", dra.DriverName, dra.GPUDeviceName(0))
	frac.ShareID = "0b5e"
	res := &fakeResources{r: podresources.Resources{Claims: []podresources.ClaimDevice{
		claim("cuda", dra.DriverName, dra.GPUDeviceName(1)),
		frac,
		claim("mig", dra.DriverName, dra.MIGDeviceName(2, "1g.10gb", 4)),
		claim("stale", dra.DriverName, "gpu-7"),
		claim("nic", "nic.example.com", dra.GPUDeviceName(1)),
	}}}
	ctrs := map[byte]string{'c': "cuda", 'f': "frac", 'd': "mig", 'e': "stale", '1': "nic"}
	names := fakeContainers{cid('b'): {"web", "nginx", "nginx"}}
	rels := []string{relB}
	for c, n := range ctrs {
		names[cid(c)] = ContainerRef{"ml", "train", n}
		rels = append(rels, rel(c))
	}
	var logs bytes.Buffer
	e, err := New(Config{V1Devices: v1Tree(t, rels...), Isolate: true, Majors: devcgroup.Majors{Caps: 508},
		Probe:      func() error { return devcgroup.ErrUnsupported },
		Inventory:  func() gpu.Inventory { return inv },
		DRA:        &DRA{Resources: res},
		Pods:       fakePods{uidA: {Namespace: "ml", Name: "train", UID: uidA}, uidB: {Namespace: "web", Name: "nginx", UID: uidB}},
		Containers: names,
	}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	e.Reconcile(t.Context())
	want := map[string]struct{ gpus, caps []uint32 }{
		rel('c'): {gpus: []uint32{1}},
		rel('f'): {gpus: []uint32{0}},
		rel('d'): {gpus: []uint32{2}, caps: []uint32{devcgroup.CapMinor(2, 3, -1), devcgroup.CapMinor(2, 3, 0)}},
		rel('e'): {},
		rel('1'): {},
		relB:     {},
	}
	for r, w := range want {
		tr := e.tracked[r]
		if tr == nil || tr.filter == nil {
			t.Errorf("%s: no filter, want gpus %v", r, w.gpus)
			continue
		}
		caps := slices.Clone(w.caps)
		slices.Sort(caps)
		if !slices.Equal(tr.allowed.GPUMinors, w.gpus) || !slices.Equal(tr.allowed.CapMinors, caps) {
			t.Errorf("%s: gpus %v caps %v, want %v %v", r, tr.allowed.GPUMinors, tr.allowed.CapMinors, w.gpus, caps)
		}
	}
	if n := strings.Count(logs.String(), "DRA device not in the inventory"); n != 1 || !strings.Contains(logs.String(), "device=gpu-7") {
		t.Errorf("logs: %d unknown-device warnings, want 1 naming gpu-7:\n%s", n, logs.String())
	}
	e.Reconcile(t.Context())
	if n := strings.Count(logs.String(), "DRA device not in the inventory"); n != 1 {
		t.Errorf("unknown device logged %d times after two passes, want once", n)
	}
	if s := e.Status(); strings.Contains(s, "does not report") {
		t.Errorf("Status() = %q with the kubelet reporting DRA devices", s)
	}
}

// TestReconcileDRAKubeletSilent: a kubelet that does not fill
// dynamic_resources while the driver prepared a claim in namespace ml: the
// containers of ml are left unfiltered (one of them may hold the GPU),
// other namespaces' are filtered; after the grace the log and Status say
// why; once the kubelet reports the claim's device, ml's containers get
// exactly their devices and the note goes.
func TestReconcileDRAKubeletSilent(t *testing.T) {
	relA := "/kubepods/burstable/pod" + uidA + "/" + cid('a')
	relB := "/kubepods/besteffort/pod" + uidB + "/" + cid('b')
	inv := migInventory()
	res := &fakeResources{}
	var logs bytes.Buffer
	e, err := New(Config{V1Devices: v1Tree(t, relA, relB), Isolate: true,
		Probe:      func() error { return devcgroup.ErrUnsupported },
		Inventory:  func() gpu.Inventory { return inv },
		DRA:        &DRA{Resources: res, Prepared: func() ([]ClaimRef, error) { return []ClaimRef{{Namespace: "ml", Name: "train-cuda"}}, nil }},
		Pods:       fakePods{uidA: {Namespace: "ml", Name: "train", UID: uidA}, uidB: {Namespace: "web", Name: "nginx", UID: uidB}},
		Containers: fakeContainers{cid('a'): {"ml", "train", "cuda"}, cid('b'): {"web", "nginx", "nginx"}},
	}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	e.Reconcile(t.Context())
	if tr := e.tracked[relA]; tr == nil || tr.filter != nil || !tr.stoodDown {
		t.Fatalf("ml container: %+v, want tracked, stood down, no filter", tr)
	}
	if tr := e.tracked[relB]; tr == nil || tr.filter == nil || len(tr.allowed.GPUMinors) != 0 {
		t.Fatalf("web container: %+v, want a filter without GPUs", tr)
	}
	if s := e.Status(); strings.Contains(s, "does not report") {
		t.Errorf("Status() = %q within the grace", s)
	}
	e.draMu.Lock()
	e.dra.silentSince = time.Now().Add(-gateGrace)
	e.draMu.Unlock()
	e.Reconcile(t.Context())
	e.Reconcile(t.Context())
	if s := e.Status(); !strings.Contains(s, "KubeletPodResourcesDynamicResources") {
		t.Errorf("Status() = %q, want the feature gate named", s)
	}
	if n := strings.Count(logs.String(), "kubelet does not report DRA devices"); n != 1 || !strings.Contains(logs.String(), "namespaces=ml") {
		t.Errorf("%d gate warnings, want 1 naming ml:\n%s", n, logs.String())
	}
	if tr := e.tracked[relA]; tr.filter != nil {
		t.Errorf("ml container filtered while the kubelet is silent")
	}

	res.r.Claims = []podresources.ClaimDevice{claim("cuda", dra.DriverName, dra.GPUDeviceName(1))}
	e.Reconcile(t.Context())
	if tr := e.tracked[relA]; tr.filter == nil || !slices.Equal(tr.allowed.GPUMinors, []uint32{1}) {
		t.Errorf("ml container once reported: filter %v gpus %v, want gpu 1", tr.filter != nil, tr.allowed.GPUMinors)
	}
	if s := e.Status(); strings.Contains(s, "does not report") {
		t.Errorf("Status() = %q after the kubelet reported", s)
	}
}

// TestContainerStartingDRA: the NRI path applies the same rules before the
// container runs: its DRA devices while the kubelet reports them; nothing
// attached in a namespace whose claims the kubelet does not report.
func TestContainerStartingDRA(t *testing.T) {
	relA := "/kubepods/burstable/pod" + uidA + "/" + cid('a')
	relB := "/kubepods/besteffort/pod" + uidB + "/" + cid('b')
	res := &fakeResources{}
	e, err := New(Config{V1Devices: v1Tree(t, relA, relB), Isolate: true,
		Probe:      func() error { return devcgroup.ErrUnsupported },
		Inventory:  migInventory,
		DRA:        &DRA{Resources: res, Prepared: func() ([]ClaimRef, error) { return []ClaimRef{{Namespace: "ml", Name: "train-cuda"}}, nil }},
		Pods:       fakePods{},
		Containers: fakeContainers{},
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	a := ContainerInfo{Namespace: "ml", Pod: "train", Container: "cuda", CgroupsPath: relA}
	b := ContainerInfo{Namespace: "web", Pod: "nginx", Container: "nginx", CgroupsPath: relB}
	e.ContainerStarting(t.Context(), a)
	e.ContainerStarting(t.Context(), b)
	if tr := e.tracked[relA]; tr == nil || tr.filter != nil || !tr.stoodDown {
		t.Errorf("ml container with an unreported claim: %+v, want stood down", tr)
	}
	if tr := e.tracked[relB]; tr == nil || tr.filter == nil || len(tr.allowed.GPUMinors) != 0 {
		t.Errorf("web container: %+v, want a filter without GPUs", tr)
	}
	e.ContainerRemoved(a)
	res.r.Claims = []podresources.ClaimDevice{claim("cuda", dra.DriverName, dra.MIGDeviceName(2, "1g.10gb+me", 6))}
	e.ContainerStarting(t.Context(), a)
	if tr := e.tracked[relA]; tr == nil || tr.filter == nil || !slices.Equal(tr.allowed.GPUMinors, []uint32{2}) {
		t.Errorf("ml container with a reported MIG device: %+v, want gpu 2", tr)
	}
}
