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

// stuckResources is a kubelet that does not answer in time: it records
// the deadline it was given and fails as a call past it would.
type stuckResources struct{ deadlines []time.Time }

func (s *stuckResources) ListResources(ctx context.Context) (podresources.Resources, error) {
	d, _ := ctx.Deadline()
	s.deadlines = append(s.deadlines, d)
	return podresources.Resources{}, context.DeadlineExceeded
}

// TestContainerStartingKubeletStuck: the start hook's kubelet call ends
// hookMargin before the runtime's deadline (containerd closes a plugin
// that misses it); when it fails, a privileged container is left with a filter
// that allows no GPU, an ordinary one (its own device cgroup confines it)
// with none; once the kubelet answers, the poll opens the privileged
// container's filter to its GPU.
func TestContainerStartingKubeletStuck(t *testing.T) {
	relP := "/kubepods/burstable/pod" + uidA + "/" + cid('d')
	relO := "/kubepods/burstable/pod" + uidA + "/" + cid('e')
	stuck := &stuckResources{}
	dr := &DRA{Resources: stuck}
	var logs bytes.Buffer
	e, err := New(Config{V1Devices: v1Tree(t, relP, relO), Isolate: true,
		Probe:      func() error { return devcgroup.ErrUnsupported },
		Inventory:  migInventory,
		DRA:        dr,
		Pods:       fakePods{uidA: {Namespace: "ml", Name: "train", UID: uidA}},
		Containers: fakeContainers{},
	}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	runtimeDeadline := time.Now().Add(time.Minute)
	for _, c := range []ContainerInfo{
		{Namespace: "ml", Pod: "train", Container: "priv", CgroupsPath: relP, AllDevices: true},
		{Namespace: "ml", Pod: "train", Container: "plain", CgroupsPath: relO},
	} {
		ctx, cancel := context.WithDeadline(t.Context(), runtimeDeadline)
		e.ContainerStarting(ctx, c)
		cancel()
	}
	want := runtimeDeadline.Add(-hookMargin)
	if len(stuck.deadlines) != 2 || !stuck.deadlines[0].Equal(want) || !stuck.deadlines[1].Equal(want) {
		t.Errorf("kubelet calls' deadlines %v, want two at %v (the runtime's less %s)", stuck.deadlines, want, hookMargin)
	}
	p := e.tracked[relP]
	if p == nil || p.filter == nil || !p.closed || len(p.allowed.GPUMinors) != 0 || len(p.allowed.CapMinors) != 0 {
		t.Fatalf("privileged container: %+v, want a closed filter allowing no GPU", p)
	}
	if o := e.tracked[relO]; o == nil || o.filter != nil {
		t.Errorf("ordinary container: %+v, want no filter (its device cgroup confines it)", o)
	}
	if !strings.Contains(logs.String(), "device filter attached closed") {
		t.Errorf("no warning for the closed filter:\n%s", logs.String())
	}

	dr.Resources = &fakeResources{r: podresources.Resources{Claims: []podresources.ClaimDevice{
		claim("priv", dra.DriverName, dra.MIGDeviceName(2, "1g.10gb", 4)),
	}}}
	e.cfg.Containers = fakeContainers{cid('d'): {"ml", "train", "priv"}, cid('e'): {"ml", "train", "plain"}}
	e.Reconcile(t.Context())
	p = e.tracked[relP]
	if p.filter == nil || p.closed || !slices.Equal(p.allowed.GPUMinors, []uint32{2}) || len(p.allowed.CapMinors) != 2 {
		t.Errorf("privileged container after the kubelet answered: closed %v gpus %v caps %v, want GPU 2 and its slice's two caps",
			p.closed, p.allowed.GPUMinors, p.allowed.CapMinors)
	}
}

// TestClosedFilterStandsDown: a filter closed for want of an answer is
// released when the kubelet turns out not to report the namespace's DRA
// devices at all: the stand-down policy, not a GPU-less container.
func TestClosedFilterStandsDown(t *testing.T) {
	rel := "/kubepods/burstable/pod" + uidA + "/" + cid('d')
	dr := &DRA{Resources: &stuckResources{}, Prepared: func() ([]ClaimRef, error) { return []ClaimRef{{Namespace: "ml", Name: "train-priv"}}, nil }}
	e, err := New(Config{V1Devices: v1Tree(t, rel), Isolate: true,
		Probe:      func() error { return devcgroup.ErrUnsupported },
		Inventory:  migInventory,
		DRA:        dr,
		Pods:       fakePods{uidA: {Namespace: "ml", Name: "train", UID: uidA}},
		Containers: fakeContainers{cid('d'): {"ml", "train", "priv"}},
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	e.ContainerStarting(t.Context(), ContainerInfo{Namespace: "ml", Pod: "train", Container: "priv", CgroupsPath: rel, AllDevices: true})
	if tr := e.tracked[rel]; tr == nil || !tr.closed {
		t.Fatalf("privileged container: %+v, want a closed filter", tr)
	}
	dr.Resources = &fakeResources{} // answers, without DRA devices
	e.Reconcile(t.Context())
	if tr := e.tracked[rel]; tr.filter != nil || tr.closed || !tr.stoodDown {
		t.Errorf("privileged container in a stood-down namespace: filter %v closed %v stoodDown %v, want released and stood down", tr.filter != nil, tr.closed, tr.stoodDown)
	}
}

// hookDuringRead is a kubelet whose first answer is older than the
// start hook that runs while the poll waits for it.
type hookDuringRead struct {
	e     *Enforcer
	start ContainerInfo
	old   podresources.Resources // what the poll's read returns
	now   podresources.Resources // what the hook's read returns
	calls int
}

func (h *hookDuringRead) ListResources(ctx context.Context) (podresources.Resources, error) {
	h.calls++
	if h.calls == 1 {
		h.e.ContainerStarting(ctx, h.start) // the runtime starts the container meanwhile
		return h.old, nil
	}
	return h.now, nil
}

// TestReconcileKeepsNewerHook: a poll pass whose kubelet read began
// before the start hook's does not undo what the hook applied (the pass
// does not hold the lock the hook needs while it reads).
func TestReconcileKeepsNewerHook(t *testing.T) {
	rel := "/kubepods/burstable/pod" + uidA + "/" + cid('c')
	h := &hookDuringRead{
		start: ContainerInfo{Namespace: "ml", Pod: "train", Container: "cuda", CgroupsPath: rel},
		old:   podresources.Resources{},
		now:   podresources.Resources{Claims: []podresources.ClaimDevice{claim("cuda", dra.DriverName, dra.GPUDeviceName(1))}},
	}
	e, err := New(Config{V1Devices: v1Tree(t, rel), Isolate: true,
		Probe:      func() error { return devcgroup.ErrUnsupported },
		Inventory:  func() gpu.Inventory { return migInventory() },
		DRA:        &DRA{Resources: h},
		Pods:       fakePods{uidA: {Namespace: "ml", Name: "train", UID: uidA}},
		Containers: fakeContainers{cid('c'): {"ml", "train", "cuda"}},
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	h.e = e
	e.Reconcile(t.Context())
	if h.calls != 2 {
		t.Fatalf("kubelet asked %d times, want the poll's and the hook's", h.calls)
	}
	if tr := e.tracked[rel]; tr == nil || tr.filter == nil || !slices.Equal(tr.allowed.GPUMinors, []uint32{1}) {
		t.Fatalf("container after the pass: %+v, want the hook's filter with GPU 1", tr)
	}
	h.old = h.now
	e.Reconcile(t.Context()) // a later pass takes over
	if tr := e.tracked[rel]; !slices.Equal(tr.allowed.GPUMinors, []uint32{1}) {
		t.Errorf("next pass: gpus %v, want 1", tr.allowed.GPUMinors)
	}
}

// hookFailsDuringRead: while the poll waits for the kubelet, the runtime
// creates a new privileged container's cgroup and starts it, and the
// hook's own kubelet call fails.
type hookFailsDuringRead struct {
	e      *Enforcer
	mkdir  func()
	start  ContainerInfo
	answer podresources.Resources
	calls  int
}

func (h *hookFailsDuringRead) ListResources(ctx context.Context) (podresources.Resources, error) {
	h.calls++
	switch h.calls {
	case 1:
		h.mkdir()
		h.e.ContainerStarting(ctx, h.start)
		return h.answer, nil
	case 2:
		return podresources.Resources{}, context.DeadlineExceeded
	}
	return h.answer, nil
}

// TestReconcileKeepsClosedFilterOfNewContainer: a poll pass that scanned
// the cgroups before the runtime created a new container's does not
// release the closed filter the start hook attached meanwhile (the pass
// would take the container for gone); the next pass opens it.
func TestReconcileKeepsClosedFilterOfNewContainer(t *testing.T) {
	old := "/kubepods/burstable/pod" + uidA + "/" + cid('a')
	rel := "/kubepods/burstable/pod" + uidA + "/" + cid('d')
	root := v1Tree(t, old)
	h := &hookFailsDuringRead{
		mkdir:  func() { v1TreeAt(t, root, rel) },
		start:  ContainerInfo{Namespace: "ml", Pod: "train", Container: "priv", CgroupsPath: rel, AllDevices: true},
		answer: podresources.Resources{Claims: []podresources.ClaimDevice{claim("priv", dra.DriverName, dra.GPUDeviceName(1))}},
	}
	e, err := New(Config{V1Devices: root, Isolate: true,
		Probe:      func() error { return devcgroup.ErrUnsupported },
		Inventory:  migInventory,
		DRA:        &DRA{Resources: h},
		Pods:       fakePods{uidA: {Namespace: "ml", Name: "train", UID: uidA}},
		Containers: fakeContainers{cid('a'): {"ml", "train", "old"}, cid('d'): {"ml", "train", "priv"}},
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	h.e = e
	e.Reconcile(t.Context())
	if tr := e.tracked[rel]; tr == nil || tr.filter == nil || !tr.closed {
		t.Fatalf("new privileged container after the pass: %+v, want the hook's closed filter kept", tr)
	}
	e.Reconcile(t.Context())
	if tr := e.tracked[rel]; tr == nil || tr.closed || !slices.Equal(tr.allowed.GPUMinors, []uint32{1}) {
		t.Errorf("after the next pass: %+v, want the filter opened to GPU 1", tr)
	}
}
