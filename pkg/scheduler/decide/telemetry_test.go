package decide

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/pkg/gputel"
	"github.com/gpud/gpud/pkg/scheduler/plan"
	"github.com/gpud/gpud/pkg/scheduler/view"
)

const gib = int64(1) << 30

// gpuUUID is the uuid of GPU index on node: its whole device's, else its
// MIG devices' parentUUID.
func (e *env) gpuUUID(node string, index int64) string {
	e.t.Helper()
	for _, s := range e.slices {
		if s.Spec.Pool.Name != node {
			continue
		}
		for _, d := range s.Spec.Devices {
			a := d.Attributes
			switch {
			case a["type"].StringValue != nil && *a["type"].StringValue == "gpu" && *a["index"].IntValue == index:
				return *a["uuid"].StringValue
			case a["type"].StringValue != nil && *a["type"].StringValue == "mig" && *a["parentIndex"].IntValue == index:
				return *a["parentUUID"].StringValue
			}
		}
	}
	e.t.Fatalf("no GPU %d on %s", index, node)
	return ""
}

// reportGPU sets what node's agent streams about GPU index.
func (e *env) reportGPU(node string, index int64, d gputel.Device) {
	e.t.Helper()
	e.streams(node).Devices[e.gpuUUID(node, index)] = d
}

// memoryOf is the memory capacity of device dev on node.
func (e *env) memoryOf(node, dev string) int64 {
	e.t.Helper()
	for _, s := range e.slices {
		for _, d := range s.Spec.Devices {
			if s.Spec.Pool.Name == node && d.Name == dev {
				q := d.Capacity["memory"].Value
				return q.Value()
			}
		}
	}
	e.t.Fatalf("no device %s on %s", dev, node)
	return 0
}

// bindOf returns the bind of the named pod.
func bindOf(t *testing.T, p plan.Plan, name string) plan.Bind {
	t.Helper()
	for _, b := range p.Binds {
		if b.Pod.Pod.Name == name {
			return b
		}
	}
	w, _ := pendingOf(p, name)
	t.Fatalf("%s not bound: %s: %s", name, w.Code, w.Message)
	return plan.Bind{}
}

// TestTelemetryUnhealthyAvoided: a device the agent reports unhealthy
// takes no new pod in the very next cycle (the ResourceSlice still
// publishes it untainted), whether whole, a fraction or a MIG slice of it;
// a pod with nowhere else to go says why.
func TestTelemetryUnhealthyAvoided(t *testing.T) {
	xid := gputel.Device{Unhealthy: true, HealthReason: "Xid 79"}
	t.Run("whole and fraction", func(t *testing.T) {
		for _, req := range []struct {
			name string
			pod  func(e *env)
		}{
			{"whole", func(e *env) { e.pod("new", reqs(gpus(1))) }},
			{"fraction", func(e *env) { e.pod("new", reqs(fraction("10Gi"))) }},
		} {
			t.Run(req.name, func(t *testing.T) {
				e := newEnv(t)
				e.node("a", "dgx-h100", nil)
				for i := range 7 {
					e.reportGPU("a", int64(i), xid)
				}
				e.reportGPU("a", 7, gputel.Device{})
				req.pod(e)
				b := bindOf(t, e.decide(Config{}), "new")
				if got := devicesOf(b); !slices.Equal(got, []string{"a/gpu-7"}) {
					t.Errorf("placed on %v, want the only healthy GPU a/gpu-7", got)
				}
			})
		}
	})
	t.Run("nowhere else: the reason names it", func(t *testing.T) {
		e := newEnv(t)
		e.node("a", "dgx-h100", nil)
		e.pod("seven", reqs(gpus(7)))
		p := e.decide(Config{})
		taken := devicesOf(bindOf(t, p, "seven"))
		e.apply(p)
		free := ""
		for i := range 8 {
			if dev := fmt.Sprint("gpu-", i); !slices.Contains(taken, "a/"+dev) {
				free = dev
			}
		}
		e.report("a", free, xid)
		e.pod("frac", reqs(fraction("10Gi")))
		p = e.decide(Config{})
		w, ok := pendingOf(p, "frac")
		want := free + " on a unhealthy (Xid 79, from telemetry)"
		if !ok || !strings.Contains(w.Message, want) {
			t.Fatalf("frac: %+v, want pending with %q", w, want)
		}
		t.Logf("frac: %s", w.Message)
		// Healthy again: it binds there.
		e.report("a", free, gputel.Device{})
		if got := devicesOf(bindOf(t, e.decide(Config{}), "frac")); !slices.Equal(got, []string{"a/" + free}) {
			t.Errorf("once healthy: placed on %v, want a/%s", got, free)
		}
	})
	t.Run("many: the first three named", func(t *testing.T) {
		e := newEnv(t)
		e.node("a", "dgx-h100", nil)
		for i := range 8 {
			e.reportGPU("a", int64(i), xid)
		}
		e.pod("new", reqs(gpus(1)))
		w, _ := pendingOf(e.decide(Config{}), "new")
		want := "gpu-0 on a unhealthy (Xid 79, from telemetry); gpu-1 on a unhealthy (Xid 79, from telemetry); " +
			"gpu-2 on a unhealthy (Xid 79, from telemetry) and 5 more"
		if !strings.HasSuffix(w.Message, want) {
			t.Errorf("new: %q, want it to end with %q", w.Message, want)
		}
	})
	t.Run("MIG slices of an unhealthy GPU", func(t *testing.T) {
		e := newEnv(t)
		e.node("a", "dgx-a100", nil, 0, 1)
		e.reportGPU("a", 0, xid)
		for i := range 3 {
			e.pod(fmt.Sprint("mig", i), reqs(migReq("1g.5gb")))
		}
		p := e.decide(Config{})
		for i := range 3 {
			for _, d := range devicesOf(bindOf(t, p, fmt.Sprint("mig", i))) {
				if !strings.HasPrefix(d, "a/gpu-1-mig-") {
					t.Errorf("mig%d on %s, want a MIG device of GPU 1", i, d)
				}
			}
		}
	})
	t.Run("other nodes unaffected", func(t *testing.T) {
		e := newEnv(t)
		e.node("a", "dgx-h100", nil)
		e.node("b", "dgx-h100", nil)
		for i := range 8 {
			e.reportGPU("a", int64(i), xid)
		}
		for i := range 3 {
			e.pod(fmt.Sprint("f", i), reqs(fraction("10Gi")))
		}
		for n, node := range bindsOf(e.decide(Config{})) {
			if node != "b" {
				t.Errorf("%s on %s, want b (every GPU of a reported unhealthy)", n, node)
			}
		}
	})
}

