package view

import (
	"cmp"
	"fmt"
	"iter"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/dynamic-resource-allocation/cel"

	"github.com/gpud/gpud/pkg/allocator"
)

// DriverName is gpud's DRA driver (pkg/dra.DriverName); slices of other
// drivers are skipped.
const DriverName = "gpu.gpud.io"

// Device types, as gpud publishes them in the "type" attribute.
const (
	TypeGPU = "gpu"
	TypeMIG = "mig"
)

// Capacity names of a whole GPU.
const (
	CapacityMemory resourceapi.QualifiedName = "memory"
	CapacityCores  resourceapi.QualifiedName = "cores"
)

// counterComputeSlices is the compute-slice counter of a MIG counter set.
const counterComputeSlices = "compute-slices"

// Limits on what the view accepts from the API.
const (
	// MaxMIGSlices bounds a MIG placement's start and size (memory slices).
	MaxMIGSlices = allocator.MIGMemorySlices
	maxGPUIndex  = 1 << 16
)

// Device is one published device.
type Device struct {
	Name string
	// GPU indexes [Node.GPUs].
	GPU int
	// MIG is true for a MIG placement (type "mig").
	MIG bool
	// Profile, Start, Size and ComputeSlices describe a MIG placement.
	Profile       string
	Start, Size   int
	ComputeSlices int
	// Shareable devices take several allocations (allowMultipleAllocations).
	Shareable  bool
	Attributes map[resourceapi.QualifiedName]resourceapi.DeviceAttribute
	Capacity   map[resourceapi.QualifiedName]resourceapi.DeviceCapacity
	Taints     []resourceapi.DeviceTaint
	Consumes   []resourceapi.DeviceCounterConsumption

	// id indexes the view's devices (View.devs); node is the device's
	// node. Both are set by Build.
	id   int32
	node *Node
	// caps has the capBits of the capacities the device has.
	caps uint8
}

// GPU is one physical GPU of a node, gathered from its whole device and
// its MIG placements.
type GPU struct {
	Index             int
	UUID              string
	Model             string // productName
	MemoryBytes       int64  // 0 when only MIG devices are published
	ComputeCapability string // "major.minor"; "" unknown
	NVLinkDomain      string
	NUMANode          int
	// Whole is the whole-GPU device's name; "" when MIG mode is on.
	Whole string
	// MIG lists the GPU's MIG devices, by name.
	MIG []string

	// wholeDev and migDevs are the devices Whole and MIG name.
	wholeDev *Device
	migDevs  []*Device
	// labels are the allocator labels by NVLink domain, MIG mode off and
	// on (View.domainLabels), once asked for.
	labels [2]map[string]string
}

// Node is one node with gpud's devices on it. Its pool is named after it.
type Node struct {
	Name          string
	CPUMilli      int64
	MemoryMiB     int64
	Unschedulable bool
	// Generation is the pool's generation.
	Generation int64
	Labels     map[string]string
	// Taints are the Kubernetes node's taints.
	Taints  []corev1.Taint
	GPUs    []GPU
	Devices map[string]*Device
	// Counters maps a counter set to its counters' values.
	Counters map[string]map[string]resource.Quantity

	// devs are the node's devices in publication order (slices by name);
	// their ids are consecutive.
	devs []*Device
	// usageVer changes whenever what the node's devices hold does (touch);
	// a new view's nodes start with numbers no model has seen.
	usageVer uint64
	// parts are the node's parts of node lists (View.nodeList), by kind
	// of item; most what it offers each kind (View.MostPerNode).
	parts map[partKey]*nodePart
	most  map[partKey]nodeMost
}

