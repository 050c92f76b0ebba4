package view

import (
	"fmt"
	"maps"
	"reflect"
	"slices"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpud/gpud/pkg/allocator"
)

// model is an allocator model of the view that placements share: the
// cluster built for one set of nodes (which GPUs an item may use, their
// labels), its policy and its allocator, kept while the view lives. Each
// placement brings the model up to date with the view's usage node by
// node: a node whose binds changed is unbound and bound again (its version
// bumped), the others are left alone, so the allocator's verdicts cached
// per node version ([allocator.Allocator.Decide]) carry over from one
// placement to the next instead of every node being scored again on a
// cluster built afresh.
type model struct {
	// key hashes nodes (names, usable GPUs, grouping values) to tell
	// models apart before comparing them.
	key    uint64
	nodes  []allocator.Node // what the cluster was built from
	refs   []*Node
	policy string
	// typical is the workload the policy was built for (a copy);
	// typicalOf the caller's slice it last served, compared by identity
	// before by content.
	typical, typicalOf []allocator.Request
	cl                 *allocator.Cluster
	alloc              *allocator.Allocator
	// want[i] are the binds node i was last asked to hold, in order;
	// held[i] those of them the cluster took (a bind that fails means the
	// state is over-allocated, and a fresh build skips it too).
	want, held [][]bind
	// seen[i] is what sync last bound node i from; usageID and measured
	// the ids of the usage and the measurement it read (0: none).
	seen     []synced
	usageID  uint64
	measured uint64
}

// bind is one [allocator.Cluster.Bind].
type bind struct {
	d allocator.Decision
	r allocator.Request
}

func (b bind) equal(o bind) bool {
	return sameRequest(&b.r, &o.r) && b.d.Node == o.d.Node && b.d.MIGStart == o.d.MIGStart &&
		b.d.MilliPerGPU == o.d.MilliPerGPU && slices.Equal(b.d.GPUs, o.d.GPUs)
}

func sameRequest(x, y *allocator.Request) bool {
	return x.CPUMilli == y.CPUMilli && x.MemoryMiB == y.MemoryMiB && x.NumGPU == y.NumGPU && x.GPUMilli == y.GPUMilli &&
		slices.Equal(x.Models, y.Models) && x.GPUMemoryMiB == y.GPUMemoryMiB && x.GPUCoresPct == y.GPUCoresPct &&
		x.MIGProfile == y.MIGProfile && x.MinGPUMemoryMiB == y.MinGPUMemoryMiB && x.MinComputeCapability == y.MinComputeCapability
}

// maxModels bounds the models a view keeps; past it the oldest goes. Items
// of one cycle mostly share a few (whole GPUs and fractions, MIG shapes, a
// matchAttribute); a retry that excludes GPUs makes its own.
const maxModels = 16

// FNV-1a, folded over what tells models apart.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * fnvPrime
	}
	return h
}

// cluster returns the allocator model for one item: the schedulable nodes
// with a device the item may use, each GPU marked unhealthy unless the item
// may use one of its devices, and what u takes bound. Its allocator
// considers only the nodes the item may go to (not banned, pin if set, and
// accepted by opt.NodeFilter): they are a mask on the model, not a model of
// their own, so that pods whose filters differ (their CPU and memory left
// on each node, affinity, taints) share one. refs[i] is cluster node i. The
// allocator breaks ties with opt.Rand.
//
// Placements of one cycle mostly differ from the last by the node the last
// one took: the node list is kept per kind of item (nodeList) and only the
// nodes whose usage changed since the model last saw them are bound anew
// (model.sync), so a placement costs a pass over the nodes' masks, not a
// pass over every GPU.
func (v *View) cluster(it *Item, u usage, opt Options, banned map[string]bool, pin string, excluded map[gpuRef]bool) (*model, error) {
	m := opt.Measured.of(v)
	nl := v.nodeList(it, m, excluded)
	allowed := make([]bool, 0, len(nl.refs)) // the allocator keeps it
	anyAllowed := false
	for _, n := range nl.refs {
		ok := !banned[n.Name] && (pin == "" || n.Name == pin) && (opt.NodeFilter == nil || opt.NodeFilter(n))
		allowed = append(allowed, ok)
		anyAllowed = anyAllowed || ok
	}
	if !anyAllowed {
		return nil, fmt.Errorf("no schedulable node has a device the request may use: %w", ErrNoFit)
	}
	md := nl.md
	if md == nil || !slices.Contains(v.models.list, md) || !md.serves(opt) {
		var err error
		if md, err = v.modelFor(nl.key, nl.nodes, nl.refs, opt); err != nil {
			return nil, err
		}
		nl.md = md
	}
	md.refs = nl.refs
	md.sync(it, u, m, opt.NodeUsed, allowed)
	md.alloc.SetRand(opt.Rand)
	if err := md.alloc.SetCandidates(allowed); err != nil {
		return nil, err
	}
	return md, nil
}

