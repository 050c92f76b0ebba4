package decide

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkDecide: one cycle on 64 dgx-h100 nodes, half full, with 500
// pending pods of every kind (whole, fractions, MIG, gangs, priorities).
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
	for _, tc := range []struct {
		name    string
		typical int
	}{{"typical", 0}, {"no-typical", -1}} {
		b.Run(tc.name, func(b *testing.B) {
			var last int
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				s := e.snapshot()
				b.StartTimer()
				last = len(New(Config{TypicalRequests: tc.typical}).Decide(s).Binds)
			}
			b.ReportMetric(float64(last), "binds")
		})
	}
}
