package labelsync

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/nodelabels"
	"github.com/gpud/gpud/pkg/simnode"
	"github.com/gpud/gpud/test/k8senv"
)

// options is a switchable nodelabels.Options source, as the agent's MIG state is.
type options struct {
	mu sync.Mutex
	o  nodelabels.Options
}

func (s *options) get() nodelabels.Options  { s.mu.Lock(); defer s.mu.Unlock(); return s.o }
func (s *options) set(o nodelabels.Options) { s.mu.Lock(); defer s.mu.Unlock(); s.o = o }

// runUpdater runs an updater until the returned stop is called (or the
// test ends).
func runUpdater(t *testing.T, env *k8senv.Env, node string, store *discovery.Store, opts *options) (*Updater, func()) {
	t.Helper()
	u, err := New(Config{Client: env.Client, NodeName: node, Inventory: store, Options: opts.get,
		Debounce: 10 * time.Millisecond, MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
		Log: slog.New(slog.NewTextHandler(testWriter{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- u.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("updater Run() = %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return u, stop
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// waitLabels waits until the node carries exactly want among the labels
// this test cares about: the computed ones, plus the foreign ones given.
func waitLabels(t *testing.T, env *k8senv.Env, node, what string, want map[string]string, foreign map[string]string) map[string]string {
	t.Helper()
	var got map[string]string
	testwait.ForErr(t, 30*time.Second, what, func() error {
		n, err := env.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		got = n.Labels
		mine := map[string]string{}
		for k, v := range got {
			if strings.HasPrefix(k, "nvidia.com/") || strings.HasPrefix(k, "gpud.io/") {
				mine[k] = v
			}
		}
		all := maps.Clone(want)
		for k, v := range foreign {
			if strings.HasPrefix(k, "nvidia.com/") || strings.HasPrefix(k, "gpud.io/") {
				all[k] = v
			}
			if got[k] != v {
				return fmt.Errorf("foreign label %s=%q, want %q", k, got[k], v)
			}
		}
		if !maps.Equal(mine, all) {
			return fmt.Errorf("labels:%s\nwant:%s", format(mine), format(all))
		}
		if ann := n.Annotations[ManagedAnnotation]; ann != strings.Join(slices.Sorted(maps.Keys(want)), ",") {
			return fmt.Errorf("annotation %s=%q, want the computed keys", ManagedAnnotation, ann)
		}
		return nil
	})
	return got
}

// TestUpdaterOnAPIServer: on a real kube-apiserver, the updater puts the
// computed labels on its Node, follows inventory and option changes
// (labels it no longer computes are removed), never touches labels it did
// not set (team=a, and a GPU operator label in nvidia.com/), and a new
// updater (a restarted agent) owns what the last one applied.
func TestUpdaterOnAPIServer(t *testing.T) {
	env := k8senv.Start(t, k8senv.WithoutScheduler())
	const node = "gpu-node-1"
	foreign := map[string]string{"team": "a", "nvidia.com/gpu.deploy.driver": "true"}
	env.CreateNode(t, node, foreign)

	h100 := simInventory(t, "dgx-h100")
	migMixed := withMIG(h100)
	store := discovery.NewStore(nil, nil)
	opts := &options{o: nodelabels.Options{MIGStrategy: nodelabels.StrategyMixed}}
	_, stop := runUpdater(t, env, node, store, opts)

	// No inventory yet: nothing is applied.
	if n, err := env.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{}); err != nil || n.Labels[nodelabels.Present] != "" {
		t.Fatalf("labels before the first inventory: %v, %v", n.Labels, err)
	}

	store.Set(h100)
	want := nodelabels.Compute(h100, opts.get()).Labels
	got := waitLabels(t, env, node, "the dgx-h100 labels", want, foreign)
	t.Logf("node labels on the API server, simulated dgx-h100, mig-strategy mixed:%s", format(got))

	// MIG slices appear: the mixed strategy's per-profile labels follow.
	store.Set(migMixed)
	opts.set(nodelabels.Options{MIGStrategy: nodelabels.StrategyMixed, MIGConfigState: nodelabels.StateSuccess})
	want = nodelabels.Compute(migMixed, opts.get()).Labels
	if want["nvidia.com/mig-4g.40gb.count"] != "1" {
		t.Fatalf("computed labels lack the MIG profiles:%s", format(want))
	}
	waitLabels(t, env, node, "the MIG mixed labels", want, foreign)

	// Fewer GPUs and no MIG: the mig-* labels go, count follows.
	fewer := h100
	fewer.GPUs = slices.Clone(h100.GPUs[:4])
	store.Set(fewer)
	want = nodelabels.Compute(fewer, opts.get()).Labels
	if want[nodelabels.Count] != "4" {
		t.Fatalf("count %q, want 4", want[nodelabels.Count])
	}
	got = waitLabels(t, env, node, "4 GPUs, MIG labels removed", want, foreign)
	for k := range got {
		if strings.HasPrefix(k, "nvidia.com/mig-") {
			t.Errorf("label %s left after its MIG devices went", k)
		}
	}

	stop()

	// A restarted agent, now without a MIG strategy (DRA mode): it owns
	// what the last one applied, so mig.strategy and mig.config.state,
	// which it no longer computes, are removed.
	opts2 := &options{}
	store2 := discovery.NewStore(nil, nil)
	store2.Set(h100)
	u2, _ := runUpdater(t, env, node, store2, opts2)
	want = nodelabels.Compute(h100, opts2.get()).Labels
	if _, ok := want[nodelabels.MIGStrategy]; ok {
		t.Fatalf("DRA mode computes %s", nodelabels.MIGStrategy)
	}
	got = waitLabels(t, env, node, "the restarted updater's labels", want, foreign)
	t.Logf("node labels after a restart in DRA mode (no MIG strategy):%s", format(got))

	// A label of the updater removed by hand comes back at the next
	// update, even with an unchanged inventory.
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, nodelabels.GPUNUMANodes)
	if _, err := env.Client.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	u2.Refresh()
	waitLabels(t, env, node, "the removed label restored", want, foreign)

	// No GPUs at all: every label the updater set goes, the others stay.
	store2.Set(gpu.Inventory{Node: h100.Node})
	waitLabels(t, env, node, "no labels on a node without GPUs", map[string]string{}, foreign)
}

// TestUpdaterNeverCreatesNode: a Node that does not exist is an error
// naming it, and is not created.
func TestUpdaterNeverCreatesNode(t *testing.T) {
	env := k8senv.Start(t, k8senv.WithoutScheduler())
	store := discovery.NewStore(nil, nil)
	store.Set(simInventory(t, "pcie-l40s"))
	u, err := New(Config{Client: env.Client, NodeName: "no-such-node", Inventory: store})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := u.Sync(context.Background()); err == nil || !strings.Contains(err.Error(), "no-such-node") {
		t.Errorf("Sync on a missing node: %v, want an error naming it", err)
	}
	if _, err := env.Client.CoreV1().Nodes().Get(context.Background(), "no-such-node", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("node after Sync: %v, want not found", err)
	}
}

// format prints labels one per line, sorted, for diffs.
func format(l map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(l)) {
		b.WriteString("\n  " + k + "=" + l[k])
	}
	return b.String()
}

// simInventory reads a simulated node as the agent does.
func simInventory(t testing.TB, profile string) gpu.Inventory {
	t.Helper()
	n := simnode.NewBuiltin(profile)
	t.Cleanup(n.Close)
	inv, err := discovery.New(n, profile, nil).Inventory()
	if err != nil {
		t.Fatalf("discovery of %s: %v", profile, err)
	}
	return inv
}

// withMIG is inv with GPU 0 in MIG mode holding one 4g.40gb and three
// 1g.10gb slices, as discovery reports a mixed layout (pkg/nodelabels
// tests the labels of layouts applied through the MIG service).
func withMIG(inv gpu.Inventory) gpu.Inventory {
	inv.GPUs = slices.Clone(inv.GPUs)
	g := &inv.GPUs[0]
	g.MIGEnabled = true
	g.MIGDevices = []gpu.MIGDevice{{UUID: "MIG-a", Profile: "4g.40gb", MemoryBytes: 40 << 30, GPUInstanceID: 1, PlacementSize: 4}}
	for i := range 3 {
		g.MIGDevices = append(g.MIGDevices, gpu.MIGDevice{UUID: fmt.Sprintf("MIG-b%d", i), Profile: "1g.10gb", MemoryBytes: 10 << 30,
			GPUInstanceID: 2 + i, PlacementStart: 4 + i, PlacementSize: 1})
	}
	return inv
}
