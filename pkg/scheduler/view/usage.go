package view

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// devKey names a device, or a counter set: pool (= node) and name.
type devKey struct{ node, device string }

// devUse is what allocations take from one device.
type devUse struct {
	// exclusive counts allocations without a share ID.
	exclusive int
	// shares counts allocations with one; consumed sums their capacity.
	shares   int
	consumed map[resourceapi.QualifiedName]resource.Quantity
	// whole counts shares that took all of the device's memory (a
	// whole-GPU request on a shareable device): no overcommit there.
	whole int
	// milli caches sharedMilli's result; milliOK says it is valid (add
	// and sub clear it).
	milli   int64
	milliOK bool
}

func (u *devUse) allocated() bool { return u != nil && u.exclusive+u.shares > 0 }

func (u *devUse) clone() *devUse {
	if u == nil {
		return nil
	}
	c := *u
	c.consumed = maps.Clone(u.consumed)
	return &c
}

// usage is what all allocations take, per device (by Device.id), plus
// how many allocations each GPU's MIG devices hold (so a whole-GPU
// placement need not look at every MIG placement of the GPU).
type usage struct {
	dev  map[int32]*devUse
	migs map[*GPU]int
	// id tells usages apart (models remember the one they read).
	id uint64
}

func newUsage() usage {
	return usage{dev: map[int32]*devUse{}, migs: map[*GPU]int{}, id: usageClock.Add(1)}
}

func (u usage) clone() usage {
	out := usage{dev: make(map[int32]*devUse, len(u.dev)), migs: maps.Clone(u.migs), id: usageClock.Add(1)}
	for k, d := range u.dev {
		out.dev[k] = d.clone()
	}
	return out
}

// migBusy reports whether one of gp's MIG devices is allocated.
func (u usage) migBusy(gp *GPU) bool { return u.migs[gp] > 0 }

// usageClock numbers usage changes, across views: [touch] gives a node
// the next number, so a number a model saw is never given again. Usages
// and measurements take their ids from it too.
var usageClock atomic.Uint64

// touch records that what n's devices hold (or what the measurement
// adjusts on them) changed: models bring n up to date again (model.sync).
func touch(n *Node) { n.usageVer = usageClock.Add(1) }

// undoLog keeps usage entries as they were before their first change, so
// that a what-if (a Place) can be taken back exactly without copying the
// whole usage. nil records nothing.
type undoLog struct {
	// saved holds the entries' earlier values; nil: absent.
	saved map[int32]*devUse
	migs  map[*GPU]int
	// nodes are the nodes of the saved entries, touched again on restore.
	nodes []*Node
}

func (j *undoLog) save(u usage, d *Device) {
	if j == nil {
		return
	}
	if j.saved == nil {
		j.saved, j.migs = map[int32]*devUse{}, map[*GPU]int{}
	}
	if _, done := j.saved[d.id]; !done {
		j.saved[d.id] = u.dev[d.id].clone()
		if !slices.Contains(j.nodes, d.node) {
			j.nodes = append(j.nodes, d.node)
		}
	}
	if gp := &d.node.GPUs[d.GPU]; d.MIG {
		if _, done := j.migs[gp]; !done {
			j.migs[gp] = u.migs[gp]
		}
	}
}

// restore puts back every saved entry and forgets them.
func (j *undoLog) restore(u usage) {
	for k, d := range j.saved {
		if d == nil {
			delete(u.dev, k)
		} else {
			u.dev[k] = d
		}
	}
	for gp, n := range j.migs {
		if n == 0 {
			delete(u.migs, gp)
		} else {
			u.migs[gp] = n
		}
	}
	for _, n := range j.nodes {
		touch(n)
	}
	clear(j.saved)
	clear(j.migs)
	j.nodes = j.nodes[:0]
}

