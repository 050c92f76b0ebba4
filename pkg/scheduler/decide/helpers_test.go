package decide

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/cel"

	"github.com/gpud/gpud/internal/testkit/schedtest"
	"github.com/gpud/gpud/pkg/allocator/jobs"
	"github.com/gpud/gpud/pkg/dra"
	"github.com/gpud/gpud/pkg/gputel"
	"github.com/gpud/gpud/pkg/scheduler/anydevice"
	"github.com/gpud/gpud/pkg/scheduler/plan"
	"github.com/gpud/gpud/pkg/scheduler/rules"
	"github.com/gpud/gpud/pkg/scheduler/view"
)

// states caches simulated node states by profile and MIG GPUs (reading a
// simulated node is the slow part of a test cluster).
var states sync.Map

// simState reads a simulated node as the agent's wiring does (as
// pkg/scheduler/view's tests do); migOn turns MIG mode on for those GPUs.
func simState(t testing.TB, profile string, migOn ...int) dra.NodeState {
	t.Helper()
	key := fmt.Sprint(profile, migOn)
	if st, ok := states.Load(key); ok {
		return st.(dra.NodeState)
	}
	st := schedtest.SimState(t, profile, "sim", migOn...)
	states.Store(key, st)
	return st
}

// toSlices turns a node's published pool into ResourceSlices as the
// resourceslice controller publishes them.
func toSlices(t testing.TB, name string, st dra.NodeState) []*resourceapi.ResourceSlice {
	t.Helper()
	_, out := schedtest.Publish(t, name, st)
	return out
}

// shippedClasses reads deploy/dra/deviceclasses.yaml.
func shippedClasses(t testing.TB) []*resourceapi.DeviceClass {
	t.Helper()
	return schedtest.ShippedClasses(t)
}

// env is a test cluster: nodes with gpud's slices, pods with claims, and
// the API server's state as the runtime would carry a plan out.
type env struct {
	t       testing.TB
	now     time.Time
	slices  []*resourceapi.ResourceSlice
	nodes   []*corev1.Node
	pending []*plan.Pod
	bound   []*plan.Pod
	groups  map[string]*plan.Group
	queues  []jobs.Queue
	res     []jobs.Reservation
	pdbs    []*policyv1.PodDisruptionBudget
	seq     int
	ids     int
	// matches and celCache carry across cycles as the runtime's do.
	matches  *view.MatchCache
	celCache *cel.Cache
	// telemetry is what the nodes' agents stream (Snapshot.Telemetry);
	// nil: no listener.
	telemetry map[string]*gputel.Node
	// healed is where gangs healed recently ran (Snapshot.Healed).
	healed map[string][]string
	// rules, if set, are kube-scheduler's rules each snapshot carries.
	rules *rules.Rules
	// classes are DeviceClasses besides the shipped ones (other drivers').
	classes []*resourceapi.DeviceClass
	// pools, if set, carries unchanged nodes from view to view, as the
	// scheduler's snapshots do.
	pools *view.PoolCache
}

func newEnv(t testing.TB) *env {
	return &env{t: t, now: time.Unix(1_800_000_000, 0), groups: map[string]*plan.Group{},
		matches: view.NewMatchCache(), celCache: cel.NewCache(256, cel.Features{EnableConsumableCapacity: true})}
}

// node adds a node of a simnode profile with labels; migOn turns MIG on.
func (e *env) node(name, profile string, labels map[string]string, migOn ...int) {
	e.t.Helper()
	e.slices = append(e.slices, toSlices(e.t, name, simState(e.t, profile, migOn...))...)
	e.nodes = append(e.nodes, schedtest.Node(name, labels))
}

func exact(name, class string, count int64, sel ...string) resourceapi.DeviceRequest {
	return schedtest.Exact(name, class, count, sel...)
}

func gpus(n int64) resourceapi.DeviceRequest { return exact("gpu", "gpu.gpud.io", n) }

func fraction(mem string) resourceapi.DeviceRequest {
	r := exact("gpu", "gpu.gpud.io", 1)
	r.Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
		"memory": resource.MustParse(mem)}}
	return r
}