// nodeList is the node list of a model: the schedulable nodes with a
// device an item may use (refs), as allocator nodes whose unusable GPUs are
// marked unhealthy, and their hash. It depends on the item's kind, shape,
// selectors and capacities, the measurement (GPUs reported down) and the
// excluded GPUs, not on usage, so items alike share one for the view's
// life.
type nodeList struct {
	nodes []allocator.Node
	refs  []*Node
	key   uint64
	md    *model
	// cached lists are kept in View.lists.
	cached bool
}

// listKey is what decides a node list, for the items that may share one:
// no excluded GPUs and no device tolerations (whose comparison would cost
// more than the walk).
type listKey struct {
	sel      *selection // nil: an item without devices
	kind     Kind
	shape    [2]int
	caps     uint8
	match    resourceapi.FullyQualifiedName
	measured uint64 // Measured.id; 0 none
}

// maxLists bounds View.lists; past it the lists are dropped.
const maxLists = 64

// nodeList returns it's node list (see [nodeList]), from the view's lists
// when an item alike made one.
func (v *View) nodeList(it *Item, m *Measured, excluded map[gpuRef]bool) *nodeList {
	var k listKey
	pk, kinded := partKey{}, true // a pod without devices: one kind
	if it != nil {
		pk, kinded = it.kindKey()
	}
	cacheable := len(excluded) == 0 && kinded
	if cacheable {
		if it != nil {
			k = listKey{sel: it.sel, kind: it.Kind, shape: it.shape, caps: it.caps, match: it.MatchAttribute}
		}
		if m != nil {
			k.measured = m.id
		}
		if nl := v.lists[k]; nl != nil {
			return nl
		}
	}
	// A node's part of a list (which GPUs the item may use, their labels)
	// depends on the node's devices and the item's kind, not on usage: it
	// is kept on the node, which the next view takes over while its slices
	// do not change (PoolCache), unless the measurement reports one of its
	// devices down or the list is not kept.
	nl := &nodeList{key: fnvOffset, cached: cacheable}
	for _, n := range v.nodes {
		if n.Unschedulable {
			continue
		}
		var p *nodePart
		if cacheable && !m.anyDown(n) {
			if p = n.parts[pk]; p == nil {
				p = v.nodePart(it, n, m, excluded)
				if len(n.parts) >= maxParts || n.parts == nil {
					n.parts = map[partKey]*nodePart{}
				}
				n.parts[pk] = p
			}
		} else {
			p = v.nodePart(it, n, m, excluded)
		}
		if p.usable {
			nl.key = (nl.key ^ p.hash) * fnvPrime
			nl.nodes = append(nl.nodes, p.node)
			nl.refs = append(nl.refs, n)
		}
	}
	if it.isMIG() {
		nl.key = (nl.key ^ 3) * fnvPrime
	}
	if cacheable {
		if len(v.lists) >= maxLists {
			clear(v.lists)
		}
		if v.lists == nil {
			v.lists = map[listKey]*nodeList{}
		}
		v.lists[k] = nl
	}
	return nl
}

// partKey is what decides a node's part of a kept node list (see
// listKey), told apart across views: the selectors by their key.
type partKey struct {
	sel   string
	kind  Kind
	shape [2]int
	caps  uint8
	match resourceapi.FullyQualifiedName
}

// kindKey is what decides which of a node's GPUs and devices it may
// use, for an item whose node parts and offers a node may keep; false
// for items with device tolerations (comparing them would cost more than
// the walk) or without a selection.
func (it *Item) kindKey() (partKey, bool) {
	if it.sel == nil || len(it.tolerations) > 0 {
		return partKey{}, false
	}
	return partKey{sel: it.sel.key, kind: it.Kind, shape: it.shape, caps: it.caps, match: it.MatchAttribute}, true
}

// maxParts bounds the parts a node keeps, and its offers
// (View.MostPerNode); past it they are dropped.
const maxParts = 16