// View is the cluster as gpud's scheduler sees it: nodes, devices, classes
// and what every claim took. Build a new one from fresh informer contents
// (it is cheap); it is not safe for concurrent use.
type View struct {
	nodes   []*Node
	byName  map[string]*Node
	classes map[string]*resourceapi.DeviceClass
	usage   usage
	cel     *cel.Cache
	// devs are every node's devices, indexed by Device.id.
	devs []*Device
	// matched caches what a selector list (selectorKey) accepts.
	matched map[string]*selection
	// matches is the cross-view cache of selector results, if any.
	matches *MatchCache
	// otherDevices: another driver publishes devices, so a claim no gpud
	// device matches may be theirs (see [Other]).
	otherDevices bool
	// models are the allocator models placements share (see [model]).
	models *ModelCache
	// lists are the node lists cluster made, by what decides them
	// (listKey).
	lists map[listKey]*nodeList
}

type gpuLabelKey struct {
	domain string
	mig    bool
}

// selection is what one selector list accepts on a view: eligible
// devices by id, how many whole GPUs and MIG devices, and the MIG shapes
// (compute, memory slices) with a profile name each, in node and device
// order.
type selection struct {
	key        string // selectorKey
	eligible   []bool
	gpus, migs int
	shapes     []migShape
}

type migShape struct {
	shape   [2]int
	profile string
}

// nodeMatch is what a selector list accepts on one node: eligible devices
// in the node's device order, and their summary.
type nodeMatch struct {
	eligible   []bool
	gpus, migs int
	shapes     []migShape
}

// MatchCache keeps selector results across views: a node's results hold
// while its pool's generation does (the driver bumps it on every change).
// Evaluating CEL on every device for every new view dominates a decision
// otherwise. It is not safe for concurrent use.
type MatchCache struct {
	m map[matchKey]*nodeMatch
	// size counts the devices whose results m holds.
	size int
}

type matchKey struct {
	sel, node  string
	generation int64
}

// maxMatchCache bounds a MatchCache in device results; it is emptied when
// full.
const maxMatchCache = 1 << 20

// NewMatchCache returns an empty cache for [Inputs.Matches].
func NewMatchCache() *MatchCache { return &MatchCache{m: map[matchKey]*nodeMatch{}} }

// Inputs are the informers' objects. Nil entries are ignored. A claim that
// appears twice (by UID) counts once, as its later entry: append the claims
// the loop has written but its informer has not yet seen after the
// informer's.
type Inputs struct {
	// Slices may hold every driver's slices: gpud's make the view, the
	// others only tell [View.Demand] that other devices exist.
	Slices  []*resourceapi.ResourceSlice
	Claims  []*resourceapi.ResourceClaim
	Classes []*resourceapi.DeviceClass
	Nodes   []*corev1.Node
	// CEL caches compiled selectors across views; nil is a new cache.
	// Build one with cel.NewCache(n, cel.Features{EnableConsumableCapacity:
	// true}).
	CEL *cel.Cache
	// Matches caches selector results across views; nil is none.
	Matches *MatchCache
	// Pools caches parsed pools across views; nil is none.
	Pools *PoolCache
	// Models keeps the allocator models across views; nil: the view
	// keeps its own.
	Models *ModelCache
	// Usage carries what claims take across views; nil: every claim is
	// counted afresh.
	Usage *UsageCache
}

// Nodes returns the view's nodes, sorted by name.
func (v *View) Nodes() []*Node { return v.nodes }

// Node returns the named node, or nil.
func (v *View) Node(name string) *Node { return v.byName[name] }

// celFeatures are the CEL environment features kube-scheduler enables for
// gpud's devices (consumable capacity).
var celFeatures = cel.Features{EnableConsumableCapacity: true}

