package decide

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpud/gpud/pkg/allocator/jobs"
)

// TestPropertyRandomCycles runs random clusters through several cycles,
// carrying each plan out: checkPlan holds every time (no over-allocation
// on a fresh view, no gang bound below minMember, every pending pod
// answered once, evictions only of running pods, the view restored).
func TestPropertyRandomCycles(t *testing.T) {
	seeds := 12
	if testing.Short() {
		seeds = 3
	}
	for seed := range seeds {
		t.Run(fmt.Sprint("seed-", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(seed), 7))
			e := newEnv(t)
			for i := range 2 + r.IntN(3) {
				labels := map[string]string{DefaultRackLabel: fmt.Sprint("r", r.IntN(2))}
				if r.IntN(2) == 0 {
					e.node(fmt.Sprint("h", i), "dgx-h100", labels)
				} else {
					e.node(fmt.Sprint("a", i), "dgx-a100", labels, r.Perm(8)[:r.IntN(5)]...)
				}
			}
			if r.IntN(2) == 0 {
				e.queues = []jobs.Queue{
					{Name: "q0", Quota: jobs.Quota{Guaranteed: jobs.Resources{GPUMilli: 4000}, Limit: jobs.Resources{GPUMilli: int64(4000 + r.IntN(12000))}}},
					{Name: "q1", Quota: jobs.Quota{Guaranteed: jobs.Resources{GPUMilli: 4000}}},
				}
			}
			id := 0
			for cycle := range 5 {
				for range 4 + r.IntN(12) {
					id++
					opts := []podOpt{prio(int32(r.IntN(4)))}
					if e.queues != nil {
						opts = append(opts, queue(fmt.Sprint("q", r.IntN(2))))
					}
					if r.IntN(3) == 0 {
						opts = append(opts, checkpointable())
					}
					if r.IntN(2) == 0 {
						opts = append(opts, estimate(time.Duration(1+r.IntN(120))*time.Minute))
					}
					req := randomRequest(r)
					if r.IntN(6) == 0 {
						g := fmt.Sprint("g", id)
						size := 2 + r.IntN(3)
						e.gang(g, int32(1+r.IntN(size)))
						for k := range size - r.IntN(2) {
							e.pod(fmt.Sprintf("p%d-%d", id, k), reqs(req), append(opts, group(g))...)
						}
						continue
					}
					e.pod(fmt.Sprint("p", id), reqs(req), opts...)
				}
				p := e.decide(Config{})
				t.Logf("cycle %d: %d binds, %d evictions, %d pending", cycle, len(p.Binds), len(p.Evictions), len(p.Pending))
				// Terminating pods of the last cycle are gone now.
				var gone []string
				for _, b := range e.bound {
					if b.Pod.DeletionTimestamp != nil || r.IntN(6) == 0 {
						gone = append(gone, b.Key())
					}
				}
				e.finish(gone...)
				e.apply(p)
				e.now = e.now.Add(10 * time.Minute)
			}
		})
	}
}

func randomRequest(r *rand.Rand) resourceapi.DeviceRequest {
	switch r.IntN(4) {
	case 0:
		return gpus([]int64{1, 2, 4, 8}[r.IntN(4)])
	case 1:
		return fraction(fmt.Sprintf("%dGi", 2+r.IntN(40)))
	case 2:
		return migReq([]string{"1g.10gb", "2g.20gb", "3g.40gb", "1g.5gb", "3g.20gb"}[r.IntN(5)])
	}
	return gpus(1)
}
