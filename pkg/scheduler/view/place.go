package view

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/gpud/gpud/pkg/allocator"
)

// Options tune [View.Place]. The zero value places with gpud's policy, no
// typical workload, seed 1 and fresh UUIDs as share IDs.
type Options struct {
	// Policy is an allocator policy name (allocator.PolicyNames); "" is
	// gpud's.
	Policy string
	// Typical is the workload FGD and gpud measure fragmentation against
	// (for example the pending pods' requests); nil is none.
	Typical []allocator.Request
	// Rand breaks ties; nil is a fixed seed.
	Rand *rand.Rand
	// NodeFilter, if set, keeps only the nodes it accepts (the pod's node
	// affinity, taints and tolerations are the caller's).
	NodeFilter func(*Node) bool
	// NodeUsed, if set, returns the CPU (milli) and memory (MiB) pods
	// already take on a node, so that the policy sees the CPU left to feed
	// each node's free GPUs (FGD's and gpud's stranding terms).
	NodeUsed func(*Node) (cpuMilli, memoryMiB int64)
	// NewShareID draws a share ID; nil is k8s.io/apimachinery's
	// uuid.NewUUID, as kube-scheduler draws them.
	NewShareID func() types.UID
	// Measured, if set (and made from this view by [View.Measure]), is
	// what the nodes' agents measure: devices reported unhealthy are left
	// out, and fractions are packed against measured memory as well as
	// requested memory.
	Measured *Measured
}

// Retries when the allocator's choice cannot be turned into devices (a MIG
// placement that is not published, rounding of consumed capacity, a
// matchAttribute group too small): other GPUs, then other nodes.
const (
	maxGPUTries  = 8
	maxNodeTries = 8
)

type gpuRef struct {
	node string
	gpu  int
}

// Place decides where a pod's items go, all on one node: the allocator
// chooses node and GPUs for each item in turn (the first item chooses the
// node), the view resolves the choice to devices and re-checks it. It
// returns one [Allocation] per claim, in the items' claim order, or an
// error matching [ErrNoFit] (wrapping the allocator's *NoFitError when it
// said no) that names the claim and request. The view is not changed.
func (v *View) Place(items []*Item, opt Options) ([]Allocation, error) {
	if len(items) == 0 {
		return nil, nil
	}
	if opt.Rand == nil {
		opt.Rand = rand.New(rand.NewPCG(1, 2))
	}
	if opt.NewShareID == nil {
		opt.NewShareID = uuid.NewUUID
	}
	banned := map[string]bool{}
	var last error
	for range maxNodeTries {
		allocs, node, err := v.placeAll(items, opt, banned)
		if err == nil {
			return allocs, nil
		}
		last = err
		if node == "" {
			break
		}
		banned[node] = true
	}
	return nil, last
}

// placeAll places every item on one node; on failure it returns the node
// the first item chose ("" if it chose none).
func (v *View) placeAll(items []*Item, opt Options, banned map[string]bool) ([]Allocation, string, error) {
	// The items' devices are added to the view's usage as they place and
	// taken back at the end: the undo log restores exactly what changed.
	u, j := v.usage, &undoLog{}
	defer j.restore(u)
	node := ""
	type claimResults struct {
		claim   *resourceapi.ResourceClaim
		results []resourceapi.DeviceRequestAllocationResult
		items   []*Item
	}
	var order []*claimResults
	byClaim := map[*resourceapi.ResourceClaim]*claimResults{}
	for _, it := range items {
		res, n, err := v.placeItem(it, u, j, opt, banned, node)
		if err != nil {
			return nil, node, err
		}
		node = n
		cr := byClaim[it.Claim]
		if cr == nil {
			cr = &claimResults{claim: it.Claim}
			byClaim[it.Claim] = cr
			order = append(order, cr)
		}
		cr.results = append(cr.results, res...)
		cr.items = append(cr.items, it)
	}
	out := make([]Allocation, 0, len(order))
	for _, cr := range order {
		out = append(out, Allocation{Claim: cr.claim, Node: node, Result: allocationResult(cr.claim, cr.items, cr.results, node)})
	}
	return out, "", nil
}

func (it *Item) name() string {
	return fmt.Sprintf("claim %s/%s request %q", it.Claim.Namespace, it.Claim.Name, it.Request)
}

// placeItem places one item, on node pin if set, adding it to u; a MIG
// item tries its shapes smallest first.
func (v *View) placeItem(it *Item, u usage, j *undoLog, opt Options, banned map[string]bool, pin string) ([]resourceapi.DeviceRequestAllocationResult, string, error) {
	if it.Kind != MIG {
		return v.placeShape(it, u, j, opt, banned, pin)
	}
	var first error
	for i := range it.shapes {
		it.setShape(i)
		res, n, err := v.placeShape(it, u, j, opt, banned, pin)
		if err == nil {
			return res, n, nil
		}
		if first == nil {
			first = err
		}
	}
	it.setShape(0)
	return nil, "", first
}