// Build assembles a view. It never fails: objects it cannot use are left
// out and reported as skips.
func Build(in Inputs) (*View, []Skip) {
	v := &View{byName: map[string]*Node{}, classes: map[string]*resourceapi.DeviceClass{},
		usage: newUsage(), cel: in.CEL, matched: map[string]*selection{}, matches: in.Matches,
		models: in.Models}
	if v.models == nil {
		v.models = NewModelCache()
	}
	if v.cel == nil {
		v.cel = cel.NewCache(256, celFeatures)
	}
	var skips []Skip
	nodes := map[string]*corev1.Node{}
	for _, n := range in.Nodes {
		if n != nil {
			nodes[n.Name] = n
		}
	}
	for _, c := range in.Classes {
		if c == nil {
			continue
		}
		if err := v.compileSelectors(c.Spec.Selectors); err != nil {
			skips = append(skips, Skip{Kind: "DeviceClass", Name: c.Name, Reason: err.Error()})
			continue
		}
		v.classes[c.Name] = c
	}
	v.otherDevices = slices.ContainsFunc(in.Slices, func(s *resourceapi.ResourceSlice) bool {
		return s != nil && s.Spec.Driver != DriverName && len(s.Spec.Devices) > 0
	})
	for pool, group := range latestPools(in.Slices, &skips) {
		kn, ok := nodes[pool]
		if !ok {
			skips = append(skips, Skip{Kind: "ResourceSlice", Name: group[0].Name, Reason: fmt.Sprintf("node %q not found", pool)})
			continue
		}
		n := in.Pools.node(kn, group, &skips)
		if len(n.GPUs) > allocator.MaxGPUsPerNode {
			skips = append(skips, Skip{Kind: "ResourceSlice", Name: group[0].Name,
				Reason: fmt.Sprintf("pool %q has %d GPUs, more than %d", pool, len(n.GPUs), allocator.MaxGPUsPerNode)})
			continue
		}
		v.nodes = append(v.nodes, n)
		v.byName[n.Name] = n
	}
	// Nodes without gpud's devices (CPU nodes, other drivers' nodes) take
	// pods that need no gpud device.
	for name, kn := range nodes {
		if _, ok := v.byName[name]; !ok {
			n := newNode(kn)
			v.nodes = append(v.nodes, n)
			v.byName[name] = n
		}
	}
	slices.SortFunc(v.nodes, func(a, b *Node) int { return cmp.Compare(a.Name, b.Name) })
	for _, n := range v.nodes {
		for _, d := range n.devs {
			d.id, d.node = int32(len(v.devs)), n
			v.devs = append(v.devs, d)
		}
	}
	carried := in.Usage.carries(v.devs)
	for _, n := range v.nodes {
		// A number no model saw: every node when the usage is new (its
		// id too), else the nodes made for this view. Carried nodes keep
		// theirs while what their devices hold does not change.
		if !carried || n.usageVer == 0 {
			touch(n)
		}
	}
	skips = append(skips, in.Usage.count(v, in.Claims, carried)...)
	return v, skips
}

// ClaimID identifies a claim: its UID, else namespace/name.
func ClaimID(c *resourceapi.ResourceClaim) string {
	if c.UID != "" {
		return string(c.UID)
	}
	return c.Namespace + "/" + c.Name
}

// LatestAllocated yields the allocated claims of claims, each once: a claim
// listed twice (the informer's copy and the assume cache's just written
// one, which comes later) counts by its later entry. Nil entries are
// skipped.
func LatestAllocated(claims []*resourceapi.ResourceClaim) iter.Seq[*resourceapi.ResourceClaim] {
	return func(yield func(*resourceapi.ResourceClaim) bool) {
		last := make(map[string]int, len(claims))
		for i, c := range claims {
			if c != nil {
				last[ClaimID(c)] = i
			}
		}
		for i, c := range claims {
			if c != nil && c.Status.Allocation != nil && last[ClaimID(c)] == i && !yield(c) {
				return
			}
		}
	}
}

// link points n's GPUs at their devices.
func (n *Node) link() {
	for g := range n.GPUs {
		gp := &n.GPUs[g]
		gp.wholeDev = n.Devices[gp.Whole]
		gp.migDevs = make([]*Device, len(gp.MIG))
		for i, name := range gp.MIG {
			gp.migDevs[i] = n.Devices[name]
		}
	}
}

func newNode(kn *corev1.Node) *Node {
	n := &Node{Name: kn.Name, Unschedulable: kn.Spec.Unschedulable, Labels: maps.Clone(kn.Labels),
		Taints: slices.Clone(kn.Spec.Taints), Devices: map[string]*Device{}, Counters: map[string]map[string]resource.Quantity{}}
	if q, ok := kn.Status.Allocatable[corev1.ResourceCPU]; ok && q.Sign() > 0 && q.CmpInt64(1<<40) < 0 {
		n.CPUMilli = q.MilliValue()
	}
	if q, ok := kn.Status.Allocatable[corev1.ResourceMemory]; ok && q.Sign() > 0 && q.CmpInt64(1<<60) < 0 {
		n.MemoryMiB = q.Value() >> 20
	}
	return n
}