// sharedGPU fills node a (dgx-h100) but one GPU, with a pod of priority
// 1000, and puts a tenant of priority 0 asking asked on that GPU; it
// returns the GPU's device name and memory.
func sharedGPU(t *testing.T, e *env, asked string) (string, int64) {
	t.Helper()
	e.node("a", "dgx-h100", nil)
	e.pod("seven", reqs(gpus(7)), prio(1000))
	e.pod("tenant", reqs(fraction(asked)))
	p := e.decide(Config{})
	if len(p.Binds) != 2 {
		t.Fatalf("fill: %+v", p.Pending)
	}
	dev := strings.TrimPrefix(devicesOf(bindOf(t, p, "tenant"))[0], "a/")
	e.apply(p)
	return dev, e.memoryOf("a", dev)
}

// TestTelemetryMeasuredMemory: a GPU whose tenant uses more memory than
// it asked is offered to a new fraction only within its real free memory.
func TestTelemetryMeasuredMemory(t *testing.T) {
	e := newEnv(t)
	dev, total := sharedGPU(t, e, "20Gi")
	used := 70 * gib
	// Requests alone leave room for 40Gi.
	e.pod("frac", reqs(fraction("40Gi")))
	if p := e.decide(Config{}); len(p.Binds) != 1 {
		t.Fatalf("without telemetry: %+v", p.Pending)
	}
	e.report("a", dev, gputel.Device{MemoryUsedBytes: uint64(used), MemoryTotalBytes: uint64(total)})
	p := e.decide(Config{})
	w, ok := pendingOf(p, "frac")
	want := fmt.Sprintf("%s on a: tenants use 70Gi of %s, asked 20Gi (from telemetry)", dev, gibString(total))
	if !ok || !strings.Contains(w.Message, want) {
		t.Fatalf("frac: %+v, want pending with %q", w, want)
	}
	t.Logf("frac: %s", w.Message)
	if strings.Contains(w.Message, "no telemetry") {
		t.Errorf("a streams, yet: %s", w.Message)
	}
	// Within the real free memory it still fits.
	e.pending = nil
	fits := (total - used - gib) >> 20
	e.pod("small", reqs(fraction(fmt.Sprintf("%dMi", fits))))
	if got := devicesOf(bindOf(t, e.decide(Config{}), "small")); !slices.Equal(got, []string{"a/" + dev}) {
		t.Errorf("small placed on %v", got)
	}
	e.pending = nil
	e.pod("just-over", reqs(fraction(fmt.Sprintf("%dMi", (total-used+gib)>>20))))
	if p := e.decide(Config{}); len(p.Binds) != 0 {
		t.Errorf("just-over binds on %v beyond the real free memory", devicesOf(p.Binds[0]))
	}
}

