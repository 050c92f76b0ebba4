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

// stuckResources is a kubelet that answers only when its context ends.
type stuckResources struct{ calls int }

func (s *stuckResources) ListResources(ctx context.Context) (podresources.Resources, error) {
	s.calls++
	<-ctx.Done()
	return podresources.Resources{}, ctx.Err()
}

// TestContainerStartingKubeletStuck: with the kubelet not answering, the
// start hook gives up before the runtime's deadline (containerd closes a
// plugin that misses it); a privileged container is left with a filter
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
	const runtimeBudget = time.Second
	for _, c := range []ContainerInfo{
		{Namespace: "ml", Pod: "train", Container: "priv", CgroupsPath: relP, AllDevices: true},
		{Namespace: "ml", Pod: "train", Container: "plain", CgroupsPath: relO},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), runtimeBudget)
		began := time.Now()
		e.ContainerStarting(ctx, c)
		took := time.Since(began)
		cancel()
		if took >= runtimeBudget {
			t.Errorf("%s: hook returned after %s, past the runtime's %s", c.Container, took, runtimeBudget)
		}
	}
	if stuck.calls != 2 {
		t.Errorf("kubelet asked %d times, want once per hook", stuck.calls)
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
	ctx, cancel := context.WithTimeout(t.Context(), 600*time.Millisecond)
	e.ContainerStarting(ctx, ContainerInfo{Namespace: "ml", Pod: "train", Container: "priv", CgroupsPath: rel, AllDevices: true})
	cancel()
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