// nodePart is node n as an item sees it: as an allocator node whose GPUs
// the item may not use are marked unhealthy, whether it may use any, and
// a hash of both (the GPUs' grouping values and the node's name) for the
// list's key. Its GPUs are never changed once made.
type nodePart struct {
	node   allocator.Node
	usable bool
	hash   uint64
}

// nodePart works out n's part for it (nil: a pod without devices, which
// may go to any node).
func (v *View) nodePart(it *Item, n *Node, m *Measured, excluded map[gpuRef]bool) *nodePart {
	p := &nodePart{node: allocator.Node{Name: n.Name, CPUMilli: n.CPUMilli, MemoryMiB: n.MemoryMiB, GPUs: make([]allocator.GPU, len(n.GPUs))},
		usable: it == nil, hash: fnvOffset}
	for g := range n.GPUs {
		gp := &n.GPUs[g]
		use := (len(excluded) == 0 || !excluded[gpuRef{n.Name, g}]) && (it == nil || it.gpuUsable(n, gp, m))
		domain := it.domain(n, gp)
		var labels map[string]string
		if it == nil || it.MatchAttribute == "" {
			labels = v.domainLabels(gp, it.isMIG())
		} else {
			labels = v.gpuLabels(domain, it.isMIG())
		}
		if use {
			p.hash = fnvString((p.hash^1)*fnvPrime, domain)
		} else {
			p.hash = (p.hash ^ 2) * fnvPrime
		}
		p.node.GPUs[g] = allocator.GPU{Model: gp.Model, MemoryMiB: gp.MemoryBytes >> 20, ComputeCapability: gp.ComputeCapability,
			Labels: labels, Unhealthy: !use}
		p.usable = p.usable || use
	}
	p.hash = fnvString(p.hash, n.Name)
	return p
}

// ModelCache keeps the allocator models of views (see [model]) for the
// next views: a cycle whose nodes are those of the last (their GPUs, what
// an item may use) starts from the last cycle's models and re-binds only
// the nodes whose usage differs, instead of building a cluster and
// scoring every node again. It is not safe for concurrent use: one
// scheduler loop builds its views in turn.
type ModelCache struct {
	// list is oldest first; a model found moves to the end.
	list []*model
	// labels are the allocator GPU labels by grouping value and MIG mode,
	// shared by the models (the allocator only reads them) so that nodes
	// compare by map identity.
	labels map[gpuLabelKey]map[string]string
}

// maxLabels bounds ModelCache.labels (one per NVLink domain or
// matchAttribute value, and MIG mode); past it they are dropped.
const maxLabels = 1 << 16

// NewModelCache returns an empty cache for [Inputs.Models].
func NewModelCache() *ModelCache { return &ModelCache{} }

// modelFor returns the view's model built from nodes (whose hash is key)
// with opt's policy and typical workload, building it when the view has
// none. A new model keeps nodes (whose GPU lists are never changed).
func (v *View) modelFor(key uint64, nodes []allocator.Node, refs []*Node, opt Options) (*model, error) {
	for k, md := range v.models.list {
		if md.key == key && md.serves(opt) && slices.EqualFunc(md.nodes, nodes, sameNode) {
			md.refs = refs
			v.models.list = append(slices.Delete(v.models.list, k, k+1), md)
			return md, nil
		}
	}
	cl, err := allocator.NewCluster(nodes)
	if err != nil {
		return nil, fmt.Errorf("allocator cluster: %w", err)
	}
	pol, err := allocator.NewPolicy(opt.Policy, cl.Workload(opt.Typical))
	if err != nil {
		return nil, err
	}
	md := &model{key: key, nodes: nodes, refs: refs, policy: opt.Policy, typical: cloneRequests(opt.Typical), typicalOf: opt.Typical, cl: cl,
		alloc: allocator.New(cl, pol, opt.Rand), want: make([][]bind, len(nodes)), held: make([][]bind, len(nodes))}
	if len(v.models.list) == maxModels {
		v.models.list = slices.Delete(v.models.list, 0, 1)
	}
	v.models.list = append(v.models.list, md)
	return md, nil
}

// serves reports whether the model was built with opt's policy and
// typical workload: the caller's slice it last served, else one alike (a
// later cycle's), which it then remembers.
func (md *model) serves(opt Options) bool {
	if md.policy != opt.Policy {
		return false
	}
	if sameSlice(md.typicalOf, opt.Typical) {
		return true
	}
	if !slices.EqualFunc(md.typical, opt.Typical, func(a, b allocator.Request) bool { return sameRequest(&a, &b) }) {
		return false
	}
	md.typicalOf = opt.Typical
	return true
}