// latestPools groups gpud's node-local slices by pool, keeping the highest
// generation of each pool and only complete pools.
func latestPools(in []*resourceapi.ResourceSlice, skips *[]Skip) map[string][]*resourceapi.ResourceSlice {
	out := map[string][]*resourceapi.ResourceSlice{}
	for _, s := range in {
		if s == nil {
			continue
		}
		switch {
		case s.Spec.Driver != DriverName:
			continue // another driver's: pkg/scheduler/anydevice allocates them
		case s.Spec.NodeName == nil || *s.Spec.NodeName == "":
			*skips = append(*skips, Skip{Kind: "ResourceSlice", Name: s.Name, Reason: "not local to one node"})
			continue
		case s.Spec.Pool.Name != *s.Spec.NodeName:
			*skips = append(*skips, Skip{Kind: "ResourceSlice", Name: s.Name,
				Reason: fmt.Sprintf("pool %q is not named after its node %q", s.Spec.Pool.Name, *s.Spec.NodeName)})
			continue
		}
		// One lookup a slice: the pool's group holds its latest
		// generation (the group's first slice's).
		p := s.Spec.Pool
		switch group, ok := out[p.Name]; {
		case !ok || p.Generation > group[0].Spec.Pool.Generation:
			out[p.Name] = []*resourceapi.ResourceSlice{s}
		case p.Generation == group[0].Spec.Pool.Generation:
			out[p.Name] = append(group, s)
		}
	}
	for pool, group := range out {
		want := group[0].Spec.Pool.ResourceSliceCount
		if int64(len(group)) != want {
			*skips = append(*skips, Skip{Kind: "ResourceSlice", Name: group[0].Name,
				Reason: fmt.Sprintf("pool %q generation %d has %d of %d slices", pool, group[0].Spec.Pool.Generation, len(group), want)})
			delete(out, pool)
			continue
		}
		slices.SortFunc(group, func(a, b *resourceapi.ResourceSlice) int { return cmp.Compare(a.Name, b.Name) })
	}
	return out
}

// addPool adds a complete pool's counter sets and devices to n.
func addPool(n *Node, group []*resourceapi.ResourceSlice, skips *[]Skip) {
	for _, s := range group {
		for _, cs := range s.Spec.SharedCounters {
			if _, dup := n.Counters[cs.Name]; dup || cs.Name == "" {
				*skips = append(*skips, Skip{Kind: "ResourceSlice", Name: s.Name, Reason: fmt.Sprintf("counter set %q duplicated or unnamed", cs.Name)})
				continue
			}
			set := map[string]resource.Quantity{}
			for name, c := range cs.Counters {
				set[name] = c.Value
			}
			n.Counters[cs.Name] = set
		}
	}
	gpuAt := map[int]int{}
	for _, s := range group {
		for i := range s.Spec.Devices {
			d, idx, err := parseDevice(n, &s.Spec.Devices[i])
			if err != nil {
				*skips = append(*skips, Skip{Kind: "Device", Name: s.Name + "/" + s.Spec.Devices[i].Name, Reason: err.Error()})
				continue
			}
			g, ok := gpuAt[idx]
			if !ok {
				g = len(n.GPUs)
				gpuAt[idx] = g
				n.GPUs = append(n.GPUs, GPU{Index: idx})
			}
			d.GPU = g
			n.Devices[d.Name] = d
			n.devs = append(n.devs, d)
			gpu := &n.GPUs[g]
			fillGPU(gpu, d)
			if d.MIG {
				gpu.MIG = append(gpu.MIG, d.Name)
			} else {
				gpu.Whole = d.Name
			}
		}
	}
	// GPUs in index order, devices re-pointed.
	order := slices.Clone(n.GPUs)
	slices.SortFunc(order, func(a, b GPU) int { return cmp.Compare(a.Index, b.Index) })
	pos := map[int]int{}
	for i, g := range order {
		pos[g.Index] = i
		slices.Sort(order[i].MIG)
	}
	for _, d := range n.Devices {
		d.GPU = pos[n.GPUs[d.GPU].Index]
	}
	n.GPUs = order
}

