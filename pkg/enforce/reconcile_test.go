package enforce

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gpud/gpud/pkg/devcgroup"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/usage"
)

type failingAllocs struct{}

func (failingAllocs) List(context.Context) ([]usage.Assignment, error) {
	return nil, errors.New("kubelet not answering")
}

// v1Tree is a stand-in devices v1 hierarchy of plain files: enough for the
// enforcer's choices, without root. Each container dir allows everything.
func v1Tree(t *testing.T, rels ...string) string {
	t.Helper()
	root := t.TempDir()
	v1TreeAt(t, root, rels...)
	return root
}

// v1TreeAt adds containers' cgroup v1 devices directories under root.
func v1TreeAt(t *testing.T, root string, rels ...string) {
	t.Helper()
	for _, rel := range rels {
		d := filepath.Join(root, rel)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "devices.list"), []byte("a *:* rwm\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestReconcileDecisions(t *testing.T) {
	relA := "/kubepods/burstable/pod" + uidA + "/" + cid('a')                         // named: cuda
	relA2 := "/kubepods/burstable/pod" + uidA + "/" + cid('e')                        // not named yet: the pod's devices
	relB := "/kubepods/besteffort/pod" + uidB + "/" + cid('b')                        // a pod without GPUs
	relX := "/kubepods/pod" + "99999999-2222-3333-4444-555555555555" + "/" + cid('f') // a pod the kubelet does not list
	inv := gpu.Inventory{GPUs: []gpu.GPU{{UUID: "GPU-0", Minor: 0}, {UUID: "GPU-1", Minor: 1}, {UUID: "GPU-2", Minor: 2}}}
	allocs := &fakeAllocs{as: []usage.Assignment{
		{Namespace: "ml", Pod: "train", Container: "cuda", ResourceName: "nvidia.com/gpu", DeviceIDs: []string{"GPU-1"}},
		{Namespace: "ml", Pod: "train", Container: "helper", ResourceName: "nvidia.com/gpu", DeviceIDs: []string{"GPU-2"}},
	}}
	cfg := Config{V1Devices: v1Tree(t, relA, relA2, relB, relX), Isolate: true,
		Probe:       func() error { return devcgroup.ErrUnsupported },
		Inventory:   func() gpu.Inventory { return inv },
		Allocations: allocs,
		Pods:        fakePods{uidA: {Namespace: "ml", Name: "train", UID: uidA}, uidB: {Namespace: "web", Name: "nginx", UID: uidB}},
		Containers:  fakeContainers{cid('a'): {"ml", "train", "cuda"}, cid('b'): {"web", "nginx", "nginx"}},
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	t.Run("kubelet not answering: nothing attached", func(t *testing.T) {
		c := cfg
		c.Allocations = failingAllocs{}
		e, err := New(c, log)
		if err != nil {
			t.Fatal(err)
		}
		e.Reconcile(t.Context())
		for rel, tr := range e.tracked {
			if tr.filter != nil {
				t.Errorf("%s filtered while the kubelet does not answer", rel)
			}
		}
	})

	e, err := New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	e.Reconcile(t.Context())
	want := map[string][]uint32{relA: {1}, relA2: {1, 2}, relB: nil}
	for rel, minors := range want {
		tr := e.tracked[rel]
		if tr == nil || tr.filter == nil {
			t.Errorf("%s: no filter, want gpus %v", rel, minors)
			continue
		}
		if !slices.Equal(tr.allowed.GPUMinors, minors) {
			t.Errorf("%s: gpus %v, want %v", rel, tr.allowed.GPUMinors, minors)
		}
	}
	if tr := e.tracked[relX]; tr != nil && tr.filter != nil {
		t.Errorf("a pod the kubelet does not list was filtered")
	}
	if s := e.Status(); s != "device isolation: cgroup v1 devices on "+cfg.V1Devices+" (ebpf not available: "+devcgroup.ErrUnsupported.Error()+"); cpu affinity: off" {
		t.Errorf("Status() = %q", s)
	}

	// The container goes: its filter is released.
	if err := os.RemoveAll(filepath.Join(cfg.V1Devices, relB)); err != nil {
		t.Fatal(err)
	}
	e.Reconcile(t.Context())
	if _, held := e.tracked[relB]; held {
		t.Errorf("%s still tracked after its cgroup went", relB)
	}
}
