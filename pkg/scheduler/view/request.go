package view

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/resourceclaim"

	"github.com/gpud/gpud/pkg/allocator"
)

// Kind is what an [Item] asks for.
type Kind int

// Item kinds.
const (
	// Whole asks for Count whole GPUs.
	Whole Kind = iota + 1
	// Fraction asks for a share of one GPU (capacity.requests.memory, and
	// optionally cores).
	Fraction
	// MIG asks for one MIG slice of one profile shape.
	MIG
)

func (k Kind) String() string {
	switch k {
	case Whole:
		return "whole"
	case Fraction:
		return "fraction"
	case MIG:
		return "mig"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Limits on requests.
const (
	// MaxRequestsPerPod bounds the device requests over a pod's claims.
	MaxRequestsPerPod = 32
	maxMemoryBytes    = int64(1) << 50 // 1 PiB
	maxCoresPct       = 100
)

// Item is one device request of a claim as the allocator sees it: the
// allocator request plus the device filter it cannot express.
type Item struct {
	Claim   *resourceapi.ResourceClaim
	Request string
	Kind    Kind
	// Count is the number of devices (whole GPUs); 1 otherwise.
	Count int
	// Alloc is the allocator request. GPU model, VRAM and compute
	// capability constraints written as CEL selectors act as the device
	// filter instead of its Models/MinGPUMemoryMiB/MinComputeCapability.
	Alloc allocator.Request
	// Capacity is a fraction's capacity requests.
	Capacity map[resourceapi.QualifiedName]resource.Quantity
	// MatchAttribute, if set, is an attribute all of the request's
	// devices must share (a matchAttribute constraint).
	MatchAttribute resourceapi.FullyQualifiedName

	class       *resourceapi.DeviceClass
	selectors   []resourceapi.DeviceSelector
	tolerations []resourceapi.DeviceToleration
	// eligible is shared by the view's items with the same selectors
	// (sel's); index it by Device.id.
	eligible []bool
	sel      *selection
	// caps are the capacities Capacity requests (capBits).
	caps uint8
	// shapes are a MIG item's (compute, memory) slice shapes, smallest
	// first; shape is the one placed now.
	shapes [][2]int
	shape  [2]int
}

// Other is a claim gpud's policy does not model: kube-scheduler's
// structured allocator (pkg/scheduler/anydevice) allocates it on the node
// gpud chooses for the pod's other claims.
type Other struct {
	Claim *resourceapi.ResourceClaim
	// Why says what gpud does not model ("allocationMode All", "no
	// gpu.gpud.io device matches").
	Why string
}

// Demand turns a pod's claims into items, one per device request, in claim
// and request order. Claims already allocated are left out (the caller
// keeps the pod on their node). A claim with a request shape gpud does not
// model (allocation mode All, prioritized lists, admin access, a count
// beyond a node, distinctAttribute, constraints across requests, several
// MIG profile shapes), or, when other drivers publish devices, whose
// selectors match no gpud device, is returned whole in others. It fails,
// naming the claim and request, for an unknown class, invalid capacity
// requests, or selectors that match no device at all.
func (v *View) Demand(claims []*resourceapi.ResourceClaim) (items []*Item, others []Other, err error) {
	for _, c := range claims {
		if c == nil || c.Status.Allocation != nil {
			continue
		}
		its, why, err := v.claimItems(c)
		if err != nil {
			return nil, nil, err
		}
		if why != "" {
			others = append(others, Other{Claim: c, Why: why})
			continue
		}
		if n := len(items) + len(its); n > MaxRequestsPerPod {
			return nil, nil, fmt.Errorf("claim %s/%s: %d device requests, more than %d: %w", c.Namespace, c.Name, n, MaxRequestsPerPod, ErrUnsupported)
		}
		items = append(items, its...)
	}
	return items, others, nil
}

// claimItems returns a claim's items, or why gpud leaves the claim to
// the structured allocator.
func (v *View) claimItems(c *resourceapi.ResourceClaim) ([]*Item, string, error) {
	name := "claim " + c.Namespace + "/" + c.Name
	match, err := constraints(c)
	if errors.Is(err, ErrUnsupported) {
		return nil, err.Error(), nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", name, err)
	}
	var out []*Item
	for i := range c.Spec.Devices.Requests {
		r := &c.Spec.Devices.Requests[i]
		it, err := v.item(c, r)
		switch {
		case errors.Is(err, ErrUnsupported):
			return nil, fmt.Sprintf("request %q: %v", r.Name, err), nil
		case errors.Is(err, ErrNoFit) && v.otherDevices:
			return nil, fmt.Sprintf("request %q: %v", r.Name, err), nil
		case err != nil:
			return nil, "", fmt.Errorf("%s request %q: %w", name, r.Name, err)
		}
		it.MatchAttribute = match[r.Name]
		out = append(out, it)
	}
	return out, "", nil
}

// AllocatedNode returns the node that a pod's already allocated claims
// (shared claims, or a retry after a partial write) pin it to: the pool of
// their gpud results, "" if none. It fails if they name different nodes.
func AllocatedNode(claims []*resourceapi.ResourceClaim) (string, error) {
	node := ""
	for _, c := range claims {
		if c == nil || c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Driver != DriverName {
				continue
			}
			if node != "" && r.Pool != node {
				return "", fmt.Errorf("claim %s/%s on node %s, another claim of the pod on %s: %w", c.Namespace, c.Name, r.Pool, node, ErrInvalid)
			}
			node = r.Pool
		}
	}
	return node, nil
}

// constraints returns each request's matchAttribute.
func constraints(c *resourceapi.ResourceClaim) (map[string]resourceapi.FullyQualifiedName, error) {
	out := map[string]resourceapi.FullyQualifiedName{}
	for _, k := range c.Spec.Devices.Constraints {
		if k.DistinctAttribute != nil {
			return nil, fmt.Errorf("constraint distinctAttribute %s: %w", *k.DistinctAttribute, ErrUnsupported)
		}
		if k.MatchAttribute == nil {
			return nil, fmt.Errorf("constraint without matchAttribute: %w", ErrUnsupported)
		}
		reqs := k.Requests
		if len(reqs) == 0 {
			for _, r := range c.Spec.Devices.Requests {
				reqs = append(reqs, r.Name)
			}
		}
		if len(reqs) > 1 {
			return nil, fmt.Errorf("matchAttribute %s across requests %s: %w", *k.MatchAttribute, strings.Join(reqs, ", "), ErrUnsupported)
		}
		if prev, dup := out[reqs[0]]; dup && prev != *k.MatchAttribute {
			return nil, fmt.Errorf("request %q: two matchAttribute constraints: %w", reqs[0], ErrUnsupported)
		}
		out[reqs[0]] = *k.MatchAttribute
	}
	return out, nil
}

func (v *View) item(c *resourceapi.ResourceClaim, r *resourceapi.DeviceRequest) (*Item, error) {
	if r.Exactly == nil {
		return nil, fmt.Errorf("prioritized list (firstAvailable): %w", ErrUnsupported)
	}
	e := r.Exactly
	if e.AdminAccess != nil && *e.AdminAccess {
		return nil, fmt.Errorf("adminAccess: %w", ErrUnsupported)
	}
	if e.AllocationMode != "" && e.AllocationMode != resourceapi.DeviceAllocationModeExactCount {
		return nil, fmt.Errorf("allocationMode %s (want ExactCount): %w", e.AllocationMode, ErrUnsupported)
	}
	count := e.Count
	if count == 0 {
		count = 1
	}
	if count < 0 || count > allocator.MaxGPUsPerNode {
		return nil, fmt.Errorf("count %d (want 1 to %d): %w", count, allocator.MaxGPUsPerNode, ErrUnsupported)
	}
	class := v.classes[e.DeviceClassName]
	if class == nil {
		return nil, fmt.Errorf("unknown DeviceClass %q: %w", e.DeviceClassName, ErrInvalid)
	}
	if err := v.compileSelectors(e.Selectors); err != nil {
		return nil, err
	}
	it := &Item{Claim: c, Request: r.Name, Count: int(count), class: class,
		selectors:   append(slices.Clone(class.Spec.Selectors), e.Selectors...),
		tolerations: e.Tolerations}
	if e.Capacity != nil && len(e.Capacity.Requests) > 0 {
		if err := it.capacity(e.Capacity.Requests); err != nil {
			return nil, err
		}
	}
	// Which devices the selectors pick decides the kind. Claims with the
	// same selectors (one template, many pods) share the evaluation.
	sel, err := v.selection(it.selectors)
	if err != nil {
		return nil, err
	}
	it.eligible, it.sel = sel.eligible, sel
	gpus, migs := sel.gpus, sel.migs
	switch {
	case gpus == 0 && migs == 0:
		return nil, fmt.Errorf("class %q and the selectors match no %s device: %w", class.Name, DriverName, ErrNoFit)
	case gpus > 0 && migs > 0:
		return nil, fmt.Errorf("selectors match both whole GPUs and MIG devices; select one type: %w", ErrUnsupported)
	case migs > 0:
		return it, it.mig(sel.shapes)
	case it.Capacity != nil:
		return it, it.fraction()
	}
	it.Kind = Whole
	it.Alloc = allocator.Request{NumGPU: it.Count, GPUMilli: allocator.MilliPerGPU}
	return it, nil
}

// selectorKey identifies a list of selectors.
func selectorKey(sel []resourceapi.DeviceSelector) string {
	var b strings.Builder
	for _, s := range sel {
		if s.CEL != nil {
			b.WriteString(s.CEL.Expression)
		}
		b.WriteByte(0)
	}
	return b.String()
}

// capacity validates a fraction's capacity requests.
func (it *Item) capacity(req map[resourceapi.QualifiedName]resource.Quantity) error {
	for name, q := range req {
		switch {
		case name != CapacityMemory && name != CapacityCores:
			return fmt.Errorf("capacity %q (want %s or %s): %w", name, CapacityMemory, CapacityCores, ErrUnsupported)
		case q.Sign() < 0:
			return fmt.Errorf("capacity %s %s is negative: %w", name, q.String(), ErrInvalid)
		case name == CapacityMemory && q.CmpInt64(maxMemoryBytes) > 0:
			return fmt.Errorf("capacity memory %s exceeds %d bytes: %w", q.String(), maxMemoryBytes, ErrInvalid)
		case name == CapacityCores && q.CmpInt64(maxCoresPct) > 0:
			return fmt.Errorf("capacity cores %s exceeds %d%%: %w", q.String(), maxCoresPct, ErrInvalid)
		}
	}
	// Memory defaults to all of the GPU: a cores-only request takes the
	// GPU's memory, hence the whole GPU, as kube-scheduler allocates it.
	it.Capacity, it.caps = req, capBits(req)
	return nil
}

func (it *Item) fraction() error {
	mem, ok := it.Capacity[CapacityMemory]
	if !ok {
		it.Kind = Whole
		it.Alloc = allocator.Request{NumGPU: it.Count, GPUMilli: allocator.MilliPerGPU}
		return nil
	}
	if it.Count != 1 {
		return fmt.Errorf("count %d with capacity requests (a fraction is of one GPU): %w", it.Count, ErrUnsupported)
	}
	it.Kind = Fraction
	mib := (mem.Value() + (1 << 20) - 1) >> 20
	cores := int64(0)
	if c, ok := it.Capacity[CapacityCores]; ok {
		cores = (c.MilliValue() + 999) / 1000
	}
	if mib == 0 && cores == 0 {
		mib = 1
	}
	it.Alloc = allocator.Request{NumGPU: 1, GPUMemoryMiB: mib, GPUCoresPct: cores}
	return nil
}

// mig maps the selected MIG devices' shapes (compute slices, memory
// slices) onto allocator profiles, smallest first: one profile name may be
// different shapes on different GPUs (1g.10gb is 1 memory slice of an
// H100 and 2 of an A100 40GB), and a request without a profile selector
// takes the smallest slice that fits.
func (it *Item) mig(shapes []migShape) error {
	it.Kind = MIG
	if it.Count != 1 {
		return fmt.Errorf("count %d MIG devices (one per request): %w", it.Count, ErrUnsupported)
	}
	if it.Capacity != nil {
		return fmt.Errorf("capacity requests on a MIG device: %w", ErrUnsupported)
	}
	for _, sh := range shapes {
		if profileOf(sh.shape[0], sh.shape[1]) < 0 {
			return fmt.Errorf("MIG profile %s (%d compute, %d memory slices) has no allocator profile: %w", sh.profile, sh.shape[0], sh.shape[1], ErrUnsupported)
		}
		it.shapes = append(it.shapes, sh.shape)
	}
	slices.SortFunc(it.shapes, func(a, b [2]int) int {
		if a[1] != b[1] {
			return a[1] - b[1]
		}
		return a[0] - b[0]
	})
	it.setShape(0)
	return nil
}

// setShape makes the item ask for its i-th MIG shape, keeping the CPU and
// memory the caller put on the request.
func (it *Item) setShape(i int) {
	it.shape = it.shapes[i]
	it.Alloc = allocator.Request{NumGPU: 1, MIGProfile: allocator.MIGProfiles[profileOf(it.shape[0], it.shape[1])].Name,
		CPUMilli: it.Alloc.CPUMilli, MemoryMiB: it.Alloc.MemoryMiB}
}

// profileOf is the allocator profile with the shape, or -1.
func profileOf(compute, memory int) int {
	return slices.IndexFunc(allocator.MIGProfiles, func(p allocator.MIGProfile) bool {
		return p.Compute == compute && p.Memory == memory
	})
}

// usable reports whether the item may take device d on n, usage aside:
// type, class and selectors, tolerated taints, shareability for fractions.
func (it *Item) usable(n *Node, d *Device) bool {
	if d == nil || d.node != n || !it.eligible[d.id] || d.MIG != (it.Kind == MIG) {
		return false
	}
	if d.MIG && (d.ComputeSlices != it.shape[0] || d.Size != it.shape[1]) {
		return false
	}
	for _, t := range d.Taints {
		if t.Effect != resourceapi.DeviceTaintEffectNoSchedule && t.Effect != resourceapi.DeviceTaintEffectNoExecute {
			continue
		}
		if !slices.ContainsFunc(it.tolerations, func(tol resourceapi.DeviceToleration) bool { return resourceclaim.ToleratesTaint(tol, t) }) {
			return false
		}
	}
	if it.Kind == Fraction {
		if !d.Shareable {
			return false
		}
		if d.caps&it.caps != it.caps {
			return false
		}
	}
	return true
}

// capBit is a capacity a fraction may request (memory, cores) as a bit,
// for a quick "the device has every requested capacity"; 0 for others.
func capBit(name resourceapi.QualifiedName) uint8 {
	switch name {
	case CapacityMemory:
		return 1
	case CapacityCores:
		return 2
	}
	return 0
}

// capBits are the capBit of caps' names.
func capBits[V any](caps map[resourceapi.QualifiedName]V) uint8 {
	var b uint8
	for name := range caps {
		b |= capBit(name)
	}
	return b
}

// MostPerNode is the most devices one node offers it, usage and health
// aside (whole GPUs it may use; 1 for a fraction or MIG slice that some
// device could hold), and for a fraction the largest memory of such a
// device: what says a request can never fit, whatever is freed.
func (v *View) MostPerNode(it *Item) (devices int, fractionMemory int64) {
	for _, n := range v.nodes {
		m := offers(it, n)
		devices, fractionMemory = max(devices, m.devices), max(fractionMemory, m.fractionMemory)
	}
	return devices, fractionMemory
}

// offers is what n offers it: kept on the node for items without device
// tolerations, since it depends on the node's devices and the item's
// kind, not on usage (later views take the node over while its slices
// do not change, as its parts of node lists).
func offers(it *Item, n *Node) nodeMost {
	pk, ok := it.kindKey()
	if !ok {
		return mostOn(it, n)
	}
	m, ok := n.most[pk]
	if !ok {
		m = mostOn(it, n)
		if len(n.most) >= maxParts || n.most == nil {
			n.most = map[partKey]nodeMost{}
		}
		n.most[pk] = m
	}
	return m
}

// nodeMost is what one node offers an item: [View.MostPerNode] on it alone.
type nodeMost struct {
	devices        int
	fractionMemory int64
}

// mostOn counts the devices of n that it may use, with the largest memory
// among them for a fraction.
func mostOn(it *Item, n *Node) nodeMost {
	var m nodeMost
	for _, d := range n.devs {
		if !it.usable(n, d) {
			continue
		}
		m.devices++
		if it.Kind == Fraction {
			if c, ok := d.Capacity[CapacityMemory]; ok {
				m.fractionMemory = max(m.fractionMemory, c.Value.Value())
			}
		}
	}
	return m
}