func migReq(profile string) resourceapi.DeviceRequest {
	return exact("mig", "mig.gpud.io", 1, schedtest.MIGSelector(profile))
}

// podOpt changes a test pod.
type podOpt func(*plan.Pod)

func prio(p int32) podOpt             { return func(x *plan.Pod) { x.Priority = p } }
func queue(q string) podOpt           { return func(x *plan.Pod) { x.Queue = q } }
func group(g string) podOpt           { return func(x *plan.Pod) { x.Group = "default/" + g } }
func checkpointable() podOpt          { return func(x *plan.Pod) { x.Checkpointable = true } }
func estimate(d time.Duration) podOpt { return func(x *plan.Pod) { x.RuntimeEstimate = d } }

// onNode pins a pod to a node with required affinity on metadata.name.
func onNode(n string) podOpt {
	return func(x *plan.Pod) {
		x.Pod.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{n}}},
			}}}}}
	}
}

func labelled(k, v string) podOpt {
	return func(x *plan.Pod) {
		if x.Pod.Labels == nil {
			x.Pod.Labels = map[string]string{}
		}
		x.Pod.Labels[k] = v
	}
}

// pod adds a pending pod with one claim holding reqs (none: a CPU-only
// pod).
func (e *env) pod(name string, reqs []resourceapi.DeviceRequest, opts ...podOpt) *plan.Pod {
	e.seq++
	kp := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("pod-uid-" + name),
			CreationTimestamp: metav1.NewTime(e.now.Add(time.Duration(e.seq) * time.Second))},
		Spec: corev1.PodSpec{SchedulerName: "gpud-scheduler", Containers: []corev1.Container{{Name: "c",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}}}}},
	}
	p := &plan.Pod{Pod: kp, Created: kp.CreationTimestamp.Time}
	if len(reqs) > 0 {
		c := &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-gpu", Namespace: "default", UID: types.UID("claim-uid-" + name)},
			Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: reqs}},
		}
		p.Claims = []*resourceapi.ResourceClaim{c}
		kp.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &c.Name}}
	}
	for _, o := range opts {
		o(p)
	}
	e.pending = append(e.pending, p)
	return p
}

// gang adds a PodGroup with minMember.
func (e *env) gang(name string, minMember int32) {
	e.groups["default/"+name] = &plan.Group{Namespace: "default", Name: name, MinMember: minMember, Created: e.now}
}

// snapshot builds the cycle's snapshot from a fresh view.
func (e *env) snapshot() *plan.Snapshot { return e.snapshotOf(e.bound, e.pending) }

// snapshotOf builds a snapshot of only these bound and pending pods.
func (e *env) snapshotOf(bound, pending []*plan.Pod) *plan.Snapshot {
	e.t.Helper()
	var claims []*resourceapi.ResourceClaim
	for _, l := range [][]*plan.Pod{bound, pending} {
		for _, p := range l {
			claims = append(claims, p.Claims...)
		}
	}
	classes := append(shippedClasses(e.t), e.classes...)
	v, skips := view.Build(view.Inputs{Slices: e.slices, Claims: claims, Classes: classes, Nodes: e.nodes,
		Matches: e.matches, CEL: e.celCache, Pools: e.pools})
	if len(skips) > 0 {
		e.t.Fatalf("skips: %v", skips)
	}
	devs := anydevice.New(anydevice.Inputs{Slices: e.slices, Claims: claims, Classes: classes, Nodes: e.nodes, CEL: e.celCache})
	s := &plan.Snapshot{Now: e.now, View: v, Devices: devs, Pending: slices.Clone(pending), Bound: slices.Clone(bound),
		Groups: e.groups, Queues: e.queues, Reservations: e.res, Policy: "gpud"}
	s.PDBs = e.pdbs
	s.Telemetry = e.telemetry
	s.Healed = e.healed
	if e.rules != nil {
		var pods []*corev1.Pod
		for _, p := range bound {
			pods = append(pods, p.Pod)
		}
		rc, err := e.rules.Cycle(context.Background(), e.nodes, pods)
		if err != nil {
			e.t.Fatal(err)
		}
		s.Rules = rc
	}
	return s
}