// add records an allocation's gpud devices. Admin-access results take
// nothing (as for kube-scheduler). Results naming a device the view does
// not have are left out and reported in the error; the rest are added, so
// a stale device name never hides what the claim's other devices take.
func (u usage) add(v *View, a *resourceapi.AllocationResult, j *undoLog) error {
	var unknown []string
	for _, r := range a.Devices.Results {
		if r.Driver != DriverName || (r.AdminAccess != nil && *r.AdminAccess) {
			continue
		}
		dev := v.device(r.Pool, r.Device)
		if dev == nil {
			unknown = append(unknown, r.Pool+"/"+r.Device)
			continue
		}
		j.save(u, dev)
		touch(dev.node)
		d := u.dev[dev.id]
		if d == nil {
			d = &devUse{}
			u.dev[dev.id] = d
		}
		if dev.MIG {
			u.migs[&dev.node.GPUs[dev.GPU]]++
		}
		d.milliOK = false
		if r.ShareID == nil {
			d.exclusive++
			continue
		}
		d.shares++
		if fullMemory(dev, r.ConsumedCapacity) {
			d.whole++
		}
		if d.consumed == nil {
			d.consumed = map[resourceapi.QualifiedName]resource.Quantity{}
		}
		for name, q := range r.ConsumedCapacity {
			sum := d.consumed[name]
			sum.Add(q)
			d.consumed[name] = sum
		}
	}
	if len(unknown) > 0 {
		return fmt.Errorf("allocated devices %v are not published: %w", unknown, ErrInvalid)
	}
	return nil
}

// sub removes what add added for a.
func (u usage) sub(v *View, a *resourceapi.AllocationResult, j *undoLog) {
	for _, r := range a.Devices.Results {
		if r.Driver != DriverName || (r.AdminAccess != nil && *r.AdminAccess) {
			continue
		}
		dev := v.device(r.Pool, r.Device)
		if dev == nil || u.dev[dev.id] == nil {
			continue // an unknown device add left out
		}
		j.save(u, dev)
		touch(dev.node)
		d := u.dev[dev.id]
		if dev.MIG {
			u.migs[&dev.node.GPUs[dev.GPU]]--
		}
		d.milliOK = false
		if r.ShareID == nil {
			d.exclusive--
			continue
		}
		d.shares--
		if fullMemory(dev, r.ConsumedCapacity) {
			d.whole--
		}
		for name, q := range r.ConsumedCapacity {
			sum := d.consumed[name]
			sum.Sub(q)
			d.consumed[name] = sum
		}
	}
}

// fullMemory reports whether consumed takes all of d's memory.
func fullMemory(d *Device, consumed map[resourceapi.QualifiedName]resource.Quantity) bool {
	q, ok := consumed[CapacityMemory]
	c, has := d.Capacity[CapacityMemory]
	return ok && has && q.Cmp(c.Value) >= 0
}

// device is the named device of the view, or nil.
func (v *View) device(pool, name string) *Device {
	if n := v.byName[pool]; n != nil {
		return n.Devices[name]
	}
	return nil
}

// Violation is one over-allocation [Check] found.
type Violation struct {
	Node, Device string
	Reason       string
}

func (e Violation) String() string { return fmt.Sprintf("%s/%s: %s", e.Node, e.Device, e.Reason) }

// Check re-checks the view's allocations plus allocs against the devices:
// an exclusive device allocated once, a shared device's consumed capacity
// within its capacity, and every counter set (MIG memory and compute
// slices, which the whole GPU consumes in full) within its counters, each
// allocated device counted once. It returns an error matching
// [ErrOverAllocated] that lists every violation, or one matching
// [ErrInvalid] if allocs name unknown devices.
func Check(v *View, allocs ...*resourceapi.AllocationResult) error {
	return check(v, nil, allocs, false)
}

// check is Check with credit (nil: none) bytes of memory allowed beyond
// a device's capacity; touched: only the devices (and their counter sets)
// that allocs take are checked.
func check(v *View, credit func(*Device) int64, allocs []*resourceapi.AllocationResult, touched bool) error {
	u := v.usage
	if len(allocs) > 0 {
		u = u.clone()
		for _, a := range allocs {
			if a == nil {
				continue
			}
			if err := u.add(v, a, nil); err != nil {
				return fmt.Errorf("check: %w", err)
			}
		}
	}
	vs := violations(v, u, "", credit)
	if touched {
		keep := map[devKey]bool{}
		for _, a := range allocs {
			if a == nil {
				continue
			}
			for _, r := range a.Devices.Results {
				if d := v.device(r.Pool, r.Device); d != nil && r.Driver == DriverName {
					keep[devKey{r.Pool, r.Device}] = true
					for _, cc := range d.Consumes {
						keep[devKey{r.Pool, cc.CounterSet}] = true
					}
				}
			}
		}
		vs = slices.DeleteFunc(vs, func(x Violation) bool { return !keep[devKey{x.Node, x.Device}] })
	}
	if len(vs) > 0 {
		msg := make([]string, len(vs))
		for i, x := range vs {
			msg[i] = x.String()
		}
		return fmt.Errorf("check: %v: %w", msg, ErrOverAllocated)
	}
	return nil
}

