package simulate

import (
	"math/rand"
	"slices"

	"github.com/gpud/gpud/pkg/allocator"
)

// artifactDrawsBeforePerm is how many values the FGD artifact takes from its
// global math/rand between tuning the workload and drawing the node-name
// prefixes. We attribute them to kube-scheduler's informers, whose
// reflectors each draw a jittered watch timeout from the global source when
// the scheduler starts (after rand.Seed, before the nodes are created). The
// count was found by scanning 0-14 in both tie directions on
// openb_pod_list_default: only 10, lowest prefix first, reproduces the
// published table, and it then does so to the third decimal for every
// deterministic baseline on every published trace
// (TestBaselinesMatchPublished with GPUD_SIM_LONG=1).
const artifactDrawsBeforePerm = 10

// artifactStream reproduces, for one seed, the random choices the FGD
// artifact (github.com/hkust-adsl/kubernetes-scheduler-simulator) makes with
// Go's math/rand seeded by its tuning seed:
//
//  1. one rand.Int() (an argument of a debug log line in Simulate),
//  2. rand.Shuffle of the pods sorted by name (SortClusterPods),
//  3. tuning to tune × GPU capacity (TunePodsByNodeTotalResource): drop
//     pods at random while over, or append random copies of the name-sorted
//     pods until the next one's per-GPU milli would pass the target,
//  4. [artifactDrawsBeforePerm] draws,
//  5. rand.Perm over the name-sorted nodes, whose results become name
//     prefixes "%04d-"; its kube-scheduler breaks score ties toward the
//     smallest name, so perm[i] is node i's tie rank (lowest wins).
//
// reqs must be sorted by pod name and the cluster's nodes by node name.
// It returns the arrival order and the tie ranks.
func artifactStream(reqs []allocator.Request, capMilli int64, tune float64, seed uint64, nodes int) ([]allocator.Request, []int) {
	g := rand.New(rand.NewSource(int64(seed)))
	g.Int()
	order := Resample(reqs, capMilli, tune, g)
	for range artifactDrawsBeforePerm {
		g.Float64()
	}
	return order, g.Perm(nodes)
}

// Resample reproduces the FGD simulator's workload tuning with its random
// source g: shuffle the pods (sorted by name), then drop random pods while
// the total GPU request exceeds tune × capMilli, or append random copies
// until the next one would pass it. A workload without GPU pods comes back
// shuffled only.
func Resample(reqs []allocator.Request, capMilli int64, tune float64, g *rand.Rand) []allocator.Request {
	out := slices.Clone(reqs)
	g.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	var total int64
	for _, r := range out {
		total += r.TotalGPUMilli()
	}
	target := tune * float64(capMilli)
	if len(reqs) == 0 || float64(total) == target || !slices.ContainsFunc(reqs, func(r allocator.Request) bool { return r.TotalGPUMilli() > 0 }) {
		// Without a GPU pod appending copies never reaches the target.
		return out
	}
	if float64(total) > target {
		for float64(total) > target && len(out) > 0 {
			i := g.Intn(len(out))
			total -= out[i].TotalGPUMilli()
			out = slices.Delete(out, i, i+1)
		}
		return out
	}
	for {
		r := reqs[g.Intn(len(reqs))]
		// The simulator compares with the per-GPU milli here, not the total.
		if float64(total+r.MilliPerGPUOf()) > target {
			return out
		}
		total += r.TotalGPUMilli()
		out = append(out, r)
	}
}
