package anydevice

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/sets"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/utils/ptr"

	"github.com/gpud/gpud/pkg/scheduler/view"
)

// Timeout bounds one allocation attempt on one node, as kube-scheduler's
// DRA filter timeout bounds its own (the search over All, matchAttribute
// and prioritized lists is combinatorial).
const Timeout = 2 * time.Second

// Features are the structured allocator's features as kube-scheduler
// v1.37 enables them with its default feature gates.
func Features() structured.Features {
	return dynamicresources.AllocatorFeatures(feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate))
}

// Inputs are the informers' objects. Nil entries are ignored; a claim
// listed twice (by UID) counts once, as its later entry.
type Inputs struct {
	// Slices are every driver's ResourceSlices.
	Slices  []*resourceapi.ResourceSlice
	Claims  []*resourceapi.ResourceClaim
	Classes []*resourceapi.DeviceClass
	Nodes   []*corev1.Node
	// CEL caches compiled selectors; nil is a new cache.
	CEL *cel.Cache
}

// State is every device's allocation over one decision cycle.
type State struct {
	features structured.Features
	slices   []*resourceapi.ResourceSlice
	classes  classLister
	nodes    map[string]*corev1.Node
	cel      *cel.Cache

	// dedicated counts the allocations of each device taken whole;
	// shared counts each share ID; consumed sums consumed capacity.
	dedicated map[structured.DeviceID]int
	shared    map[structured.SharedDeviceID]int
	consumed  map[structured.DeviceID]map[resourceapi.QualifiedName]resource.Quantity

	// alloc is the allocator over the state as it was when it was made;
	// nil after the state changed.
	alloc structured.Allocator

	// The counts above are made on first use (most cycles allocate nothing
	// through this state, and counting every claim of a large cluster
	// took a cycle milliseconds): until then claims are the claims to
	// count and ops the Assumes and Releases to apply after them.
	counted bool
	claims  []*resourceapi.ResourceClaim
	ops     []op
}

// op is an Assume (sign 1) or Release (-1) waiting for the counts.
type op struct {
	a    *resourceapi.AllocationResult
	sign int
}

// New builds the state of the inputs.
func New(in Inputs) *State {
	s := &State{features: Features(), classes: classLister{}, nodes: map[string]*corev1.Node{}, cel: in.CEL,
		dedicated: map[structured.DeviceID]int{}, shared: map[structured.SharedDeviceID]int{},
		consumed: map[structured.DeviceID]map[resourceapi.QualifiedName]resource.Quantity{}}
	if s.cel == nil {
		s.cel = cel.NewCache(256, cel.Features{EnableConsumableCapacity: s.features.ConsumableCapacity})
	}
	for _, sl := range in.Slices {
		if sl != nil {
			s.slices = append(s.slices, sl)
		}
	}
	for _, c := range in.Classes {
		if c != nil {
			s.classes[c.Name] = c
		}
	}
	for _, n := range in.Nodes {
		if n != nil {
			s.nodes[n.Name] = n
		}
	}
	s.claims = in.Claims
	return s
}

// count makes the counts: every allocated claim, then the Assumes and
// Releases so far.
func (s *State) count() {
	if s.counted {
		return
	}
	s.counted = true
	for c := range view.LatestAllocated(s.claims) {
		s.add(c.Status.Allocation, 1)
	}
	for _, o := range s.ops {
		s.add(o.a, o.sign)
	}
	s.claims, s.ops = nil, nil
}

// Assume counts an allocation's devices as taken from now on (one the
// cycle decided, or a what-if put back). Assume and Release on a nil State
// do nothing.
func (s *State) Assume(a *resourceapi.AllocationResult) { s.apply(a, 1) }

// Release stops counting an allocation's devices (a what-if eviction, a
// placement undone).
func (s *State) Release(a *resourceapi.AllocationResult) { s.apply(a, -1) }

// apply adds (sign 1) or removes (sign -1) an allocation, as
// kube-scheduler's claim tracker counts it: admin-access results take
// nothing; results with a share ID take the share and their consumed
// capacity (consumable capacity), the others the whole device.
func (s *State) apply(a *resourceapi.AllocationResult, sign int) {
	if s == nil || a == nil {
		return
	}
	if !s.counted {
		s.ops = append(s.ops, op{a, sign})
		return
	}
	s.add(a, sign)
}

// add is apply on the counts.
func (s *State) add(a *resourceapi.AllocationResult, sign int) {
	s.alloc = nil
	for _, r := range a.Devices.Results {
		if ptr.Deref(r.AdminAccess, false) {
			continue
		}
		id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
		if r.ShareID != nil && s.features.ConsumableCapacity {
			sid := structured.MakeSharedDeviceID(id, r.ShareID)
			if s.shared[sid] += sign; s.shared[sid] <= 0 {
				delete(s.shared, sid)
			}
			if len(r.ConsumedCapacity) == 0 {
				continue
			}
			sum := s.consumed[id]
			if sum == nil {
				sum = map[resourceapi.QualifiedName]resource.Quantity{}
				s.consumed[id] = sum
			}
			for name, q := range r.ConsumedCapacity {
				t := sum[name]
				if sign > 0 {
					t.Add(q)
				} else {
					t.Sub(q)
				}
				sum[name] = t
			}
			continue
		}
		if s.dedicated[id] += sign; s.dedicated[id] <= 0 {
			delete(s.dedicated, id)
		}
	}
}

