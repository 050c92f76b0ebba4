package decide

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gpud/gpud/pkg/gputel"
)

// BenchmarkDecide: one cycle on 64 dgx-h100 nodes, half full, with 500
// pending pods of every kind (whole, fractions, MIG, gangs, priorities);
// the -telemetry and -overcommit cases with a stream from every node.
func BenchmarkDecide(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	e := newEnv(b)
	for i := range 64 {
		e.node(fmt.Sprintf("n%02d", i), "dgx-h100", map[string]string{DefaultRackLabel: fmt.Sprint("r", i/8)})
	}
	for i := range 200 {
		e.pod(fmt.Sprint("run", i), reqs(randomRequest(r)), prio(int32(r.IntN(3))), estimate(time.Duration(1+r.IntN(90))*time.Minute))
	}
	p := e.decide(Config{})
	e.apply(p)
	e.pending = nil
	for i := range 500 {
		if i%25 == 0 {
			g := fmt.Sprint("g", i)
			e.gang(g, 4)
			for k := range 4 {
				e.pod(fmt.Sprintf("%s-%d", g, k), reqs(gpus(8)), prio(2), group(g))
			}
			continue
		}
		e.pod(fmt.Sprint("p", i), reqs(randomRequest(r)), prio(int32(r.IntN(4))))
	}
	b.Logf("%d bound, %d pending", len(e.bound), len(e.pending))
	// Every node streams. Quiet: each GPU healthy, using what its
	// fractions asked (decisions as without telemetry: its cost alone).
	// Busy: measured memory up to a quarter of the GPU above that, and
	// one GPU in 64 unhealthy.
	quiet, busy := benchTelemetry(r, e, false), benchTelemetry(r, e, true)
	for _, tc := range []struct {
		name      string
		typical   int
		telemetry map[string]*gputel.Node
		cfg       Config
	}{
		{"typical", 0, nil, Config{}},
		{"no-typical", -1, nil, Config{}},
		{"typical-telemetry-quiet", 0, quiet, Config{}},
		{"typical-telemetry-busy", 0, busy, Config{}},
		{"typical-overcommit-busy", 0, busy, Config{Overcommit: true}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var last int
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				s := e.snapshot()
				s.Telemetry = tc.telemetry
				cfg := tc.cfg
				cfg.TypicalRequests = tc.typical
				b.StartTimer()
				last = len(New(cfg).Decide(s).Binds)
			}
			b.ReportMetric(float64(last), "binds")
		})
	}
}

// benchTelemetry is a stream from every node of e, quiet or busy (see
// BenchmarkDecide).
func benchTelemetry(r *rand.Rand, e *env, busy bool) map[string]*gputel.Node {
	saved := e.telemetry
	defer func() { e.telemetry = saved }()
	e.telemetry = nil
	asked := map[string]int64{}
	for _, p := range e.bound {
		for _, c := range p.Claims {
			if c == nil || c.Status.Allocation == nil {
				continue
			}
			for _, res := range c.Status.Allocation.Devices.Results {
				if q, ok := res.ConsumedCapacity["memory"]; ok && res.ShareID != nil {
					asked[res.Pool+"/"+res.Device] += q.Value()
				}
			}
		}
	}
	for _, s := range e.slices {
		for _, d := range s.Spec.Devices {
			if t := d.Attributes["type"].StringValue; t == nil || *t != "gpu" {
				continue
			}
			q := d.Capacity["memory"].Value
			total := q.Value()
			used, down := asked[s.Spec.Pool.Name+"/"+d.Name], false
			if busy {
				used, down = min(used+r.Int64N(total/4), total), r.IntN(64) == 0
			}
			e.report(s.Spec.Pool.Name, d.Name, gputel.Device{Unhealthy: down, HealthReason: "Xid 79",
				MemoryUsedBytes: uint64(used), MemoryTotalBytes: uint64(total), SMUtilPercent: 50})
		}
	}
	return e.telemetry
}