func cloneRequests(rs []allocator.Request) []allocator.Request {
	out := slices.Clone(rs)
	for i := range out {
		out[i].Models = slices.Clone(out[i].Models)
	}
	return out
}

// synced is what model.sync last bound node i from: the node's usage
// version, the CPU and memory pods take there, and whether fractions'
// memory adjustments applied.
type synced struct {
	ver      uint64
	cpu, mem int64
	adjusted bool
	ok       bool
}

// sync brings the candidate nodes up to date with u, m and used: a node
// whose usage version, pod use and mode are as the model last saw them is
// left alone (its binds would come out the same); the others get their
// binds again (update). The record is dropped when u or m is another's.
func (md *model) sync(it *Item, u usage, m *Measured, used func(*Node) (int64, int64), allowed []bool) {
	var mid uint64
	if m != nil {
		mid = m.id
	}
	if u.id != md.usageID || mid != md.measured || len(md.seen) != len(md.refs) {
		md.usageID, md.measured = u.id, mid
		md.seen = make([]synced, len(md.refs))
	}
	adjusted := it != nil && it.Kind == Fraction
	mig := it.isMIG()
	var want []bind
	for i, n := range md.refs {
		if !allowed[i] {
			continue // brought up to date when a placement may use it
		}
		now := synced{ver: n.usageVer, adjusted: adjusted, ok: true}
		if used != nil {
			now.cpu, now.mem = used(n)
		}
		if md.seen[i] == now {
			continue
		}
		want = want[:0]
		for g := range n.GPUs {
			if !md.nodes[i].GPUs[g].Unhealthy {
				var adj int64
				if adjusted {
					adj = m.memAdjust(n.GPUs[g].wholeDev)
				}
				want = usedBinds(want, i, n, g, mig, u, adj)
			}
		}
		if used != nil {
			want = nodeUsedBind(want, i, n, used)
		}
		md.update(i, want)
		md.seen[i] = now
	}
}

// update makes node i hold want: when it differs from what the node was
// last asked to hold, what it holds is unbound and want bound in order (a
// bind that fails is skipped, as on a fresh cluster).
func (md *model) update(i int, want []bind) {
	if slices.EqualFunc(md.want[i], want, bind.equal) {
		return
	}
	held := md.held[i]
	for k := len(held) - 1; k >= 0; k-- {
		// Unbind returns exactly what Bind took; it fails only on a
		// cluster changed behind the model's back.
		if err := md.cl.Unbind(held[k].d, held[k].r); err != nil {
			panic(fmt.Sprintf("view: allocator model out of step: %v", err))
		}
	}
	held = held[:0]
	for _, b := range want {
		if md.cl.Bind(b.d, b.r) == nil {
			held = append(held, b)
		}
	}
	md.held[i] = held
	md.want[i] = cloneBinds(want)
}

func cloneBinds(bs []bind) []bind {
	out := make([]bind, len(bs))
	for i, b := range bs {
		b.d.GPUs = slices.Clone(b.d.GPUs)
		out[i] = b
	}
	return out
}

// sameSlice reports whether a and b are the same slice (the caller's
// typical workload of one cycle), not merely equal.
func sameSlice[T any](a, b []T) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// sameMap compares maps, the same map (the view's shared labels) first.
func sameMap(a, b map[string]string) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer() || maps.Equal(a, b)
}

// sameNode compares what [allocator.NewCluster] reads of a node. The
// view's GPU labels are shared maps, one per grouping value and MIG mode,
// so they compare by content cheaply.
func sameNode(a, b allocator.Node) bool {
	if a.Name != b.Name || a.CPUMilli != b.CPUMilli || a.MemoryMiB != b.MemoryMiB || len(a.GPUs) != len(b.GPUs) || !maps.Equal(a.Labels, b.Labels) {
		return false
	}
	for g := range a.GPUs {
		x, y := &a.GPUs[g], &b.GPUs[g]
		if x.Model != y.Model || x.MemoryMiB != y.MemoryMiB || x.ComputeCapability != y.ComputeCapability ||
			x.Unhealthy != y.Unhealthy || len(x.Labels) != len(y.Labels) {
			return false
		}
		if !sameMap(x.Labels, y.Labels) {
			return false
		}
	}
	return true
}