// allocatedState is the state in the allocator's terms.
func (s *State) allocatedState() structured.AllocatedState {
	s.count()
	st := structured.AllocatedState{AllocatedDevices: sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](), AggregatedCapacity: structured.NewConsumedCapacityCollection()}
	for id := range s.dedicated {
		st.AllocatedDevices.Insert(id)
	}
	for id := range s.shared {
		st.AllocatedSharedDeviceIDs.Insert(id)
	}
	for id, caps := range s.consumed {
		st.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, caps))
	}
	return st
}

// Allocate allocates the unallocated claims on node, all or none, with
// the devices taken so far counted, and returns one result per claim in
// claims' order. It does not assume them (call [State.Assume]). It fails
// with [ErrNoFit], naming the claims, when they do not fit on the node,
// and with [ErrInvalid] when a claim cannot be allocated as written.
func (s *State) Allocate(node string, claims []*resourceapi.ResourceClaim) ([]resourceapi.AllocationResult, error) {
	if len(claims) == 0 {
		return nil, nil
	}
	n := s.nodes[node]
	if n == nil {
		return nil, fmt.Errorf("node %q not found: %w", node, ErrNoFit)
	}
	var names []string
	for _, c := range claims {
		if c.Status.Allocation != nil {
			return nil, fmt.Errorf("claim %s/%s is allocated already: %w", c.Namespace, c.Name, ErrInvalid)
		}
		if err := s.checkClasses(c); err != nil {
			return nil, err
		}
		names = append(names, c.Namespace+"/"+c.Name)
	}
	if s.alloc == nil {
		a, err := structured.NewAllocator(context.Background(), s.features, s.allocatedState(), s.classes, s.slices, s.cel)
		if err != nil {
			return nil, fmt.Errorf("structured allocator: %v: %w", err, ErrInvalid)
		}
		s.alloc = a
	}
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	res, err := s.alloc.Allocate(ctx, n, claims)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return nil, fmt.Errorf("claims %s: no allocation found on node %s within %s: %w", strings.Join(names, ", "), node, Timeout, ErrNoFit)
	case errors.Is(err, structured.ErrFailedAllocationOnNode):
		return nil, fmt.Errorf("claims %s on node %s: %v: %w", strings.Join(names, ", "), node, err, ErrNoFit)
	case err != nil:
		return nil, fmt.Errorf("claims %s: %v: %w", strings.Join(names, ", "), err, ErrInvalid)
	case res == nil:
		return nil, fmt.Errorf("claims %s: no free devices on node %s match: %w", strings.Join(names, ", "), node, ErrNoFit)
	}
	return res, nil
}

// checkClasses fails for a request naming a DeviceClass that does not
// exist, as kube-scheduler's PreFilter does.
func (s *State) checkClasses(c *resourceapi.ResourceClaim) error {
	for _, r := range c.Spec.Devices.Requests {
		var names []string
		if r.Exactly != nil {
			names = append(names, r.Exactly.DeviceClassName)
		}
		for _, sub := range r.FirstAvailable {
			names = append(names, sub.DeviceClassName)
		}
		for _, name := range names {
			if _, ok := s.classes[name]; !ok {
				return fmt.Errorf("claim %s/%s request %q: DeviceClass %q not found: %w", c.Namespace, c.Name, r.Name, name, ErrInvalid)
			}
		}
	}
	return nil
}

// AllocatedFits says why an already allocated claim's node selector
// refuses node ("" if it allows it): a pod must run where its allocated
// devices are reachable.
func (s *State) AllocatedFits(node string, claims []*resourceapi.ResourceClaim) string {
	if s == nil {
		return ""
	}
	n := s.nodes[node]
	for _, c := range claims {
		if c == nil || c.Status.Allocation == nil || c.Status.Allocation.NodeSelector == nil {
			continue
		}
		if n == nil {
			return fmt.Sprintf("node %q not found", node)
		}
		sel, err := nodeaffinity.NewNodeSelector(c.Status.Allocation.NodeSelector)
		if err != nil || !sel.Match(n) {
			return fmt.Sprintf("claim %s/%s is allocated on other nodes", c.Namespace, c.Name)
		}
	}
	return ""
}

// classLister serves DeviceClasses by name to the allocator.
type classLister map[string]*resourceapi.DeviceClass

func (l classLister) List() ([]*resourceapi.DeviceClass, error) {
	out := make([]*resourceapi.DeviceClass, 0, len(l))
	for _, c := range l {
		out = append(out, c)
	}
	return out, nil
}

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	if c, ok := l[name]; ok {
		return c, nil
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
}
