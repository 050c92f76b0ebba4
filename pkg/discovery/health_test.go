package discovery

import (
	"context"
	"maps"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/simnode"
)

// update is one published health transition.
type update struct {
	uuid   string
	health gpu.Health
	reason string
}

// healthRig runs a HealthMonitor on a simulated node with a fake clock
// for its recovery periods. Tests run it inside a synctest bubble, so the
// event waits and the "no update" timeouts take no real time.
type healthRig struct {
	node    *simnode.Node
	clock   atomic.Int64 // unix nanoseconds
	updates chan update
	xids    chan uint64 // every Xid the pump fans out
	heard   chan update // every transition OnHealth's subscriber got
}

func startHealth(t *testing.T, cfg HealthConfig) *healthRig {
	t.Helper()
	r := &healthRig{node: simnode.NewBuiltin("dgx-h100"), updates: make(chan update, 64), xids: make(chan uint64, 64), heard: make(chan update, 64)}
	r.clock.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	cfg.WaitTimeout = 10 * time.Millisecond
	m := NewHealthMonitor(r.node, cfg, func(uuid string, h gpu.Health, reason string) {
		r.updates <- update{uuid, h, reason}
	}, nil)
	m.now = func() time.Time { return time.Unix(0, r.clock.Load()) }
	m.OnXid(func(_ string, xid uint64) {
		select {
		case r.xids <- xid:
		default:
		}
	})
	m.OnHealth(func(uuid string, h gpu.Health, reason string) {
		select {
		case r.heard <- update{uuid, h, reason}:
		default:
		}
	})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v", err)
		}
	})
	// Run registers the GPUs, then blocks in EventSet.Wait: once every
	// goroutine of the bubble is blocked, events get through.
	synctest.Wait()
	return r
}

func (r *healthRig) advance(d time.Duration) { r.clock.Add(int64(d)) }

func (r *healthRig) next(t *testing.T) update {
	t.Helper()
	select {
	case u := <-r.updates:
		return u
	case <-time.After(30 * time.Second):
		t.Fatal("no health update within 30s")
		return update{}
	}
}

// marker injects a critical Xid on GPU 6 and waits for its update: events
// of one set arrive in order, so everything injected before was handled.
func (r *healthRig) marker(t *testing.T, index int) {
	t.Helper()
	if err := r.node.InjectXid(index, 94); err != nil {
		t.Fatal(err)
	}
	if u := r.next(t); u.uuid != r.node.Device(index).UUID() {
		t.Fatalf("update before the marker: %+v", u)
	}
}

func TestHealthMonitorTransitions(t *testing.T) {
	const period = time.Minute
	tests := []struct {
		name        string
		ignore      []uint64
		inject      func(n *simnode.Node) error
		want        gpu.Health // "": no transition
		wantReason  string
		wantHealsTo gpu.Health // after the quiet period
	}{
		{name: "critical xid heals", inject: func(n *simnode.Node) error { return n.InjectXid(0, 48) },
			want: gpu.Unhealthy, wantReason: "xid 48", wantHealsTo: gpu.Healthy},
		{name: "double-bit ecc heals", inject: func(n *simnode.Node) error { return n.InjectECC(0, true) },
			want: gpu.Unhealthy, wantReason: "double-bit ECC error", wantHealsTo: gpu.Healthy},
		{name: "lost gpu never heals", inject: func(n *simnode.Node) error { return n.FallOffBus(0) },
			want: gpu.Lost, wantReason: "xid 79: gpu fell off the bus", wantHealsTo: gpu.Lost},
		{name: "application xid 13 ignored", inject: func(n *simnode.Node) error { return n.InjectXid(0, 13) }},
		{name: "application xid 109 ignored", inject: func(n *simnode.Node) error { return n.InjectXid(0, 109) }},
		{name: "single-bit ecc ignored", inject: func(n *simnode.Node) error { return n.InjectECC(0, false) }},
		{name: "configured ignore list", ignore: []uint64{48}, inject: func(n *simnode.Node) error { return n.InjectXid(0, 48) }},
		{name: "empty ignore list counts xid 13", ignore: []uint64{}, inject: func(n *simnode.Node) error { return n.InjectXid(0, 13) },
			want: gpu.Unhealthy, wantReason: "xid 13", wantHealsTo: gpu.Healthy},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := startHealth(t, HealthConfig{RecoveryPeriod: period, IgnoredXids: tc.ignore})
				uuid := r.node.Device(0).UUID()
				if err := tc.inject(r.node); err != nil {
					t.Fatal(err)
				}
				if tc.want == "" {
					r.marker(t, 6)
					return
				}
				if u := r.next(t); u != (update{uuid, tc.want, tc.wantReason}) {
					t.Fatalf("update = %+v, want %v %q", u, tc.want, tc.wantReason)
				}
				r.advance(period + time.Second)
				if tc.wantHealsTo == gpu.Healthy {
					if u := r.next(t); u != (update{uuid, gpu.Healthy, ""}) {
						t.Fatalf("after the quiet period: %+v, want Healthy", u)
					}
					return
				}
				r.marker(t, 6) // GPU 6 Unhealthy; GPU 0 must not have changed
				r.advance(2 * period)
				if u := r.next(t); u.uuid != r.node.Device(6).UUID() || u.health != gpu.Healthy {
					t.Fatalf("after two periods: %+v, want only GPU 6 healed", u)
				}
			})
		})
	}
}

