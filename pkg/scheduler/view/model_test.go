package view

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpud/gpud/pkg/allocator"
	"github.com/gpud/gpud/pkg/dra"
)

// mixedCluster is n nodes of dgx-h100, dgx-a100 (MIG on GPUs 0 and 1) and
// pcie-l40s in turn.
func mixedCluster(t testing.TB, n int) *cluster {
	t.Helper()
	c := &cluster{pub: map[string]dra.Published{}}
	c.in.Classes = shippedClasses(t)
	for i := range n {
		name := fmt.Sprintf("node-%02d", i)
		var st dra.NodeState
		switch i % 3 {
		case 0:
			st = simState(t, "dgx-h100", name)
		case 1:
			st = simState(t, "dgx-a100", name, 0, 1)
		default:
			st = simState(t, "pcie-l40s", name)
		}
		pub, sl := published(t, name, st)
		c.pub[name] = pub
		c.in.Slices = append(c.in.Slices, sl...)
		c.in.Nodes = append(c.in.Nodes, k8sNode(name))
	}
	return c
}

// TestModelMatchesFresh keeps one view (and so its allocator models)
// across random placements, assumed allocations, releases, changing CPU
// and memory use, node filters and typical workloads, and checks after
// every change that it places exactly as a view built afresh from the same
// state does: the models it updates node by node must hold what a new
// cluster would. The same holds for a new view each step that takes its
// models from the last ones and its nodes from the last view (a ModelCache
// and a PoolCache, as the scheduler's cycles do).
func TestModelMatchesFresh(t *testing.T) {
	base := mixedCluster(t, 9)
	versioned(base) // the pool cache keeps only informer objects
	seeds := uint64(4)
	if testing.Short() {
		seeds = 2
	}
	for _, mode := range []struct{ carried, claims bool }{{false, false}, {true, false}, {true, true}} {
		for seed := range seeds {
			t.Run(fmt.Sprintf("carried=%v/claims=%v/seed%d", mode.carried, mode.claims, seed), func(t *testing.T) {
				testModelMatchesFresh(t, base, seed, mode.carried, mode.claims)
			})
		}
	}
}