// violations lists every over-allocation in u (on node only, if set),
// sorted; credit, if set, is the memory a device may consume beyond its
// capacity (overcommit).
func violations(v *View, u usage, only string, credit func(*Device) int64) []Violation {
	var out []Violation
	counters := map[devKey]map[string]resource.Quantity{} // (node, set) -> used
	check := func(d *Device, use *devUse) {
		if !use.allocated() {
			return
		}
		k := devKey{d.node.Name, d.Name}
		if !d.Shareable && use.exclusive+use.shares > 1 {
			out = append(out, Violation{k.node, k.device, fmt.Sprintf("allocated %d times, not shareable", use.exclusive+use.shares)})
		}
		if d.Shareable && use.exclusive > 0 && use.exclusive+use.shares > 1 {
			out = append(out, Violation{k.node, k.device, fmt.Sprintf("allocated exclusively and %d more times", use.exclusive+use.shares-1)})
		}
		for name, q := range use.consumed {
			c, ok := d.Capacity[name]
			if !ok {
				out = append(out, Violation{k.node, k.device, fmt.Sprintf("consumes capacity %q it does not have", name)})
				continue
			}
			limit := c.Value
			if credit != nil && name == CapacityMemory {
				if b := credit(d); b > 0 {
					limit = *resource.NewQuantity(c.Value.Value()+b, c.Value.Format)
				}
			}
			if q.Cmp(limit) > 0 {
				out = append(out, Violation{k.node, k.device, fmt.Sprintf("%s: %s consumed of %s", name, q.String(), c.Value.String())})
			}
		}
		for _, cc := range d.Consumes {
			ck := devKey{k.node, cc.CounterSet}
			if counters[ck] == nil {
				counters[ck] = map[string]resource.Quantity{}
			}
			for name, c := range cc.Counters {
				sum := counters[ck][name]
				sum.Add(c.Value)
				counters[ck][name] = sum
			}
		}
	}
	if n := v.byName[only]; n != nil {
		for _, d := range n.devs {
			check(d, u.dev[d.id])
		}
	} else if only == "" {
		for id, use := range u.dev {
			check(v.devs[id], use)
		}
	}
	for ck, used := range counters {
		set := v.byName[ck.node].Counters[ck.device]
		for name, q := range used {
			if q.Cmp(set[name]) > 0 {
				limit := set[name]
				out = append(out, Violation{ck.node, ck.device, fmt.Sprintf("counter %s: %s consumed of %s", name, q.String(), limit.String())})
			}
		}
	}
	slices.SortFunc(out, func(a, b Violation) int {
		if c := compareStr(a.Node, b.Node); c != 0 {
			return c
		}
		if c := compareStr(a.Device, b.Device); c != 0 {
			return c
		}
		return compareStr(a.Reason, b.Reason)
	})
	return out
}

func compareStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Assume records allocations decided in this cycle, so that later
// placements on the same view see their devices as taken (a gang's
// members, the next pod of a cycle). It adds what it can and reports
// results naming devices the view does not have.
func (v *View) Assume(allocs ...Allocation) error {
	var errs []error
	for _, a := range allocs {
		if a.Result == nil {
			continue
		}
		if err := v.usage.add(v, a.Result, nil); err != nil {
			errs = append(errs, fmt.Errorf("claim %s/%s: %w", a.Claim.Namespace, a.Claim.Name, err))
		}
	}
	return errors.Join(errs...)
}

// Release removes an allocation the view counts (a preemption victim's
// claim in a what-if), undoing what Build or Assume added for it.
func (v *View) Release(a *resourceapi.AllocationResult) {
	if a != nil {
		v.usage.sub(v, a, nil)
	}
}