// placeShape places the item's current shape. A fraction goes first
// where the driver evicts no borrower for it (see [Measured.Evicts]), and
// only where none fits to a GPU where one is evicted: evicting kills a
// running process, which no packing gain is worth.
func (v *View) placeShape(it *Item, u usage, j *undoLog, opt Options, banned map[string]bool, pin string) ([]resourceapi.DeviceRequestAllocationResult, string, error) {
	if avoid := opt.Measured.of(v).evicting(it); len(avoid) > 0 {
		if res, n, err := v.placeShapeExcluding(it, u, j, opt, banned, pin, avoid); err == nil {
			return res, n, nil
		}
	}
	return v.placeShapeExcluding(it, u, j, opt, banned, pin, map[gpuRef]bool{})
}

// placeShapeExcluding places the item's current shape on GPUs other than
// excluded, which it extends with the GPUs it tried and could not use.
func (v *View) placeShapeExcluding(it *Item, u usage, j *undoLog, opt Options, banned map[string]bool, pin string, excluded map[gpuRef]bool) ([]resourceapi.DeviceRequestAllocationResult, string, error) {
	var last error
	for range maxGPUTries {
		md, err := v.cluster(it, u, opt, banned, pin, excluded)
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", it.name(), err)
		}
		d, err := md.alloc.Decide(it.Alloc)
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w: %w", it.name(), ErrNoFit, err)
		}
		n := md.refs[d.Node]
		res, err := v.resolve(it, n, d, u, j, opt)
		if err == nil {
			return res, n.Name, nil
		}
		last = err
		for _, g := range d.GPUs {
			excluded[gpuRef{n.Name, g}] = true
		}
		if errors.Is(err, errGroup) {
			for g := range n.GPUs {
				excluded[gpuRef{n.Name, g}] = true
			}
		}
	}
	return nil, "", fmt.Errorf("%s: %w: %w", it.name(), ErrNoFit, last)
}

// errGroup: no matchAttribute group on the node is large enough.
var errGroup = errors.New("no group of devices with one value of the matchAttribute is large enough")

// gpuUsable reports whether the item may use one of gp's devices (none
// that m reports unhealthy).
func (it *Item) gpuUsable(n *Node, gp *GPU, m *Measured) bool {
	if it.Kind != MIG {
		d := gp.wholeDev
		return d != nil && it.usable(n, d) && m.isDown(d) == "" && (it.MatchAttribute == "" || attrValue(d, it.MatchAttribute) != "")
	}
	for _, d := range gp.migDevs {
		if it.usable(n, d) && m.isDown(d) == "" {
			return true
		}
	}
	return false
}

// gpuLabels are the allocator labels of a GPU with grouping value domain
// ("" none), in MIG mode or not. GPUs with the same labels share one map:
// the allocator only reads them.
func (v *View) gpuLabels(domain string, mig bool) map[string]string {
	k := gpuLabelKey{domain: domain, mig: mig}
	c := v.models
	if l, ok := c.labels[k]; ok {
		return l
	}
	l := map[string]string{}
	if domain != "" {
		l[allocator.LabelNVLinkDomain] = domain
	}
	if mig {
		l[allocator.LabelMIG] = "true"
	}
	if len(c.labels) >= maxLabels || c.labels == nil {
		c.labels = map[gpuLabelKey]map[string]string{}
	}
	c.labels[k] = l
	return l
}

// domainLabels are gpuLabels for gp's NVLink domain, kept on gp: most
// items group by it, and a node list asks for every GPU.
func (v *View) domainLabels(gp *GPU, mig bool) map[string]string {
	i := 0
	if mig {
		i = 1
	}
	if gp.labels[i] == nil {
		gp.labels[i] = v.gpuLabels(gp.NVLinkDomain, mig)
	}
	return gp.labels[i]
}

// domain is the GPU's grouping label for the allocator: the value of the
// item's matchAttribute, else the GPU's NVLink domain.
func (it *Item) domain(n *Node, gp *GPU) string {
	if it != nil && it.MatchAttribute != "" && gp.wholeDev != nil {
		return attrValue(gp.wholeDev, it.MatchAttribute)
	}
	return gp.NVLinkDomain
}

// attrValue is a device attribute as a string ("" if absent); a name
// without a domain is in the driver's.
func attrValue(d *Device, name resourceapi.FullyQualifiedName) string {
	a, ok := d.Attributes[resourceapi.QualifiedName(name)]
	if !ok {
		dom, id, found := cutDomain(string(name))
		if !found || dom != DriverName {
			return ""
		}
		if a, ok = d.Attributes[resourceapi.QualifiedName(id)]; !ok {
			return ""
		}
	}
	switch {
	case a.StringValue != nil:
		return "s:" + *a.StringValue
	case a.IntValue != nil:
		return fmt.Sprint("i:", *a.IntValue)
	case a.BoolValue != nil:
		return fmt.Sprint("b:", *a.BoolValue)
	case a.VersionValue != nil:
		return "v:" + *a.VersionValue
	}
	return ""
}

