package enforce

import (
	"bytes"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/simnode"
	"github.com/gpud/gpud/pkg/timeslice"
	"github.com/gpud/gpud/pkg/usage"
)

// TestBorrowerEvictedEvent: two containers share GPU 2 through the
// device plugin's sharing config: the borrower's share guarantees 20 GiB
// and lets it use 60, the tenant's guarantees 40. With the borrower at 50
// GiB and the GPU full, the tenant's allocation within its 40 GiB makes
// the simulated r615 driver evict the borrower; the next poll logs it,
// counts it and puts a GPUMemoryBorrowerEvicted Event on the borrower's
// pod. The tenant growing into free memory before that is no eviction.
func TestBorrowerEvictedEvent(t *testing.T) {
	ln := newLimitsNode(t, "615.40.01", true)
	relA := "/kubepods/burstable/pod" + uidA + "/" + cid('a')
	relB := "/kubepods/burstable/pod" + uidB + "/" + cid('b')
	mkdirs(t, ln.root, relA, relB)
	g := ln.inv.GPUs[2]
	allocs := &fakeAllocs{as: []usage.Assignment{
		{Namespace: "ml", Pod: "train", Container: "borrower", ResourceName: "nvidia.com/gpu.shared", DeviceIDs: []string{g.UUID + "::0"}},
		{Namespace: "web", Pod: "serve", Container: "tenant", ResourceName: "nvidia.com/gpu.shared", DeviceIDs: []string{g.UUID + "::1"}},
	}}
	sharing := timeslice.Config{Default: &timeslice.Sharing{Shares: []timeslice.Share{{MemoryMiB: 20 << 10, MemoryLimitMiB: 60 << 10}, {MemoryMiB: 40 << 10}}}}
	reg := prometheus.NewRegistry()
	metrics, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	events := &fakeLimitEvents{}
	var logs bytes.Buffer
	e, err := New(Config{Unified: ln.root, Inventory: func() gpu.Inventory { return ln.inv }, MemoryLimits: ln.m, Metrics: metrics, Events: events,
		Allocations: allocs, Sharing: func() timeslice.Config { return sharing },
		Pods:       fakePods{uidA: {Namespace: "ml", Name: "train", UID: uidA}, uidB: {Namespace: "web", Name: "serve", UID: uidB}},
		Containers: fakeContainers{cid('a'): {"ml", "train", "borrower"}, cid('b'): {"web", "serve", "tenant"}}}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	e.Reconcile(t.Context())
	if l, ret := ln.limitsOf(2, relA); ret != 0 || l.SoftLimit != 20*gib || l.HardLimit != 60*gib {
		t.Fatalf("borrower's limits %+v, %v; want soft 20 GiB, hard 60 GiB", l, ret)
	}
	start := func(pid uint32, rel string, bytes uint64) {
		t.Helper()
		spec := simnode.ProcessSpec{PID: pid, MemoryBytes: bytes}
		if rel != "" {
			spec.Cgroup = filepath.Join(ln.root, rel)
		}
		if err := ln.n.StartProcess(2, spec); err != nil {
			t.Fatal(err)
		}
	}
	start(1, relA, 50*gib)
	start(2, relB, 10*gib)
	e.Reconcile(t.Context())
	if err := ln.n.Allocate(2, 5*gib); err != nil { // free memory
		t.Fatal(err)
	}
	e.Reconcile(t.Context())
	evicted := func() []string {
		var out []string
		for _, s := range events.got {
			if strings.HasPrefix(s, "evicted") {
				out = append(out, s)
			}
		}
		return out
	}
	if got := evicted(); len(got) != 0 {
		t.Fatalf("after growing into free memory: %q, want no eviction", got)
	}
	mem, _ := ln.devs[2].GetMemoryInfo()
	start(3, "", mem.Free) // the GPU is full
	e.Reconcile(t.Context())
	if err := ln.n.Allocate(2, 20*gib); err != nil { // 35 GiB, within its 40
		t.Fatalf("the tenant within its guarantee on a full GPU: %v", err)
	}
	if ev := ln.n.Evictions(); len(ev) != 1 || ev[0].PID != 1 {
		t.Fatalf("simulated driver evicted %+v, want pid 1", ev)
	}
	e.Reconcile(t.Context())
	want := fmt.Sprintf("evicted ml/train/%s/borrower %s soft=%d before=%d after=0", uidA, g.UUID, 20*gib, 50*gib)
	if got := evicted(); len(got) != 1 || got[0] != want {
		t.Errorf("events %q, want one %q", got, want)
	}
	if got := testutil.ToFloat64(metrics.evictions); got != 1 {
		t.Errorf("gpud_memory_borrower_evictions_total = %v, want 1", got)
	}
	if n := strings.Count(logs.String(), `msg="gpu memory borrower evicted under memory pressure"`); n != 1 || !strings.Contains(logs.String(), "container=ml/train/borrower") {
		t.Errorf("%d eviction warnings, want 1 naming the borrower:\n%s", n, logs.String())
	}
	e.Reconcile(t.Context())
	if got := evicted(); len(got) != 1 {
		t.Errorf("a later poll: %q, want the one eviction only", got)
	}
	promtoolGather(t, reg)
}