// uuidOf is the "uuid" attribute of device dev on node.
func (e *env) uuidOf(node, dev string) string {
	e.t.Helper()
	for _, s := range e.slices {
		if s.Spec.Pool.Name != node {
			continue
		}
		for _, d := range s.Spec.Devices {
			if d.Name == dev {
				if a := d.Attributes["uuid"].StringValue; a != nil {
					return *a
				}
			}
		}
	}
	e.t.Fatalf("no device %s with a uuid on node %s", dev, node)
	return ""
}

// report sets what node's agent streams about device dev (whole GPU or
// MIG device), turning telemetry on.
func (e *env) report(node, dev string, d gputel.Device) {
	e.t.Helper()
	e.streams(node).Devices[e.uuidOf(node, dev)] = d
}

// streams turns telemetry on for node (no device reported yet) and
// returns it.
func (e *env) streams(node string) *gputel.Node {
	if e.telemetry == nil {
		e.telemetry = map[string]*gputel.Node{}
	}
	nt := e.telemetry[node]
	if nt == nil {
		nt = &gputel.Node{Received: e.now, Interval: time.Second, Devices: map[string]gputel.Device{}}
		e.telemetry[node] = nt
	}
	return nt
}

// devicesOf lists the devices a bind's new allocations take, "node/device".
func devicesOf(b plan.Bind) []string {
	var out []string
	for _, a := range b.Allocations {
		if a.Result == nil {
			continue
		}
		for _, r := range a.Result.Devices.Results {
			out = append(out, r.Pool+"/"+r.Device)
		}
	}
	return out
}

// decide runs one cycle with share IDs drawn in order.
func (e *env) decide(cfg Config) plan.Plan {
	e.t.Helper()
	s := e.snapshot()
	if cfg.NewShareID == nil {
		cfg.NewShareID = func() types.UID { e.ids++; return types.UID(fmt.Sprintf("share-%d", e.ids)) }
	}
	p := New(cfg).Decide(s)
	checkPlan(e.t, s, p, cfg)
	oracle(e.t, e, p, cfg)
	return p
}

// apply carries a plan out as the runtime does: claims written, pods
// bound, victims marked terminating.
func (e *env) apply(p plan.Plan) {
	e.t.Helper()
	for _, b := range p.Binds {
		for _, a := range b.Allocations {
			if a.Claim.Status.Allocation != nil {
				continue
			}
			st, err := a.Status(b.Pod.Pod, e.now)
			if err != nil {
				e.t.Fatal(err)
			}
			for i, c := range b.Pod.Claims {
				if c == a.Claim {
					b.Pod.Claims[i] = st
				}
			}
		}
		b.Pod.Pod.Spec.NodeName = b.Node
		st := metav1.NewTime(e.now)
		b.Pod.Pod.Status.StartTime = &st
		e.pending = slices.DeleteFunc(e.pending, func(x *plan.Pod) bool { return x == b.Pod })
		e.bound = append(e.bound, b.Pod)
	}
	for _, x := range p.Pending {
		x.Pod.Pod.Status.NominatedNodeName = x.NominatedNode
	}
	for _, ev := range p.Evictions {
		ts := metav1.NewTime(e.now)
		ev.Victim.Pod.DeletionTimestamp = &ts
	}
}

// finish removes bound pods (terminated), freeing their claims.
func (e *env) finish(keys ...string) {
	e.bound = slices.DeleteFunc(e.bound, func(p *plan.Pod) bool { return slices.Contains(keys, p.Key()) })
}