// fillGPU takes the GPU's facts from one of its devices: the whole device
// wins over MIG devices, which carry only the common attributes.
func fillGPU(g *GPU, d *Device) {
	whole := !d.MIG
	if s, ok := attrString(d, "productName"); ok && (whole || g.Model == "") {
		g.Model = s
	}
	if s, ok := attrString(d, "uuid"); ok && whole {
		g.UUID = s
	}
	if s, ok := attrString(d, "parentUUID"); ok && g.UUID == "" {
		g.UUID = s
	}
	if v := d.Attributes["cudaComputeCapability"].VersionValue; v != nil && (whole || g.ComputeCapability == "") {
		g.ComputeCapability = majorMinor(*v)
	}
	if i, ok := attrInt(d, "numaNode"); ok && (whole || g.NUMANode == 0) {
		g.NUMANode = int(i)
	}
	if s, ok := attrString(d, "nvlinkDomain"); ok && whole {
		g.NVLinkDomain = s
	}
	if whole {
		if q, ok := d.Capacity[CapacityMemory]; ok {
			g.MemoryBytes = q.Value.Value()
		}
	}
}

// majorMinor turns the semantic version "8.0.0" into "8.0"; "" if it is not
// one.
func majorMinor(v string) string {
	parts := strings.Split(v, ".")
	if len(parts) < 2 {
		return ""
	}
	for _, p := range parts[:2] {
		if n, err := strconv.Atoi(p); err != nil || n < 0 || n > 999 {
			return ""
		}
	}
	if m, _ := strconv.Atoi(parts[1]); m > 9 {
		return ""
	}
	return parts[0] + "." + parts[1]
}

func attrString(d *Device, name resourceapi.QualifiedName) (string, bool) {
	a, ok := d.Attributes[name]
	if !ok {
		a, ok = d.Attributes[DriverName+"/"+name]
	}
	if !ok || a.StringValue == nil {
		return "", false
	}
	return *a.StringValue, true
}

func attrInt(d *Device, name resourceapi.QualifiedName) (int64, bool) {
	a, ok := d.Attributes[name]
	if !ok {
		a, ok = d.Attributes[DriverName+"/"+name]
	}
	if !ok || a.IntValue == nil {
		return 0, false
	}
	return *a.IntValue, true
}