// testModelMatchesFresh: carried, a new view each step takes models and
// nodes over from the last; claims, what was placed comes back as
// allocated claims (each its own object, kept from step to step, as an
// informer's), counted through a UsageCache, instead of Assume.
func testModelMatchesFresh(t *testing.T, base *cluster, seed uint64, carried, claims bool) {
	rng := rand.New(rand.NewPCG(seed, 11))
	models, pools, usage := NewModelCache(), NewPoolCache(), NewUsageCache()
	objects := map[*resourceapi.AllocationResult]*resourceapi.ResourceClaim{}
	build := func(cache *ModelCache, assumed []Allocation) *View {
		c := *base
		c.in.Models = cache
		if cache != nil {
			c.in.Pools = pools
		}
		if claims {
			if len(assumed) > 0 && rng.IntN(4) == 0 {
				// A claim's status written again: a new object with a
				// new allocation object of the same content.
				a := assumed[rng.IntN(len(assumed))]
				if obj := objects[a.Result]; obj != nil {
					objects[a.Result] = obj.DeepCopy()
				}
			}
			c.in.Claims = slices.Clone(c.in.Claims)
			for _, a := range assumed {
				obj := objects[a.Result]
				if obj == nil {
					obj = a.Claim.DeepCopy()
					obj.Status.Allocation = a.Result
					objects[a.Result] = obj
				}
				c.in.Claims = append(c.in.Claims, obj)
			}
			if cache != nil {
				c.in.Usage = usage
			}
			return c.build(t)
		}
		v := c.build(t)
		for _, a := range assumed {
			if err := v.Assume(a); err != nil {
				t.Fatal(err)
			}
		}
		return v
	}
	warm := build(models, nil)
	lastUsage, carriedUsage := uint64(0), 0
	var assumed []Allocation // in warm, in order
	cpu, mem := map[string]int64{}, map[string]int64{}
	used := func(n *Node) (int64, int64) { return cpu[n.Name], mem[n.Name] }
	for step := range 80 {
		// The state changes at random first.
		switch rng.IntN(4) {
		case 0:
			if len(assumed) > 0 {
				k := rng.IntN(len(assumed))
				if !carried {
					warm.Release(assumed[k].Result)
				}
				assumed = slices.Delete(assumed, k, k+1)
			}
		case 1:
			n := warm.Nodes()[rng.IntN(len(warm.Nodes()))]
			cpu[n.Name] = int64(rng.IntN(int(n.CPUMilli) + 1))
			mem[n.Name] = int64(rng.IntN(int(n.MemoryMiB) + 1))
		}
		if carried {
			warm = build(models, assumed)
		}
		var filter func(*Node) bool
		if rng.IntN(4) == 0 {
			skip := warm.Nodes()[rng.IntN(len(warm.Nodes()))].Name
			filter = func(n *Node) bool { return n.Name != skip }
		}
		// A typical workload alike or not from step to step, in a new
		// slice each time (as each cycle makes one).
		var typical []allocator.Request
		if rng.IntN(2) == 0 {
			typical = []allocator.Request{{NumGPU: 1, GPUMilli: 1000}, {NumGPU: 1, GPUMilli: 250, Models: []string{"NVIDIA L40S"}}}
		}
		cl := randomClaim(rng, step)
		optFor := func(v *View) Options {
			ids := 0
			return Options{Rand: rand.New(rand.NewPCG(uint64(step), 3)), NodeUsed: used, NodeFilter: filter, Typical: typical,
				NewShareID: func() types.UID { ids++; return types.UID(fmt.Sprint("share-", ids)) }}
		}
		fresh := build(nil, assumed)
		got, errw := place(t, warm, optFor(warm), cl)
		want, errf := place(t, fresh, optFor(fresh), cl)
		if g, w := describe(got, errw), describe(want, errf); g != w {
			t.Fatalf("step %d: kept view placed\n%s\na fresh one\n%s", step, g, w)
		}
		if errw != nil && !errors.Is(errw, ErrNoFit) {
			t.Fatalf("step %d: %v", step, errw)
		}
		if node := warm.Nodes()[rng.IntN(len(warm.Nodes()))]; rng.IntN(3) == 0 {
			// A CPU-only pod too.
			req := allocator.Request{CPUMilli: int64(rng.IntN(int(node.CPUMilli))), MemoryMiB: int64(rng.IntN(64 << 10))}
			nw, ew := warm.PlaceNode(req, optFor(warm))
			nf, ef := fresh.PlaceNode(req, optFor(fresh))
			if fmt.Sprint(nw, ew) != fmt.Sprint(nf, ef) {
				t.Fatalf("step %d: PlaceNode %+v: kept view %s %v, fresh %s %v", step, req, nw, ew, nf, ef)
			}
		}
		if errw == nil && rng.IntN(3) > 0 {
			// With claims the next view reads them from the claims; the
			// usage this view holds goes to the next as it was.
			if !claims {
				if err := warm.Assume(got...); err != nil {
					t.Fatal(err)
				}
			}
			assumed = append(assumed, got...)
		}
		if claims {
			if warm.usage.id == lastUsage {
				carriedUsage++
			}
			lastUsage = warm.usage.id
		}
	}
	if claims && carriedUsage < 40 {
		t.Fatalf("the usage was carried to %d of 80 views", carriedUsage)
	}
	if len(models.list) == 0 || len(models.list) > maxModels {
		t.Fatalf("kept views hold %d models, want 1 to %d", len(models.list), maxModels)
	}
	if carried && !slices.ContainsFunc(warm.Nodes(), func(n *Node) bool { return len(n.parts) > 0 }) {
		t.Fatal("no node kept its parts of the node lists across views")
	}
}

// TestModelCacheAcrossViews checks that a new view of the same nodes
// takes the last view's model (its cluster kept, not rebuilt) and re-binds
// only the node whose allocations changed in between.
func TestModelCacheAcrossViews(t *testing.T) {
	c := mixedCluster(t, 6)
	c.in.Models = NewModelCache()
	v := c.build(t)
	allocs, err := place(t, v, Options{}, claim("a", fraction("gpu", "10Gi", "")))
	if err != nil {
		t.Fatal(err)
	}
	c.commit(t, allocs)
	md := c.in.Models.list[0]
	cl, before := md.cl, slices.Clone(md.want)
	v = c.build(t) // the claim is allocated now: the next view reads it from the API objects
	allocs2, err := place(t, v, Options{}, claim("b", fraction("gpu", "10Gi", "")))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.in.Models.list) != 1 || c.in.Models.list[0].cl != cl {
		t.Fatalf("the second view built a model of its own (%d models)", len(c.in.Models.list))
	}
	if changed := reboundOnly(t, md, before, allocs[0].Node); changed != 1 {
		t.Fatalf("%d nodes re-bound in the second view, want 1 (the first claim's)", changed)
	}
	if allocs2[0].Node != allocs[0].Node {
		t.Errorf("the second fraction went to %s, the first to %s: the policy packs fractions together", allocs2[0].Node, allocs[0].Node)
	}
}