// TestTelemetryOvercommit: with overcommit, a fraction may take memory the
// tenants asked for but do not use, up to the measured free memory less
// the margin, and not beyond; off, the requests hold.
func TestTelemetryOvercommit(t *testing.T) {
	e := newEnv(t)
	dev, total := sharedGPU(t, e, "60Gi")
	used := 10 * gib
	e.report("a", dev, gputel.Device{MemoryUsedBytes: uint64(used), MemoryTotalBytes: uint64(total)})
	margin := total / 100 * view.DefaultMarginPercent
	room := total - used - margin // beyond the 20Gi the requests leave
	tests := []struct {
		name string
		cfg  Config
		ask  int64
		fits bool
	}{
		{"off: requests hold", Config{}, 30 * gib, false},
		{"off: within the requests", Config{}, total - 60*gib - gib, true},
		{"on: within headroom less margin", Config{Overcommit: true}, room - gib, true},
		{"on: not into the margin", Config{Overcommit: true}, room + gib, false},
		{"on: a wider margin, within", Config{Overcommit: true, OvercommitMarginPercent: 50}, total/2 - used - gib, true},
		{"on: a wider margin, beyond", Config{Overcommit: true, OvercommitMarginPercent: 50}, total/2 - used + gib, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e.pending = nil
			e.pod("frac", reqs(fraction(fmt.Sprintf("%dMi", tc.ask>>20))))
			p := e.decide(tc.cfg)
			if got := len(p.Binds) == 1; got != tc.fits {
				w, _ := pendingOf(p, "frac")
				t.Fatalf("asks %s of %s (60Gi asked, %s used): bound %v, want %v; %s", gibString(tc.ask), gibString(total),
					gibString(used), got, tc.fits, w.Message)
			}
			if tc.fits {
				if got := devicesOf(p.Binds[0]); !slices.Equal(got, []string{"a/" + dev}) {
					t.Errorf("placed on %v", got)
				}
			}
		})
	}
	t.Run("on: no stream, requests hold", func(t *testing.T) {
		e.pending = nil
		saved := e.telemetry
		e.telemetry = map[string]*gputel.Node{}
		defer func() { e.telemetry = saved }()
		e.pod("frac", reqs(fraction("30Gi")))
		p := e.decide(Config{Overcommit: true})
		w, ok := pendingOf(p, "frac")
		if !ok || !strings.Contains(w.Message, "no telemetry from a: placed by requests only") {
			t.Errorf("frac: %+v", w)
		}
	})
}

// TestTelemetryFallbackMessage: nodes without a stream are judged by
// requests alone; a fraction that does not fit says so for them, and only
// when a telemetry listener runs.
func TestTelemetryFallbackMessage(t *testing.T) {
	e := newEnv(t)
	e.node("a", "dgx-h100", nil)
	e.node("b", "dgx-h100", nil)
	e.pod("fa", reqs(gpus(8)), onNode("a"))
	e.pod("fb", reqs(gpus(8)), onNode("b"))
	e.fill(t)
	e.pod("frac", reqs(fraction("10Gi")))
	w, _ := pendingOf(e.decide(Config{}), "frac")
	if strings.Contains(w.Message, "telemetry") {
		t.Errorf("no listener, yet: %s", w.Message)
	}
	e.reportGPU("a", 0, gputel.Device{MemoryUsedBytes: uint64(80 * gib)})
	w, _ = pendingOf(e.decide(Config{}), "frac")
	if !strings.Contains(w.Message, "no telemetry from b: placed by requests only") || strings.Contains(w.Message, "from a,") {
		t.Errorf("frac: %s", w.Message)
	}
	t.Logf("frac: %s", w.Message)
	// Whole-GPU pods do not depend on measured memory: no note.
	e.pending = nil
	e.pod("whole", reqs(gpus(1)))
	if w, _ := pendingOf(e.decide(Config{}), "whole"); strings.Contains(w.Message, "telemetry") {
		t.Errorf("whole: %s", w.Message)
	}
}

func lastCheckpoint(at time.Time) podOpt { return func(x *plan.Pod) { x.LastCheckpoint = at } }

