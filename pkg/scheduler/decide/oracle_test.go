package decide

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpud/gpud/pkg/scheduler/plan"
)

// oracle re-checks allocations against the published slices without
// pkg/scheduler/view: an exclusive device taken once and never shared at
// the same time, fractions' memory within the GPU's, and on each GPU the
// whole device and its MIG devices never together, MIG placements
// disjoint.
func oracle(t testing.TB, e *env, p plan.Plan) {
	t.Helper()
	type key struct{ pool, dev string }
	devs := map[key]*resourceapi.Device{}
	for _, s := range e.slices {
		for i := range s.Spec.Devices {
			devs[key{s.Spec.Pool.Name, s.Spec.Devices[i].Name}] = &s.Spec.Devices[i]
		}
	}
	var all []*resourceapi.AllocationResult
	for _, b := range e.bound {
		for _, c := range b.Claims {
			if c != nil && c.Status.Allocation != nil {
				all = append(all, c.Status.Allocation)
			}
		}
	}
	for _, b := range p.Binds {
		for _, a := range b.Allocations {
			if a.Claim.Status.Allocation == nil {
				all = append(all, a.Result)
			}
		}
	}
	excl := map[key]int{}
	shared := map[key]int{}
	mem := map[key]resource.Quantity{}
	type gpu struct {
		pool  string
		index int64
	}
	whole := map[gpu]bool{}
	slicesUsed := map[gpu][]bool{}
	for _, a := range all {
		for _, r := range a.Devices.Results {
			k := key{r.Pool, r.Device}
			d := devs[k]
			if d == nil {
				t.Errorf("oracle: %s/%s is not published", r.Pool, r.Device)
				continue
			}
			if r.ShareID == nil {
				excl[k]++
			} else {
				shared[k]++
				m := mem[k]
				m.Add(r.ConsumedCapacity["memory"])
				mem[k] = m
			}
			switch *d.Attributes["type"].StringValue {
			case "gpu":
				whole[gpu{r.Pool, *d.Attributes["index"].IntValue}] = true
			case "mig":
				g := gpu{r.Pool, *d.Attributes["parentIndex"].IntValue}
				if slicesUsed[g] == nil {
					slicesUsed[g] = make([]bool, 8)
				}
				st, sz := *d.Attributes["placementStart"].IntValue, *d.Attributes["placementSize"].IntValue
				for s := st; s < st+sz; s++ {
					if slicesUsed[g][s] {
						t.Errorf("oracle: %s GPU %d memory slice %d taken twice", g.pool, g.index, s)
					}
					slicesUsed[g][s] = true
				}
			}
		}
	}
	for k, n := range excl {
		if n > 1 || (n == 1 && shared[k] > 0) {
			t.Errorf("oracle: %s/%s taken %d times exclusively and %d shared", k.pool, k.dev, n, shared[k])
		}
	}
	for k, m := range mem {
		if c := devs[k].Capacity["memory"].Value; m.Cmp(c) > 0 {
			t.Errorf("oracle: %s/%s fractions take %s of %s", k.pool, k.dev, m.String(), c.String())
		}
	}
	for g := range slicesUsed {
		if whole[g] {
			t.Errorf("oracle: %s GPU %d allocated whole and as MIG", g.pool, g.index)
		}
	}
}