// describe prints allocations (node and device results) or the error.
func describe(allocs []Allocation, err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	var s string
	for _, a := range allocs {
		s += fmt.Sprintf("%s on %s:", a.Claim.Name, a.Node)
		for _, r := range a.Result.Devices.Results {
			s += fmt.Sprintf(" %s/%s", r.Pool, r.Device)
			if r.ShareID != nil {
				s += "#" + string(*r.ShareID)
			}
			if r.ConsumedCapacity != nil {
				s += fmt.Sprint(r.ConsumedCapacity)
			}
		}
		s += "\n"
	}
	return s
}

// TestModelKeptAcrossPlacements checks that placements of one kind share
// one model whose cluster is updated, not rebuilt, and that only the node
// that changed is re-bound (its version bumped): the allocator's verdict
// cache then serves the other nodes.
func TestModelKeptAcrossPlacements(t *testing.T) {
	v := mixedCluster(t, 6).build(t)
	var first *allocator.Cluster
	for i := range 5 {
		allocs, err := place(t, v, Options{}, claim(fmt.Sprint("f", i), fraction("gpu", "10Gi", "")))
		if err != nil {
			t.Fatal(err)
		}
		if err := v.Assume(allocs...); err != nil {
			t.Fatal(err)
		}
		if len(v.models.list) != 1 {
			t.Fatalf("placement %d: %d models, want 1", i, len(v.models.list))
		}
		if first == nil {
			first = v.models.list[0].cl
		} else if v.models.list[0].cl != first {
			t.Fatalf("placement %d: the model's cluster was rebuilt", i)
		}
	}
	md := v.models.list[0]
	before := slices.Clone(md.want)
	seen := slices.Clone(md.seen)
	allocs, err := place(t, v, Options{}, claim("last", fraction("gpu", "10Gi", "")))
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Assume(allocs...); err != nil {
		t.Fatal(err)
	}
	if _, err := place(t, v, Options{}, claim("probe", fraction("gpu", "10Gi", ""))); err != nil {
		t.Fatal(err)
	}
	if changed := reboundOnly(t, md, before, allocs[0].Node); changed != 1 {
		t.Fatalf("%d nodes re-bound after one placement, want 1", changed)
	}
	// Only that node's binds were worked out again; the others' usage
	// versions told the model they had not changed.
	redone := 0
	for i := range md.seen {
		if md.seen[i] != seen[i] {
			redone++
		}
	}
	if redone != 1 {
		t.Fatalf("%d nodes' binds worked out again after one placement, want 1", redone)
	}
	if len(v.lists) != 1 {
		t.Fatalf("%d node lists for placements of one kind, want 1", len(v.lists))
	}
}

var _ = resourceapi.DeviceRequest{}