func TestHealthMonitorQuietPeriodRestartsOnNewError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const period = time.Minute
		r := startHealth(t, HealthConfig{RecoveryPeriod: period})
		uuid := r.node.Device(0).UUID()
		if err := r.node.InjectXid(0, 48); err != nil {
			t.Fatal(err)
		}
		if u := r.next(t); u != (update{uuid, gpu.Unhealthy, "xid 48"}) {
			t.Fatalf("update = %+v", u)
		}
		r.advance(period / 2)
		if err := r.node.InjectXid(0, 48); err != nil { // same error again: no new transition
			t.Fatal(err)
		}
		r.marker(t, 6)
		// A full period after the first error but not after the second: the
		// markers' events make the monitor run its recovery check in between.
		r.advance(period/2 + time.Second)
		r.marker(t, 5)
		r.marker(t, 4)
		r.advance(period / 2)
		got := map[string]gpu.Health{}
		for range 2 { // GPUs 0 and 6 are quiet for a period now; 4 and 5 are not
			u := r.next(t)
			got[u.uuid] = u.health
		}
		want := map[string]gpu.Health{uuid: gpu.Healthy, r.node.Device(6).UUID(): gpu.Healthy}
		if !maps.Equal(got, want) {
			t.Fatalf("updates after the quiet period = %v, want %v", got, want)
		}
	})
}

// TestHealthMonitorMIGSliceError checks that an Xid the driver attributes to
// one GPU instance makes only that MIG device Unhealthy, and that it heals.
func TestHealthMonitorMIGSliceError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const period = time.Minute
		r := startHealth(t, HealthConfig{RecoveryPeriod: period})
		d, _ := r.node.DeviceGetHandleByIndex(0)
		if _, ret := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
		for range 2 {
			info, _ := d.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_3_SLICE)
			gi, ret := d.CreateGpuInstance(&info)
			if ret != nvml.SUCCESS {
				t.Fatal(ret)
			}
			ci, _ := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
			if _, ret := gi.CreateComputeInstance(&ci); ret != nvml.SUCCESS {
				t.Fatal(ret)
			}
		}
		hit, _ := d.GetMigDeviceHandleByIndex(0)
		hitUUID, _ := hit.GetUUID()
		if err := r.node.InjectMIGXid(hitUUID, 48); err != nil {
			t.Fatal(err)
		}
		u := r.next(t)
		if u.uuid != hitUUID || u.health != gpu.Unhealthy || !strings.Contains(u.reason, "xid 48") {
			t.Fatalf("update %+v, want MIG device %s Unhealthy with xid 48", u, hitUUID)
		}
		// The GPU and the other slice got no update: the next one is the marker.
		r.marker(t, 6)
		r.advance(period + time.Second)
		got := map[string]gpu.Health{}
		for range 2 {
			u := r.next(t)
			got[u.uuid] = u.health
		}
		if got[hitUUID] != gpu.Healthy || got[r.node.Device(6).UUID()] != gpu.Healthy {
			t.Fatalf("after the quiet period: %v, want the slice and GPU 6 Healthy", got)
		}
	})
}

// TestHealthFansOutEveryXid: the monitor is the node's one event pump; its
// Xid subscribers (telemetry) get every Xid, the ignored ones too, while
// only critical ones change health.
func TestHealthFansOutEveryXid(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := startHealth(t, HealthConfig{RecoveryPeriod: time.Minute})
		if err := r.node.InjectXid(2, 43); err != nil { // ignored by default
			t.Fatal(err)
		}
		select {
		case x := <-r.xids:
			if x != 43 {
				t.Fatalf("subscriber got Xid %d, want 43", x)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("an ignored Xid did not reach the subscriber")
		}
		select {
		case u := <-r.updates:
			t.Fatalf("an ignored Xid changed health: %+v", u)
		case <-time.After(100 * time.Millisecond):
		}
	})
}

// The Events' subscriber hears each published transition, and nothing an
// ignored Xid does.
func TestHealthSubscriberHearsTransitions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := startHealth(t, HealthConfig{RecoveryPeriod: time.Minute})
		uuid := r.node.Device(3).UUID()
		if err := r.node.InjectXid(3, 13); err != nil { // ignored
			t.Fatal(err)
		}
		if err := r.node.InjectXid(3, 48); err != nil {
			t.Fatal(err)
		}
		if u := r.next(t); u != (update{uuid, gpu.Unhealthy, "xid 48"}) {
			t.Fatalf("published %+v", u)
		}
		select {
		case u := <-r.heard:
			if u != (update{uuid, gpu.Unhealthy, "xid 48"}) {
				t.Fatalf("subscriber heard %+v, want GPU 3 Unhealthy, xid 48", u)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("subscriber heard nothing of the transition")
		}
		r.advance(time.Minute + time.Second)
		r.next(t)
		if u := <-r.heard; u != (update{uuid, gpu.Healthy, ""}) {
			t.Fatalf("subscriber heard %+v, want GPU 3 Healthy", u)
		}
	})
}
