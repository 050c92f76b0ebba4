package decide

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpud/gpud/pkg/allocator/jobs"
	"github.com/gpud/gpud/pkg/gputel"
	"github.com/gpud/gpud/pkg/scheduler/plan"
)

// TestPropertyRandomCycles runs random clusters through several cycles,
// carrying each plan out: checkPlan holds every time (no over-allocation
// on a fresh view, no gang bound below minMember, every pending pod
// answered once, evictions only of running pods, the view restored).
func TestPropertyRandomCycles(t *testing.T) {
	seeds := 12
	if n, err := strconv.Atoi(os.Getenv("DECIDE_SEEDS")); err == nil {
		seeds = n
	}
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
			if e.queues != nil && r.IntN(2) == 0 {
				now := e.now.Unix()
				start := now + int64(r.IntN(3)-1)*1800
				e.res = []jobs.Reservation{{Name: "r", Queue: "q1", Nodes: []string{e.nodes[0].Name}, Start: start, End: start + 3600}}
			}
			if r.IntN(2) == 0 {
				e.pdbs = []*policyv1.PodDisruptionBudget{{
					ObjectMeta: metav1.ObjectMeta{Name: "pdb", Namespace: "default"},
					Spec:       policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "kept"}}},
					Status:     policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: int32(r.IntN(2))},
				}}
			}
			// Half the seeds stream telemetry (random health and measured
			// memory each cycle), a third of those with overcommit.
			tele, cfg := r.IntN(2) == 0, Config{}
			if tele && r.IntN(3) == 0 {
				cfg.Overcommit, cfg.OvercommitMarginPercent = true, r.IntN(30)
			}
			id := 0
			for cycle := range 5 {
				if tele {
					randomTelemetry(r, e)
				}
				for range 4 + r.IntN(12) {
					id++
					opts := []podOpt{prio(int32(r.IntN(4)))}
					if e.queues != nil {
						opts = append(opts, queue(fmt.Sprint("q", r.IntN(2))))
					}
					if r.IntN(3) == 0 {
						opts = append(opts, checkpointable())
					}
					if r.IntN(4) == 0 {
						opts = append(opts, labelled("app", "kept"))
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
				p := e.decide(cfg)
				t.Logf("cycle %d: %d binds, %d evictions, %d pending", cycle, len(p.Binds), len(p.Evictions), len(p.Pending))
				if len(p.Evictions) > 0 {
					verifyPreemptors(t, e, p, cfg)
				}
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

// randomTelemetry streams from most nodes: each GPU (whole device, else
// its MIG devices' parent) unhealthy now and then, and a measured memory
// use around what its fractions asked, attributed to their claims on
// half the GPUs.
func randomTelemetry(r *rand.Rand, e *env) {
	e.telemetry = map[string]*gputel.Node{}
	asked := map[string]int64{} // node/device -> fractions' memory
	type share struct {
		uid   string
		bytes int64
	}
	shares := map[string][]share{} // node/device -> fractions
	for _, b := range e.bound {
		for _, c := range b.Claims {
			if c == nil || c.Status.Allocation == nil {
				continue
			}
			for _, res := range c.Status.Allocation.Devices.Results {
				if q, ok := res.ConsumedCapacity["memory"]; ok && res.ShareID != nil {
					asked[res.Pool+"/"+res.Device] += q.Value()
					shares[res.Pool+"/"+res.Device] = append(shares[res.Pool+"/"+res.Device], share{string(c.UID), q.Value()})
				}
			}
		}
	}
	for _, n := range e.nodes {
		if r.IntN(4) == 0 {
			continue // no stream from this node
		}
		nt := e.streams(n.Name)
		for _, s := range e.slices {
			if s.Spec.Pool.Name != n.Name {
				continue
			}
			for _, d := range s.Spec.Devices {
				a := d.Attributes
				uuid := a["uuid"].StringValue
				if a["type"].StringValue == nil || *a["type"].StringValue != "gpu" || uuid == nil {
					if p := a["parentUUID"].StringValue; p != nil && r.IntN(40) == 0 {
						nt.Devices[*p] = gputel.Device{Unhealthy: true, HealthReason: "Xid 48"}
					}
					continue
				}
				q := d.Capacity["memory"].Value
				total := q.Value()
				used := asked[n.Name+"/"+d.Name]
				switch r.IntN(3) {
				case 0:
					used += r.Int64N(total/4 + 1) // tenants use more than asked
				case 1:
					used = r.Int64N(used + 1) // less
				}
				var perClaim map[string]uint64
				if sh := shares[n.Name+"/"+d.Name]; len(sh) > 0 && r.IntN(2) == 0 {
					perClaim, used = map[string]uint64{}, 0
					for _, x := range sh {
						b := r.Int64N(2*x.bytes + 1) // from idle to twice the request
						perClaim[x.uid] += uint64(b)
						used += b
					}
				}
				nt.Devices[*uuid] = gputel.Device{Unhealthy: r.IntN(10) == 0, HealthReason: "Xid 79",
					MemoryUsedBytes: uint64(min(used, total)), MemoryTotalBytes: uint64(total), ClaimMemoryBytes: perClaim}
			}
		}
	}
}

// verifyPreemptors: with the plan's binds done and every victim (and
// terminating pod) gone, each preemptor the plan nominated binds, alone.
// The victims' measured memory goes with them (what the agent attributed
// to their claims, else as much as they asked).
func verifyPreemptors(t *testing.T, e *env, p plan.Plan, cfg Config) {
	t.Helper()
	gone := map[*plan.Pod]bool{}
	for _, ev := range p.Evictions {
		gone[ev.Victim] = true
	}
	var bound, pre []*plan.Pod
	for _, b := range e.bound {
		if !gone[b] && b.Pod.DeletionTimestamp == nil {
			bound = append(bound, b)
		}
	}
	for _, b := range p.Binds {
		bound = append(bound, b.Pod) // claims not written yet: the view counts them through Assume below
	}
	for _, x := range p.Pending {
		if x.Code == CodePreempting && strings.HasPrefix(x.Message, "preempting") {
			pre = append(pre, x.Pod)
		}
	}
	s := e.snapshotOf(bound, pre)
	s.Telemetry = withoutVictims(e, p)
	for _, b := range p.Binds {
		if err := s.View.Assume(b.Allocations...); err != nil {
			t.Fatal(err)
		}
	}
	for _, x := range pre {
		for _, y := range p.Pending {
			if y.Pod == x {
				x.Pod.Status.NominatedNodeName = y.NominatedNode
			}
		}
	}
	p2 := New(cfg).Decide(s)
	got := map[*plan.Pod]bool{}
	for _, b := range p2.Binds {
		got[b.Pod] = true
	}
	for _, x := range pre {
		if !got[x] {
			w, _ := pendingOf(p2, x.Pod.Name)
			t.Errorf("preemptor %s does not bind once its victims are gone: %s", x.Key(), w.Message)
			for _, y := range p.Pending {
				if y.Pod == x {
					t.Logf("its plan: %s nominated %s queue %q", y.Message, y.NominatedNode, x.Queue)
				}
			}
			for _, ev := range p.Evictions {
				t.Logf("evict %s on %s for %s (%s)", ev.Victim.Key(), ev.Victim.Pod.Spec.NodeName, ev.For.Key(), ev.Why)
			}
			t.Logf("reservations %+v now %d", e.res, e.now.Unix())
			for _, y := range p.Pending {
				if y.NominatedNode != "" {
					t.Logf("nominated %s on %s: %s", y.Pod.Key(), y.NominatedNode, y.Message)
				}
			}
			for _, b := range p2.Binds {
				t.Logf("verify bind %s on %s", b.Pod.Key(), b.Node)
			}
			for _, y := range p2.Pending {
				t.Logf("verify pending %s: %s", y.Pod.Key(), y.Message)
			}
		}
	}
}

// withoutVictims is e's telemetry less the memory the plan's victims and
// the terminating pods use (as attributed to their claims, else as they
// asked), on their shared GPUs.
func withoutVictims(e *env, p plan.Plan) map[string]*gputel.Node {
	if e.telemetry == nil {
		return nil
	}
	gone := map[*plan.Pod]bool{}
	for _, ev := range p.Evictions {
		gone[ev.Victim] = true
	}
	out := map[string]*gputel.Node{}
	for n, nt := range e.telemetry {
		cp := *nt
		cp.Devices = maps.Clone(nt.Devices)
		out[n] = &cp
	}
	for _, b := range e.bound {
		if !gone[b] && b.Pod.DeletionTimestamp == nil {
			continue
		}
		for _, c := range b.Claims {
			if c == nil || c.Status.Allocation == nil {
				continue
			}
			for _, res := range c.Status.Allocation.Devices.Results {
				q, ok := res.ConsumedCapacity["memory"]
				nt := out[res.Pool]
				if !ok || res.ShareID == nil || nt == nil {
					continue
				}
				uuid := e.uuidOf(res.Pool, res.Device)
				if d, ok := nt.Devices[uuid]; ok {
					use, attributed := d.ClaimMemoryBytes[string(c.UID)]
					if !attributed {
						use = uint64(q.Value())
					}
					d.MemoryUsedBytes -= min(d.MemoryUsedBytes, use)
					nt.Devices[uuid] = d
				}
			}
		}
	}
	return out
}