func cutDomain(s string) (string, string, bool) {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '/' {
			return s[:i], s[i+1:], true
		}
	}
	return "", s, false
}

// usedBinds appends the binds that take from GPU g of cluster node i what
// u holds on it: for a MIG
// item each allocated placement (the whole GPU as 7g at 0), otherwise the
// larger of the shares' memory and cores fractions (a whole GPU for an
// exclusive allocation or any MIG placement in use), with adj bytes added
// to the shares' memory (measured use, see [Measured]). A bind that fails
// means the state is already over-allocated; [Check] reports it.
func usedBinds(dst []bind, i int, n *Node, g int, mig bool, u usage, adj int64) []bind {
	gp := &n.GPUs[g]
	var whole *devUse
	if gp.wholeDev != nil {
		whole = u.dev[gp.wholeDev.id]
	}
	if mig {
		if gp.Whole != "" && whole != nil && whole.allocated() {
			return append(dst, bind{allocator.Decision{Node: i, GPUs: []int{g}, MIGStart: 0}, allocator.Request{MIGProfile: "7g.80gb"}})
		}
		for _, d := range gp.migDevs {
			if u.dev[d.id].allocated() {
				if p := profileOf(d.ComputeSlices, d.Size); p >= 0 {
					dst = append(dst, bind{allocator.Decision{Node: i, GPUs: []int{g}, MIGStart: d.Start}, allocator.Request{MIGProfile: allocator.MIGProfiles[p].Name}})
				}
			}
		}
		return dst
	}
	milli := int64(0)
	if u.migBusy(gp) {
		milli = allocator.MilliPerGPU
	}
	if whole != nil && whole.exclusive > 0 {
		milli = allocator.MilliPerGPU
	}
	switch {
	case milli == allocator.MilliPerGPU:
	case adj != 0 && gp.wholeDev != nil:
		milli = max(milli, adjustedMilli(whole, gp.wholeDev, adj))
	case whole != nil:
		milli = max(milli, whole.sharedMilli(gp.wholeDev))
	}
	if milli > 0 {
		dst = append(dst, bind{allocator.Decision{Node: i, GPUs: []int{g}}, allocator.Request{NumGPU: 1, GPUMilli: milli}})
	}
	return dst
}

// resolve turns the allocator's decision into devices on n, re-checked
// against u, and adds them to u.
func (v *View) resolve(it *Item, n *Node, d allocator.Decision, u usage, j *undoLog, opt Options) ([]resourceapi.DeviceRequestAllocationResult, error) {
	switch it.Kind {
	case MIG:
		if len(d.GPUs) != 1 {
			return nil, fmt.Errorf("allocator chose %d GPUs for a MIG slice: %w", len(d.GPUs), ErrInvalid)
		}
		gp := &n.GPUs[d.GPUs[0]]
		m := opt.Measured.of(v)
		var cands []*Device
		for _, name := range gp.MIG {
			if dev := n.Devices[name]; it.usable(n, dev) && m.isDown(dev) == "" {
				cands = append(cands, dev)
			}
		}
		// The allocator's placement first, then the lowest start.
		slices.SortStableFunc(cands, func(a, b *Device) int {
			if (a.Start == d.MIGStart) != (b.Start == d.MIGStart) {
				if a.Start == d.MIGStart {
					return -1
				}
				return 1
			}
			return cmp.Compare(a.Start, b.Start)
		})
		for _, dev := range cands {
			if res, err := v.take(it, n, []*Device{dev}, u, j, opt); err == nil {
				return res, nil
			}
		}
		return nil, fmt.Errorf("gpu %d of %s: no free MIG device for %s: %w", gp.Index, n.Name, it.Alloc.MIGProfile, ErrNoFit)
	default:
		devs := make([]*Device, 0, len(d.GPUs))
		for _, g := range d.GPUs {
			devs = append(devs, n.Devices[n.GPUs[g].Whole])
		}
		if it.MatchAttribute != "" && !sameValue(devs, it.MatchAttribute) {
			var err error
			if devs, err = v.regroup(it, n, u, opt.Measured.of(v)); err != nil {
				return nil, err
			}
		}
		return v.take(it, n, devs, u, j, opt)
	}
}

func sameValue(devs []*Device, name resourceapi.FullyQualifiedName) bool {
	for _, d := range devs {
		if attrValue(d, name) != attrValue(devs[0], name) || attrValue(d, name) == "" {
			return false
		}
	}
	return true
}