// TestNodeListPartsMatchWalk: the node lists a view makes from the parts
// its nodes kept from the last view (one per kind of item: selectors,
// whole or fraction, the capacities asked, each MIG shape, a
// matchAttribute) are those a view built afresh makes by walking every
// GPU, whatever order the kinds are asked in; so is what the nodes offer
// each kind at most (View.MostPerNode).
func TestNodeListPartsMatchWalk(t *testing.T) {
	base := mixedCluster(t, 6)
	// One GPU without a cores capacity (usable by fractions asking memory
	// only), so that kinds alike but for the capacities asked see
	// different GPUs.
	noCores := false
	for _, sl := range base.in.Slices {
		for i := range sl.Spec.Devices {
			dev := &sl.Spec.Devices[i]
			if _, ok := dev.Capacity["cores"]; ok && !noCores && *sl.Spec.NodeName == "node-02" {
				delete(dev.Capacity, "cores")
				noCores = true
			}
		}
	}
	if !noCores {
		t.Fatal("fixture: no GPU of node-02 has a cores capacity")
	}
	// One MIG GPU without its 7g placement, so that MIG shapes see
	// different GPUs (every other MIG GPU offers every shape).
	no7g := false
	for _, sl := range base.in.Slices {
		sl.Spec.Devices = slices.DeleteFunc(sl.Spec.Devices, func(d resourceapi.Device) bool {
			gone := *sl.Spec.NodeName == "node-01" && d.Name == "gpu-0-mig-7g40gb-0"
			no7g = no7g || gone
			return gone
		})
	}
	if !no7g {
		t.Fatal("fixture: node-01 has no gpu-0-mig-7g40gb-0")
	}
	versioned(base)
	d := resourceapi.FullyQualifiedName("gpu.gpud.io/nvlinkDomain")
	grouped := claim("grouped", exact("gpus", "gpu.gpud.io", 2))
	grouped.Spec.Devices.Constraints = []resourceapi.DeviceConstraint{{MatchAttribute: &d}}
	claims := []*resourceapi.ResourceClaim{
		claim("whole", exact("gpus", "gpu.gpud.io", 1)),
		claim("mem", fraction("gpu", "10Gi", "")),
		claim("mem-cores", fraction("gpu", "10Gi", "20")),
		claim("any-mig", exact("mig", "mig.gpud.io", 1)),
		claim("mig-3g", migReq("mig", "3g.40gb")),
		grouped,
	}
	models, pools := NewModelCache(), NewPoolCache()
	build := func(cached bool) *View {
		c := *base
		if cached {
			c.in.Models, c.in.Pools = models, pools
		}
		return c.build(t)
	}
	// lists describes the node list of every item of the claims, each MIG
	// shape apart, and of a pod without devices, in the order given.
	// walk: every node's part worked out afresh (an exclusion of no GPU
	// keeps the list from parts), the reference.
	lists := func(v *View, order []int, walk bool) []string {
		var none map[gpuRef]bool
		if walk {
			none = map[gpuRef]bool{{node: "no such node"}: true}
		}
		var out []string
		for _, k := range order {
			items, _, err := v.Demand(claims[k : k+1])
			if err != nil {
				t.Fatalf("claim %s: %v", claims[k].Name, err)
			}
			for _, it := range items {
				shapes := max(len(it.shapes), 1)
				for s := range shapes {
					if len(it.shapes) > 0 {
						it.setShape(s)
					}
					// What nodes offer the item, kept on them too, against
					// a walk of every device.
					for _, n := range v.nodes {
						if got, want := offers(it, n), mostOn(it, n); got != want {
							t.Fatalf("%s shape %d on %s: offers %+v, walking its devices %+v", claims[k].Name, s, n.Name, got, want)
						}
					}
					out = append(out, fmt.Sprintf("%s shape %d: %s", claims[k].Name, s, describeList(v.nodeList(it, nil, none))))
				}
			}
		}
		return append(out, "no devices: "+describeList(v.nodeList(nil, nil, nil)))
	}
	forward := []int{0, 1, 2, 3, 4, 5}
	backward := []int{5, 4, 3, 2, 1, 0}
	lists(build(true), forward, false) // the nodes keep their parts
	kept := build(true)
	if kept.Node("node-00") == nil || len(kept.Node("node-00").parts) == 0 {
		t.Fatal("the second view's nodes kept no parts from the first")
	}
	for _, order := range [][]int{backward, forward} {
		got, want := lists(kept, order, false), lists(build(false), order, true)
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("from kept parts:\n%s\nwalking every GPU:\n%s", got[i], want[i])
			}
		}
	}
}

// reboundOnly counts the nodes whose binds differ from before and reports
// any that is not node.
func reboundOnly(t *testing.T, md *model, before [][]bind, node string) int {
	t.Helper()
	changed := 0
	for i := range md.want {
		if !slices.EqualFunc(before[i], md.want[i], bind.equal) {
			changed++
			if md.refs[i].Name != node {
				t.Errorf("node %s re-bound, but only %s changed", md.refs[i].Name, node)
			}
		}
	}
	return changed
}

// describeList prints a node list: each node with its GPUs' use and labels.
func describeList(nl *nodeList) string {
	var b strings.Builder
	for i, n := range nl.nodes {
		fmt.Fprintf(&b, "%s(%s):", n.Name, nl.refs[i].Name)
		for _, g := range n.GPUs {
			fmt.Fprintf(&b, " %s/%d/%v/%v", g.Model, g.MemoryMiB, g.Unhealthy, g.Labels)
		}
		b.WriteString("; ")
	}
	return b.String()
}