// checkPlan checks what every plan must hold: binds over-allocate nothing
// on a fresh view, gangs bind at least minMember together, every pending
// pod is in exactly one of binds and pending, and Decide left the view as
// it was.
func checkPlan(t testing.TB, s *plan.Snapshot, p plan.Plan, cfg Config) {
	t.Helper()
	var results []*resourceapi.AllocationResult
	seen := map[*plan.Pod]int{}
	gangs := map[string]int{}
	for _, b := range p.Binds {
		seen[b.Pod]++
		if b.Gang != "" {
			gangs[b.Gang]++
		}
		for _, a := range b.Allocations {
			if a.Claim.Status.Allocation == nil {
				results = append(results, a.Result)
				if a.Node != b.Node {
					t.Errorf("bind of %s on %s has a claim on %s", b.Pod.Key(), b.Node, a.Node)
				}
			}
		}
	}
	check := func(r ...*resourceapi.AllocationResult) error { return view.Check(s.View, r...) }
	if m := measure(cfg, s); cfg.Overcommit && m != nil {
		check = m.Check // overcommit's room is the oracle's to check
	}
	if err := check(results...); err != nil {
		t.Errorf("plan over-allocates: %v", err)
	}
	for g, n := range gangs {
		bound := 0
		for _, x := range s.Bound {
			if x.Group == g && x.Pod.DeletionTimestamp == nil {
				bound++
			}
		}
		if grp := s.Groups[g]; grp == nil || n+bound < int(grp.MinMember) {
			t.Errorf("gang %s: %d binds + %d bound, below minMember", g, n, bound)
		}
	}
	for _, x := range p.Pending {
		seen[x.Pod]++
		if x.Message == "" || x.Code == "" {
			t.Errorf("pending %s without code or message: %+v", x.Pod.Key(), x)
		}
	}
	for _, x := range s.Pending {
		if seen[x] != 1 {
			t.Errorf("pod %s appears %d times in binds and pending", x.Key(), seen[x])
		}
	}
	// No pod is evicted twice; a gang loses all its running members or
	// keeps at least minMember of them.
	evicted := map[*plan.Pod]bool{}
	gangLoses := map[string]int{}
	for _, ev := range p.Evictions {
		if evicted[ev.Victim] {
			t.Errorf("eviction of %s twice", ev.Victim.Key())
		}
		evicted[ev.Victim] = true
		if ev.Victim.Group != "" {
			gangLoses[ev.Victim.Group]++
		}
	}
	for g, n := range gangLoses {
		running := 0
		for _, x := range s.Bound {
			if x.Group == g && x.Pod.DeletionTimestamp == nil {
				running++
			}
		}
		if grp := s.Groups[g]; n < running && (grp == nil || running-n < int(grp.MinMember)) {
			t.Errorf("gang %s: %d of %d running members evicted, below minMember", g, n, running)
		}
	}
	for _, ev := range p.Evictions {
		if !slices.Contains(s.Bound, ev.Victim) || ev.Victim.Pod.DeletionTimestamp != nil {
			t.Errorf("eviction of %s: not a running bound pod", ev.Victim.Key())
		}
		if !slices.ContainsFunc(p.Pending, func(x plan.Pending) bool { return x.Pod == ev.For && x.NominatedNode != "" }) {
			t.Errorf("eviction of %s for %s, which is not pending nominated", ev.Victim.Key(), ev.For.Key())
		}
		if ev.Why != "priority" && ev.Why != "reclaim" && ev.Why != "reservation" {
			t.Errorf("eviction of %s: why %q", ev.Victim.Key(), ev.Why)
		}
	}
}

// bindsOf maps bound pod names to nodes.
func bindsOf(p plan.Plan) map[string]string {
	out := map[string]string{}
	for _, b := range p.Binds {
		out[b.Pod.Pod.Name] = b.Node
	}
	return out
}

func pendingOf(p plan.Plan, name string) (plan.Pending, bool) {
	for _, x := range p.Pending {
		if x.Pod.Pod.Name == name {
			return x, true
		}
	}
	return plan.Pending{}, false
}

func evictedOf(p plan.Plan) []string {
	var out []string
	for _, ev := range p.Evictions {
		out = append(out, ev.Victim.Pod.Name)
	}
	slices.Sort(out)
	return out
}