// TestPreemptLeastWorkLost: among single victims, checkpointable first,
// then the least GPU-time since the last checkpoint (or the start): GPUs
// held count, and a recent checkpoint makes a long-running pod cheap.
func TestPreemptLeastWorkLost(t *testing.T) {
	t.Run("recent checkpoint", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			ckpt bool
			want string
		}{
			{"without: the later start goes", false, "young"},
			{"with: the fresh checkpoint goes", true, "old"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				e := newEnv(t)
				e.node("a", "dgx-h100", nil)
				e.pod("old", reqs(gpus(4)), prio(1), checkpointable())
				e.fill(t)
				e.now = e.now.Add(10 * time.Hour)
				e.pod("young", reqs(gpus(4)), prio(1), checkpointable())
				e.fill(t)
				e.now = e.now.Add(time.Hour)
				if tc.ckpt {
					lastCheckpoint(e.now.Add(-time.Minute))(e.bound[0])
				}
				e.pod("high", reqs(gpus(4)), prio(100))
				if got := evictedOf(e.decide(Config{})); !slices.Equal(got, []string{tc.want}) {
					t.Errorf("evicted %v, want [%s]", got, tc.want)
				}
			})
		}
	})
	t.Run("GPUs held count", func(t *testing.T) {
		e := newEnv(t)
		e.node("a", "dgx-h100", nil)
		e.pod("small", reqs(gpus(2)), prio(1))
		e.fill(t)
		e.now = e.now.Add(30 * time.Minute)
		e.pod("big", reqs(gpus(6)), prio(1))
		e.fill(t)
		e.now = e.now.Add(30 * time.Minute)
		// small: 2 GPUs × 1h; big: 6 GPUs × 30m.
		e.pod("high", reqs(gpus(2)), prio(100))
		if got := evictedOf(e.decide(Config{})); !slices.Equal(got, []string{"small"}) {
			t.Errorf("evicted %v, want [small] (2 GPU-hours lost, not 3)", got)
		}
	})
	t.Run("checkpointable before less work", func(t *testing.T) {
		e := newEnv(t)
		e.node("a", "dgx-h100", nil)
		e.pod("ckpt", reqs(gpus(4)), prio(1), checkpointable())
		e.fill(t)
		e.now = e.now.Add(10 * time.Hour)
		e.pod("plain", reqs(gpus(4)), prio(1))
		e.fill(t)
		e.pod("high", reqs(gpus(4)), prio(100))
		if got := evictedOf(e.decide(Config{})); !slices.Equal(got, []string{"ckpt"}) {
			t.Errorf("evicted %v, want [ckpt]", got)
		}
	})
	t.Run("a checkpoint of a pod that cannot resume counts for nothing", func(t *testing.T) {
		e := newEnv(t)
		e.node("a", "dgx-h100", nil)
		e.pod("old", reqs(gpus(4)), prio(1))
		e.fill(t)
		e.now = e.now.Add(10 * time.Hour)
		e.pod("young", reqs(gpus(4)), prio(1))
		e.fill(t)
		lastCheckpoint(e.now)(e.bound[0])
		e.pod("high", reqs(gpus(4)), prio(100))
		if got := evictedOf(e.decide(Config{})); !slices.Equal(got, []string{"young"}) {
			t.Errorf("evicted %v, want [young]", got)
		}
	})
}

// TestPreemptFreesMeasuredMemory: evicting a tenant that uses more than
// it asked frees what it uses, where the agent attributes memory to its
// claim; unattributed, only its request is counted as freed.
func TestPreemptFreesMeasuredMemory(t *testing.T) {
	for _, tc := range []struct {
		name       string
		attributed bool
		want       []string
	}{
		{"attributed", true, []string{"tenant"}},
		{"unattributed", false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			dev, total := sharedGPU(t, e, "20Gi")
			d := gputel.Device{MemoryUsedBytes: uint64(70 * gib), MemoryTotalBytes: uint64(total)}
			if tc.attributed {
				d.ClaimMemoryBytes = map[string]uint64{"claim-uid-tenant": uint64(70 * gib)}
			}
			e.report("a", dev, d)
			e.pod("high", reqs(fraction("40Gi")), prio(100))
			p := e.decide(Config{})
			if got := evictedOf(p); !slices.Equal(got, tc.want) {
				w, _ := pendingOf(p, "high")
				t.Errorf("evicted %v, want %v; high: %s", got, tc.want, w.Message)
			}
		})
	}
}
