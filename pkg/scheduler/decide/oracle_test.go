package decide

import (
	"encoding/json"
	"testing"

	"github.com/gpud/gpud/pkg/gputel"
	"github.com/gpud/gpud/pkg/scheduler/view"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpud/gpud/pkg/scheduler/plan"
)

// oracle re-checks allocations against the published slices without
// pkg/scheduler/view: an exclusive device taken once and never shared at
// the same time, fractions' memory within the GPU's, and on each GPU the
// whole device and its MIG devices never together, MIG placements
// disjoint. With telemetry: no new allocation on a device reported
// unhealthy (or on its GPU), and new fractions on a reported GPU within
// its real free memory (capacity less the larger of the requested and the
// measured use; with overcommit, less the measured use and the margin
// where that is less than the requests). On a GPU whose memoryLimitMode
// is "driver", what borrowers (claims whose opaque memoryLimit is above
// their request) use above their requests, as attributed, is not taken:
// the driver evicts it for the new fractions.
func oracle(t testing.TB, e *env, p plan.Plan, cfg Config) {
	t.Helper()
	type key struct{ pool, dev string }
	devs := map[key]*resourceapi.Device{}
	for _, s := range e.slices {
		for i := range s.Spec.Devices {
			devs[key{s.Spec.Pool.Name, s.Spec.Devices[i].Name}] = &s.Spec.Devices[i]
		}
	}
	var all []*resourceapi.AllocationResult
	before := map[key]resource.Quantity{} // fraction memory bound before the cycle
	borrowed := map[key]int64{}           // borrowers' attributed use above their requests, on driver-mode GPUs
	for _, b := range e.bound {
		for _, c := range b.Claims {
			if c == nil || c.Status.Allocation == nil {
				continue
			}
			for _, r := range c.Status.Allocation.Devices.Results {
				if r.ShareID != nil {
					k := key{r.Pool, r.Device}
					m := before[k]
					q := r.ConsumedCapacity["memory"]
					m.Add(q)
					before[k] = m
					d := devs[k]
					if d == nil || d.Attributes["memoryLimitMode"].StringValue == nil || *d.Attributes["memoryLimitMode"].StringValue != "driver" {
						continue
					}
					rep, _ := reported(e, r.Pool, d)
					if used, ok := rep.ClaimMemoryBytes[string(c.UID)]; ok && specMemoryLimit(t, c) > q.Value() {
						borrowed[k] += max(int64(used)-q.Value(), 0)
					}
				}
			}
		}
	}
	for _, b := range p.Binds {
		for _, a := range b.Allocations {
			if a.Claim.Status.Allocation != nil || a.Result == nil {
				continue
			}
			for _, r := range a.Result.Devices.Results {
				d := devs[key{r.Pool, r.Device}]
				if d == nil {
					continue
				}
				if why := reportedDown(e, r.Pool, d); why != "" {
					t.Errorf("oracle: %s placed on %s/%s, reported unhealthy (%s)", b.Pod.Key(), r.Pool, r.Device, why)
				}
			}
		}
	}
	for _, b := range e.bound {
		for _, c := range b.Claims {
			if c != nil && c.Status.Allocation != nil {
				all = append(all, c.Status.Allocation)
			}
		}
	}
	// added is what the plan's fractions (requests with capacity) take.
	added := map[key]int64{}
	for _, b := range p.Binds {
		for _, a := range b.Allocations {
			if a.Claim.Status.Allocation != nil || a.Result == nil {
				continue
			}
			for _, r := range a.Result.Devices.Results {
				q, ok := r.ConsumedCapacity["memory"]
				if ok && r.ShareID != nil && isFraction(a.Claim, r.Request) {
					added[key{r.Pool, r.Device}] += q.Value()
				}
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
			typ := ""
			if a, ok := d.Attributes["type"]; ok && a.StringValue != nil {
				typ = *a.StringValue // gpud's devices; other drivers' have none
			}
			switch typ {
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
		c := devs[k].Capacity["memory"].Value
		rep, measured := reported(e, k.pool, devs[k])
		// With overcommit, earlier cycles may have placed beyond the
		// capacity: only what this plan adds to is held to it (without a
		// measurement) or to the real free memory (below).
		if m.Cmp(c) > 0 && (!cfg.Overcommit || (!measured && added[k] > 0)) {
			t.Errorf("oracle: %s/%s fractions take %s of %s", k.pool, k.dev, m.String(), c.String())
		}
		if !measured {
			continue
		}
		b0 := before[k]
		total, r0, used := c.Value(), b0.Value(), max(int64(rep.MemoryUsedBytes)-borrowed[k], 0)
		taken := max(r0, used)
		if pct := cfg.OvercommitMarginPercent; cfg.Overcommit && used < r0 {
			if pct <= 0 {
				pct = view.DefaultMarginPercent
			}
			taken = max(used, min(r0, used+total/100*int64(pct)))
		}
		if add := added[k]; add > 0 && add > total-taken {
			t.Errorf("oracle: %s/%s new fractions take %d bytes, real free memory is %d (requested %d, measured %d, overcommit %v)",
				k.pool, k.dev, add, total-taken, r0, used, cfg.Overcommit)
		}
	}
	for g := range slicesUsed {
		if whole[g] {
			t.Errorf("oracle: %s GPU %d allocated whole and as MIG", g.pool, g.index)
		}
	}
}

// reported is what node's agent streams about device d (by its uuid), and
// whether it streams anything about it.
func reported(e *env, node string, d *resourceapi.Device) (gputel.Device, bool) {
	nt := e.telemetry[node]
	if nt == nil {
		return gputel.Device{}, false
	}
	if u := d.Attributes["uuid"].StringValue; u != nil {
		r, ok := nt.Devices[*u]
		return r, ok
	}
	return gputel.Device{}, false
}

// reportedDown is why device d or its GPU is reported unhealthy, "" if
// neither is.
func reportedDown(e *env, node string, d *resourceapi.Device) string {
	nt := e.telemetry[node]
	if nt == nil {
		return ""
	}
	for _, attr := range []resourceapi.QualifiedName{"uuid", "parentUUID"} {
		if u := d.Attributes[attr].StringValue; u != nil {
			if r, ok := nt.Devices[*u]; ok && r.Unhealthy {
				return r.HealthReason + " "
			}
		}
	}
	return ""
}

// isFraction reports whether request req of claim c asks for capacity (a
// fraction), not a whole device.
func isFraction(c *resourceapi.ResourceClaim, req string) bool {
	for _, r := range c.Spec.Devices.Requests {
		if r.Name == req && r.Exactly != nil && r.Exactly.Capacity != nil {
			return len(r.Exactly.Capacity.Requests) > 0
		}
	}
	return false
}

// specMemoryLimit is the memoryLimit in bytes of claim c's opaque GPUConfig
// (the last of driver gpu.gpud.io), 0 without one.
func specMemoryLimit(t testing.TB, c *resourceapi.ResourceClaim) int64 {
	var limit int64
	for _, cfg := range c.Spec.Devices.Config {
		if cfg.Opaque == nil || cfg.Opaque.Driver != view.DriverName {
			continue
		}
		var g struct {
			MemoryLimit *resource.Quantity `json:"memoryLimit"`
		}
		if err := json.Unmarshal(cfg.Opaque.Parameters.Raw, &g); err != nil {
			t.Fatalf("oracle: claim %s: opaque config: %v", c.Name, err)
		}
		limit = 0
		if g.MemoryLimit != nil {
			limit = g.MemoryLimit.Value()
		}
	}
	return limit
}