// regroup picks it.Count free whole devices on n (none that m reports
// unhealthy) that share the item's matchAttribute value: the smallest
// group that holds them, lowest GPU indices first.
func (v *View) regroup(it *Item, n *Node, u usage, m *Measured) ([]*Device, error) {
	groups := map[string][]*Device{}
	var keys []string
	for g := range n.GPUs {
		d := n.Devices[n.GPUs[g].Whole]
		if d == nil || !it.usable(n, d) || m.isDown(d) != "" {
			continue
		}
		if u.dev[d.id].allocated() {
			continue
		}
		k := attrValue(d, it.MatchAttribute)
		if k == "" {
			continue
		}
		if groups[k] == nil {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], d)
	}
	best := ""
	for _, k := range keys {
		if len(groups[k]) >= it.Count && (best == "" || len(groups[k]) < len(groups[best])) {
			best = k
		}
	}
	if best == "" {
		return nil, fmt.Errorf("%s: %w", n.Name, errGroup)
	}
	return groups[best][:it.Count], nil
}

// take allocates devs for it on n if that over-allocates nothing on n,
// adding them to u.
func (v *View) take(it *Item, n *Node, devs []*Device, u usage, j *undoLog, opt Options) ([]resourceapi.DeviceRequestAllocationResult, error) {
	res := make([]resourceapi.DeviceRequestAllocationResult, 0, len(devs))
	for _, d := range devs {
		if d == nil {
			return nil, fmt.Errorf("allocator chose a GPU without a device: %w", ErrInvalid)
		}
		r := resourceapi.DeviceRequestAllocationResult{Request: it.Request, Driver: DriverName, Pool: n.Name, Device: d.Name,
			Tolerations: it.tolerations}
		if d.Shareable {
			c, err := consumed(it.Capacity, d)
			if err != nil {
				return nil, err
			}
			id := opt.NewShareID()
			r.ShareID, r.ConsumedCapacity = &id, c
		}
		res = append(res, r)
	}
	a := &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: res}}
	if err := u.add(v, a, j); err != nil {
		return nil, err
	}
	var credit func(*Device) int64
	if m := opt.Measured.of(v); m != nil && m.adjust != nil && it.Kind == Fraction {
		credit = m.credit
	}
	if vs := violations(v, u, n.Name, credit); len(vs) > 0 {
		u.sub(v, a, j)
		return nil, fmt.Errorf("%s: %w", vs[0], ErrOverAllocated)
	}
	return res, nil
}

// sharedMilli is the milli-GPU the shares on whole device d take: the
// largest consumed fraction of a capacity, rounded up (all of it for a
// capacity the device lacks or that is used up). It is cached in u.
func (u *devUse) sharedMilli(d *Device) int64 {
	if u.milliOK {
		return u.milli
	}
	milli := int64(0)
	for name, q := range u.consumed {
		c, ok := d.Capacity[name]
		if !ok || c.Value.Sign() <= 0 || q.Cmp(c.Value) >= 0 {
			milli = allocator.MilliPerGPU
			continue
		}
		f := math.Ceil(q.AsApproximateFloat64() / c.Value.AsApproximateFloat64() * allocator.MilliPerGPU)
		milli = max(milli, min(int64(f), allocator.MilliPerGPU))
	}
	u.milli, u.milliOK = milli, true
	return milli
}

// adjustedMilli is sharedMilli with adj bytes added to the memory the
// shares on whole device d consumed (u may be nil: no shares), not cached:
// measured use above the requests (adj > 0) or overcommit's room (adj <
// 0).
func adjustedMilli(u *devUse, d *Device, adj int64) int64 {
	milli := int64(0)
	mem := false
	if u != nil {
		for name, q := range u.consumed {
			c, ok := d.Capacity[name]
			if !ok || c.Value.Sign() <= 0 {
				milli = allocator.MilliPerGPU
				continue
			}
			used := q.AsApproximateFloat64()
			if name == CapacityMemory {
				used, mem = used+float64(adj), true
			}
			milli = max(milli, fractionMilli(used, c.Value.AsApproximateFloat64()))
		}
	}
	if c, ok := d.Capacity[CapacityMemory]; ok && !mem && adj > 0 && c.Value.Sign() > 0 {
		milli = max(milli, fractionMilli(float64(adj), c.Value.AsApproximateFloat64()))
	}
	return milli
}

// fractionMilli is used of total in milli-GPU, rounded up, within 0 and a
// whole GPU.
func fractionMilli(used, total float64) int64 {
	if used >= total {
		return allocator.MilliPerGPU
	}
	if used <= 0 {
		return 0
	}
	return min(int64(math.Ceil(used/total*allocator.MilliPerGPU)), allocator.MilliPerGPU)
}