// parseDevice validates one API device and returns it with its GPU index.
func parseDevice(n *Node, api *resourceapi.Device) (*Device, int, error) {
	if errs := dns1123Label(api.Name); len(errs) > 0 {
		return nil, 0, fmt.Errorf("device name %q: %s: %w", api.Name, strings.Join(errs, "; "), ErrInvalid)
	}
	if _, dup := n.Devices[api.Name]; dup {
		return nil, 0, fmt.Errorf("device %q published twice: %w", api.Name, ErrInvalid)
	}
	d := &Device{Name: api.Name, Attributes: api.Attributes, Capacity: api.Capacity, Taints: api.Taints,
		Consumes: api.ConsumesCounters, Shareable: api.AllowMultipleAllocations != nil && *api.AllowMultipleAllocations}
	d.caps = capBits(d.Capacity)
	typ, ok := attrString(d, "type")
	if !ok {
		return nil, 0, fmt.Errorf("device %q: string attribute \"type\" missing: %w", api.Name, ErrInvalid)
	}
	if _, ok := attrString(d, "productName"); !ok {
		return nil, 0, fmt.Errorf("device %q: string attribute \"productName\" missing: %w", api.Name, ErrInvalid)
	}
	for _, cc := range d.Consumes {
		set, ok := n.Counters[cc.CounterSet]
		if !ok {
			return nil, 0, fmt.Errorf("device %q: unknown counter set %q: %w", api.Name, cc.CounterSet, ErrInvalid)
		}
		for name, c := range cc.Counters {
			if _, ok := set[name]; !ok || c.Value.Sign() < 0 {
				return nil, 0, fmt.Errorf("device %q: counter %q of set %q unknown or negative: %w", api.Name, name, cc.CounterSet, ErrInvalid)
			}
		}
	}
	for name, c := range d.Capacity {
		if c.Value.Sign() < 0 || c.Value.CmpInt64(1<<62) > 0 {
			return nil, 0, fmt.Errorf("device %q: capacity %s %s out of range: %w", api.Name, name, c.Value.String(), ErrInvalid)
		}
	}
	var idx int64
	switch typ {
	case TypeGPU:
		if idx, ok = attrInt(d, "index"); !ok {
			return nil, 0, fmt.Errorf("device %q: int attribute \"index\" missing: %w", api.Name, ErrInvalid)
		}
		if _, ok := attrString(d, "uuid"); !ok {
			return nil, 0, fmt.Errorf("device %q: string attribute \"uuid\" missing: %w", api.Name, ErrInvalid)
		}
		if q, ok := d.Capacity[CapacityMemory]; !ok || q.Value.Sign() <= 0 {
			return nil, 0, fmt.Errorf("device %q: no memory capacity: %w", api.Name, ErrInvalid)
		}
	case TypeMIG:
		d.MIG = true
		var start, size int64
		var ok1, ok2, ok3 bool
		idx, ok1 = attrInt(d, "parentIndex")
		start, ok2 = attrInt(d, "placementStart")
		size, ok3 = attrInt(d, "placementSize")
		d.Profile, ok = attrString(d, "profile")
		if !ok || !ok1 || !ok2 || !ok3 {
			return nil, 0, fmt.Errorf("device %q: MIG attributes profile, parentIndex, placementStart, placementSize missing or ill-typed: %w", api.Name, ErrInvalid)
		}
		if start < 0 || size <= 0 || start+size > MaxMIGSlices {
			return nil, 0, fmt.Errorf("device %q: placement %d+%d outside %d memory slices: %w", api.Name, start, size, MaxMIGSlices, ErrInvalid)
		}
		d.Start, d.Size = int(start), int(size)
		d.ComputeSlices = computeSlices(d)
		if d.ComputeSlices <= 0 || d.ComputeSlices > allocator.MIGComputeSlices {
			return nil, 0, fmt.Errorf("device %q: profile %q: compute slices unknown: %w", api.Name, d.Profile, ErrInvalid)
		}
	default:
		return nil, 0, fmt.Errorf("device %q: type %q (want %s or %s): %w", api.Name, typ, TypeGPU, TypeMIG, ErrInvalid)
	}
	if idx < 0 || idx >= maxGPUIndex {
		return nil, 0, fmt.Errorf("device %q: GPU index %d out of range: %w", api.Name, idx, ErrInvalid)
	}
	return d, int(idx), nil
}

// computeSlices is a MIG device's compute slices: its compute-slices
// counter, else the profile name's "<n>g." prefix.
func computeSlices(d *Device) int {
	for _, cc := range d.Consumes {
		if c, ok := cc.Counters[counterComputeSlices]; ok && c.Value.CmpInt64(64) <= 0 {
			return int(c.Value.Value())
		}
	}
	g, _, ok := strings.Cut(d.Profile, "g.")
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(g)
	if err != nil {
		return 0
	}
	return n
}

// dns1123Label is validation.IsDNS1123Label without its regular expression
// for the names it accepts (every published name, usually).
func dns1123Label(s string) []string {
	ok := len(s) > 0 && len(s) <= validation.DNS1123LabelMaxLength && s[0] != '-' && s[len(s)-1] != '-'
	for i := 0; ok && i < len(s); i++ {
		c := s[i]
		ok = c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-'
	}
	if ok {
		return nil
	}
	return validation.IsDNS1123Label(s)
}
