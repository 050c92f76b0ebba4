package view

import (
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// PoolCache keeps parsed pools across views: a pool's devices, GPUs and
// counter sets hold while its slices do (the same objects at the same
// resourceVersions). Parsing every device of every node for every new
// view is a fifth of a one-pod cycle otherwise. A node whose slices and
// Kubernetes Node are the same objects as for the last view is that
// view's node, taken over: only the latest view built through a cache
// may be used (the scheduler builds one per cycle, in turn), since the
// new view numbers the devices again. It is not safe for concurrent use.
type PoolCache struct {
	m map[string]*parsedPool // by pool name
}

// parsedPool is one pool as addPool left it, before a view numbered its
// devices, and the node the last view made of it from kn.
type parsedPool struct {
	key string
	// group are the slice objects key was made from: the same objects
	// (informers replace, never change, them) have the same key.
	group    []*resourceapi.ResourceSlice
	devs     []Device // in the node's device order
	gpus     []GPU
	counters map[string]map[string]resource.Quantity
	skips    []Skip
	node     *Node
	kn       *corev1.Node
}

// maxPoolCache bounds a PoolCache in pools; it is emptied when full.
const maxPoolCache = 1 << 16

// NewPoolCache returns an empty cache for [Inputs.Pools].
func NewPoolCache() *PoolCache { return &PoolCache{m: map[string]*parsedPool{}} }

// poolKey names a pool's slices at their versions (group is sorted by
// name), with every device's taints: kube-scheduler's slice tracker
// applies DeviceTaintRules to copies that keep the slice's
// resourceVersion. Objects without a resourceVersion (built by hand,
// never from an informer) are not cached.
func poolKey(group []*resourceapi.ResourceSlice) (string, bool) {
	var b strings.Builder
	for _, s := range group {
		if s.ResourceVersion == "" {
			return "", false
		}
		b.WriteString(s.Name)
		b.WriteByte('/')
		b.WriteString(string(s.UID))
		b.WriteByte('@')
		b.WriteString(s.ResourceVersion)
		b.WriteByte('#')
		b.WriteString(strconv.FormatInt(s.Spec.Pool.Generation, 10))
		for i := range s.Spec.Devices {
			d := &s.Spec.Devices[i]
			for _, t := range d.Taints {
				b.WriteByte('|')
				b.WriteString(d.Name)
				b.WriteByte(':')
				b.WriteString(t.Key)
				b.WriteByte('=')
				b.WriteString(t.Value)
				b.WriteByte(':')
				b.WriteString(string(t.Effect))
				if t.TimeAdded != nil {
					b.WriteByte('@')
					b.WriteString(strconv.FormatInt(t.TimeAdded.UnixNano(), 10))
				}
			}
		}
		b.WriteByte(';')
	}
	return b.String(), true
}

// node returns the node of kn with group's devices, GPUs and counter
// sets: the last view's node when the slices and kn are unchanged, a copy
// of the parsed pool when only kn changed, else a node parsed afresh (and
// the parse remembered).
func (c *PoolCache) node(kn *corev1.Node, group []*resourceapi.ResourceSlice, skips *[]Skip) *Node {
	var p *parsedPool // the last parse of this pool
	key, cacheable := "", false
	if c != nil {
		p = c.m[kn.Name]
		if p != nil && slices.Equal(p.group, group) {
			key, cacheable = p.key, true
		} else if key, cacheable = poolKey(group); p != nil && p.key == key {
			p.group = slices.Clone(group) // new objects, same versions
		}
	}
	var parsed *parsedPool
	if cacheable && p != nil && p.key == key {
		*skips = append(*skips, p.skips...)
		if p.node != nil && p.kn == kn {
			return p.node
		}
		parsed = p
	}
	n := newNode(kn)
	n.Generation = group[0].Spec.Pool.Generation
	if parsed != nil {
		parsed.instantiate(n)
	} else {
		parsed = c.fill(n, group, key, cacheable, skips)
	}
	n.link()
	if parsed != nil {
		parsed.node, parsed.kn = n, kn
	}
	return n
}

// fill adds group's devices, GPUs and counter sets to n (fresh from
// newNode) by parsing them, and remembers the parse under key if
// cacheable (returned; nil when not).
func (c *PoolCache) fill(n *Node, group []*resourceapi.ResourceSlice, key string, cacheable bool, skips *[]Skip) *parsedPool {
	var own []Skip
	addPool(n, group, &own)
	*skips = append(*skips, own...)
	if !cacheable {
		return nil
	}
	p := &parsedPool{key: key, group: slices.Clone(group), gpus: n.GPUs, counters: n.Counters, skips: own, devs: make([]Device, len(n.devs))}
	for i, d := range n.devs {
		p.devs[i] = *d
	}
	if len(c.m) >= maxPoolCache {
		clear(c.m)
	}
	c.m[n.Name] = p
	// n keeps its own GPUs: the view fills their device pointers.
	n.GPUs = append([]GPU(nil), n.GPUs...)
	return p
}

// instantiate gives n copies of the pool's devices and GPUs; counter sets
// are only read, so they are shared.
func (p *parsedPool) instantiate(n *Node) {
	n.Counters = p.counters
	n.GPUs = append([]GPU(nil), p.gpus...)
	n.devs = make([]*Device, len(p.devs))
	n.Devices = make(map[string]*Device, len(p.devs))
	copies := make([]Device, len(p.devs))
	copy(copies, p.devs)
	for i := range copies {
		d := &copies[i]
		n.devs[i] = d
		n.Devices[d.Name] = d
	}
}
