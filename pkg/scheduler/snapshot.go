package scheduler

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/cel"

	"github.com/gpud/gpud/pkg/allocator/jobs"
	"github.com/gpud/gpud/pkg/scheduler/anydevice"
	"github.com/gpud/gpud/pkg/scheduler/extres"
	"github.com/gpud/gpud/pkg/scheduler/plan"
	"github.com/gpud/gpud/pkg/scheduler/podgroup"
	"github.com/gpud/gpud/pkg/scheduler/view"
)

// CodeClaimMissing is the reason code of a pod whose ResourceClaim does not
// exist (yet): it is not passed to the decider.
const CodeClaimMissing = "claim-missing"

// claimGrace is how long a pod may wait for its claims before it is told
// so: the user or the resourceclaim controller creates them within moments
// of the pod, and the claim may reach the informer after the pod. Telling
// earlier flaps the pod's PodScheduled condition to Unschedulable, which
// tools read as "does not fit" (kube-scheduler sets no condition at all for
// a missing claim).
const claimGrace = 5 * time.Second

// inputs are the informers' contents one cycle works on.
type inputs struct {
	pods    []*corev1.Pod
	claims  []*resourceapi.ResourceClaim // the assume cache merged in
	slices  []*resourceapi.ResourceSlice
	classes []*resourceapi.DeviceClass
	nodes   []*corev1.Node
	pdbs    []*policyv1.PodDisruptionBudget
	groups  map[string]*plan.Group
}

// snapshotter turns inputs into a plan.Snapshot. Its caches live across
// cycles; it is used by one cycle at a time.
type snapshotter struct {
	schedulerName string
	policy        string
	maxPending    int
	queues        []jobs.Queue
	reservations  []jobs.Reservation
	assumed       *assumeCache
	matches       *view.MatchCache
	pools         *view.PoolCache
	models        *view.ModelCache
	usage         *view.UsageCache
	cel           *cel.Cache
	// backoff, if set, keeps pods that earlier cycles left pending out
	// while they back off, and marks the ones tried before (plan.Pod.Retry).
	backoff *backoff
	// classes finds the DeviceClass serving an extended resource (nil:
	// extended resources are never served by DRA).
	classes extres.Resolver
	// autoGroups is Config.AutoGroups.
	autoGroups func() func(*corev1.Pod) (string, *plan.Group)
	// queueSet is Config.QueueSet.
	queueSet func() ([]jobs.Queue, []jobs.Reservation, func(*corev1.Pod) (string, error))
	// runtimes is Config.Runtimes (nil: none).
	runtimes Runtimes
}

// snapshot is one cycle's snapshot plus what the runtime needs besides.
type snapshot struct {
	*plan.Snapshot
	// early is what the cycle handed to the bind workers while deciding
	// (see Scheduler.streamBinds).
	early earlyBinds
	// missing are this scheduler's pods whose claims are missing, with
	// the reason; they are reported, not decided.
	missing []plan.Pending
	// reportMissingAt is when the first pod still within claimGrace of a
	// missing claim is to be told (zero: none); a cycle runs then.
	reportMissingAt time.Time
	// deferred counts pending pods beyond maxPending, left to later
	// cycles; backingOff the pending pods left out while they back off;
	// gated the pods with spec.schedulingGates (never scheduled).
	deferred, backingOff, gated int
	// waiting are the pods backing off (backingOff of them), still
	// pending to their users.
	waiting []*plan.Pod
	// unbound are this scheduler's pods without a node (gated, backing
	// off and deferred ones included).
	unbound map[types.UID]bool
	// volumes binds the bound pods' WaitForFirstConsumer volumes before
	// their Bindings (nil: nothing to bind, as in tests without rules).
	volumes volumeBinder
	// badAnnotations are pods whose gpud annotations are malformed, with
	// what is wrong (Message).
	badAnnotations []plan.Pending
	skips          []view.Skip
	claims         []*resourceapi.ResourceClaim
}

func newSnapshotter(cfg Config, assumed *assumeCache) *snapshotter {
	return &snapshotter{schedulerName: cfg.SchedulerName, policy: cfg.Policy, maxPending: cfg.MaxPending,
		queues: cfg.Queues, reservations: cfg.Reservations, assumed: assumed, matches: view.NewMatchCache(), pools: view.NewPoolCache(), models: view.NewModelCache(), usage: view.NewUsageCache(), autoGroups: cfg.AutoGroups, queueSet: cfg.QueueSet,
		cel: cel.NewCache(256, cel.Features{EnableConsumableCapacity: true})}
}

// anydevice.State is the structured allocator decide asks for claims
// gpud does not model.
var _ plan.Devices = (*anydevice.State)(nil)

// placed returns a pod that has not ended with the node it is bound to
// ("" none): for a bind the informer has not shown yet, a copy of the pod
// with the node set. ok is false for pods that ended.
func (s *snapshotter) placed(pod *corev1.Pod) (_ *corev1.Pod, node string, ok bool) {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return nil, "", false
	}
	node = pod.Spec.NodeName
	if node == "" {
		if n, bound := s.assumed.boundNode(pod.UID); bound {
			cp := *pod
			cp.Spec.NodeName = n
			pod, node = &cp, n
		}
	}
	return pod, node, true
}

// boundPods are the pods placed on nodes (see placed), for the rules.
func (s *snapshotter) boundPods(pods []*corev1.Pod) []*corev1.Pod {
	out := make([]*corev1.Pod, 0, len(pods))
	for _, p := range pods {
		if p, node, ok := s.placed(p); ok && node != "" {
			out = append(out, p)
		}
	}
	return out
}

// build makes the snapshot of one cycle at now.
func (s *snapshotter) build(in inputs, now time.Time) *snapshot {
	v, skips := view.Build(view.Inputs{Slices: in.slices, Claims: in.claims, Classes: in.classes, Nodes: in.nodes,
		CEL: s.cel, Matches: s.matches, Pools: s.pools, Models: s.models, Usage: s.usage})
	devs := anydevice.New(anydevice.Inputs{Slices: in.slices, Claims: in.claims, Classes: in.classes, Nodes: in.nodes})
	queues, reservations, queueOf := s.cycleQueues()
	out := &snapshot{Snapshot: &plan.Snapshot{Now: now, View: v, Devices: devs, Groups: in.groups, PDBs: in.pdbs,
		Queues: queues, Reservations: reservations, Policy: s.policy}, skips: skips, claims: in.claims,
		unbound: map[types.UID]bool{}}
	nodeByName := make(map[string]*corev1.Node, len(in.nodes))
	for _, n := range in.nodes {
		nodeByName[n.Name] = n
	}
	byName := make(map[string]*resourceapi.ResourceClaim, len(in.claims))
	extended := map[types.UID]*resourceapi.ResourceClaim{} // by the owning pod
	for _, c := range in.claims {
		byName[c.Namespace+"/"+c.Name] = c
		if owner, ok := extres.Owner(c); ok {
			extended[owner] = c
		}
	}
	var pending []*plan.Pod
	group := s.grouper(in.groups)
	for _, pod := range in.pods {
		pod, node, ok := s.placed(pod)
		if !ok {
			continue
		}
		if msg := annotationProblems(pod); msg != "" {
			out.badAnnotations = append(out.badAnnotations, plan.Pending{Pod: &plan.Pod{Pod: pod}, Message: msg})
		}
		if node != "" {
			claims, _ := resolveClaims(pod, byName)
			if c := extended[pod.UID]; c != nil {
				claims = append(claims, c)
			}
			b := s.learned(newPod(pod, compact(claims)))
			b.PluginDevices = extres.PluginDevices(pod, s.classes, nodeByName[node])
			_ = setQueue(b, queueOf) // refused: charged as unqueued
			out.Bound = append(out.Bound, group.add(b))
			continue
		}
		if pod.Spec.SchedulerName != s.schedulerName || pod.DeletionTimestamp != nil {
			continue
		}
		out.unbound[pod.UID] = true
		if len(pod.Spec.SchedulingGates) > 0 {
			// An admission controller (Kueue, ...) holds it back.
			out.gated++
			continue
		}
		claims, why := resolveClaims(pod, byName)
		p := group.add(s.learned(newPod(pod, claims)))
		if s.backoff != nil {
			p.Retry = s.backoff.tried(pod.UID)
		}
		if err := setQueue(p, queueOf); err != nil {
			out.missing = append(out.missing, plan.Pending{Pod: p, Code: CodeQueueRefused, Message: err.Error()})
			continue
		}
		if why != "" {
			if at := pod.CreationTimestamp.Add(claimGrace); now.Before(at) {
				if out.reportMissingAt.IsZero() || at.Before(out.reportMissingAt) {
					out.reportMissingAt = at
				}
			} else {
				out.missing = append(out.missing, plan.Pending{Pod: p, Code: CodeClaimMissing, Message: why})
			}
			continue
		}
		if opts := extres.PerNode(pod, s.classes, extended[pod.UID], in.nodes); opts != nil {
			p.PerNode = perNode(p, opts, in.nodes)
		} else if ec := extres.For(pod, s.classes, extended[pod.UID]); ec != nil {
			p.Claims = append(p.Claims, ec.Claim)
			p.ExtendedResources = ec.Mappings
		}
		pending = append(pending, p)
	}
	out.Groups = group.groups
	pending = s.dropBackingOff(pending, now, out)
	fifo := func(a, b *plan.Pod) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return cmp.Compare(a.Key(), b.Key())
	}
	if len(pending) > s.maxPending {
		// New pods first, so that retries never crowd them out.
		slices.SortFunc(pending, func(a, b *plan.Pod) int {
			if a.Retry != b.Retry {
				if a.Retry {
					return 1
				}
				return -1
			}
			return fifo(a, b)
		})
		out.deferred = len(pending) - s.maxPending
		pending = pending[:s.maxPending]
	}
	slices.SortFunc(pending, fifo)
	out.Pending = pending
	return out
}

// cycleGroups puts the pods that name no PodGroup into the gangs
// Config.AutoGroups finds for them, adding those to the cycle's groups.
type cycleGroups struct {
	auto   func(*corev1.Pod) (string, *plan.Group)
	groups map[string]*plan.Group
	copied bool // groups is this cycle's own (Config.Groups' map is not written)
}

func (s *snapshotter) grouper(groups map[string]*plan.Group) *cycleGroups {
	c := &cycleGroups{groups: groups}
	if s.autoGroups != nil {
		c.auto = s.autoGroups()
	}
	return c
}

// add sets p.Group to its automatic gang, unless p names a PodGroup; it
// returns p.
func (c *cycleGroups) add(p *plan.Pod) *plan.Pod {
	if p.Group != "" || c.auto == nil {
		return p
	}
	key, g := c.auto(p.Pod)
	if key == "" || g == nil {
		return p
	}
	if !c.copied {
		m := make(map[string]*plan.Group, len(c.groups)+1)
		maps.Copy(m, c.groups)
		c.groups, c.copied = m, true
	}
	c.groups[key] = g // "ns/<kind>:<name>": no PodGroup name has a ':'
	p.Group = key
	return p
}

// dropBackingOff leaves out the pods backing off at now; a gang's pods
// stay unless all of them back off (a gang is tried whole).
func (s *snapshotter) dropBackingOff(pending []*plan.Pod, now time.Time, out *snapshot) []*plan.Pod {
	if s.backoff == nil {
		return pending
	}
	waiting := make(map[*plan.Pod]bool, len(pending))
	groupReady := map[string]bool{}
	for _, p := range pending {
		w := s.backoff.waiting(p.Pod.UID, now)
		waiting[p] = w
		if p.Group != "" && !w {
			groupReady[p.Group] = true
		}
	}
	kept := pending[:0]
	for _, p := range pending {
		if waiting[p] && (p.Group == "" || !groupReady[p.Group]) {
			out.backingOff++
			out.waiting = append(out.waiting, p)
			continue
		}
		kept = append(kept, p)
	}
	return kept
}

// newPod derives what the decider reads from a pod. Malformed gpud
// annotations are ignored (annotationProblems says which).
func newPod(pod *corev1.Pod, claims []*resourceapi.ResourceClaim) *plan.Pod {
	est, _ := runtimeEstimate(pod.Annotations[plan.RuntimeEstimateAnnotation])
	last, _ := lastCheckpoint(pod.Annotations[plan.LastCheckpointAnnotation])
	p := &plan.Pod{Pod: pod, Claims: claims, Queue: pod.Labels[plan.QueueLabel], Created: pod.CreationTimestamp.Time,
		Checkpointable: pod.Annotations[plan.CheckpointableAnnotation] == "true", RuntimeEstimate: est, LastCheckpoint: last}
	p.Group = podgroup.KeyOf(pod) // spec.schedulingGroup, else the coscheduling label
	if pod.Spec.Priority != nil {
		p.Priority = *pod.Spec.Priority
	}
	return p
}

// learned gives p its learned runtime (Config.Runtimes) when its
// annotation gives none; it returns p.
func (s *snapshotter) learned(p *plan.Pod) *plan.Pod {
	if p.RuntimeEstimate == 0 && s.runtimes != nil {
		p.RuntimeEstimate = s.runtimes.Estimate(p.Pod)
	}
	return p
}

// perNode is p as it is placed on each option's nodes: its claims plus
// the option's extended-resource claim, if any; an option no node of
// nodes could ever serve says so (extres.NeverFits).
func perNode(p *plan.Pod, opts []extres.Option, nodes []*corev1.Node) []plan.PerNode {
	out := make([]plan.PerNode, 0, len(opts))
	for _, o := range opts {
		as := *p
		as.Claims = slices.Clone(p.Claims)
		if o.Claim != nil {
			as.Claims = append(as.Claims, o.Claim.Claim)
			as.ExtendedResources = o.Claim.Mappings
		}
		as.PluginDevices = extres.Count(o.Plugin)
		on := make(map[string]bool, len(o.Nodes))
		for _, n := range o.Nodes {
			on[n] = true
		}
		out = append(out, plan.PerNode{Nodes: on, Pod: &as, NeverFits: extres.NeverFits(o, nodes)})
	}
	return out
}

// annotationProblems says what is wrong with a pod's gpud annotations
// ("" if nothing), for an Event to the pod's owner.
func annotationProblems(pod *corev1.Pod) string {
	_, errEst := runtimeEstimate(pod.Annotations[plan.RuntimeEstimateAnnotation])
	_, errLast := lastCheckpoint(pod.Annotations[plan.LastCheckpointAnnotation])
	var out []string
	for _, err := range []error{errEst, errLast} {
		if err != nil {
			out = append(out, err.Error())
		}
	}
	return strings.Join(out, "; ")
}

// maxRuntimeEstimate bounds RuntimeEstimateAnnotation (a year).
const maxRuntimeEstimate = 365 * 24 * time.Hour

// maxAnnotationQuote bounds how much of a bad annotation value a message
// repeats.
const maxAnnotationQuote = 64

func badAnnotation(name, value, want string) error {
	if len(value) > maxAnnotationQuote {
		value = value[:maxAnnotationQuote] + "..."
	}
	return fmt.Errorf("annotation %s %q is not %s; it is ignored until fixed", name, value, want)
}

// runtimeEstimate parses RuntimeEstimateAnnotation: a Go duration or
// whole seconds; 0 when absent, and 0 with an error when malformed, not
// positive or longer than a year.
func runtimeEstimate(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	bad := badAnnotation(plan.RuntimeEstimateAnnotation, s, `a positive duration up to a year ("90m") or whole seconds ("5400")`)
	if len(s) > 32 {
		return 0, bad
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 || n > int64(maxRuntimeEstimate/time.Second) {
			return 0, bad
		}
		d = time.Duration(n) * time.Second
	}
	if d <= 0 || d > maxRuntimeEstimate {
		return 0, bad
	}
	return d, nil
}

// lastCheckpoint parses LastCheckpointAnnotation (RFC 3339, fractional
// seconds allowed); the zero time when absent, and with an error when
// malformed.
func lastCheckpoint(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	bad := badAnnotation(plan.LastCheckpointAnnotation, s, `an RFC 3339 time ("2026-12-01T09:30:00Z")`)
	if len(s) > 64 {
		return time.Time{}, bad
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, bad
	}
	return t, nil
}

// resolveClaims returns a pod's claims in spec.resourceClaims order, nil
// for each one that is missing, and why the first missing one is (""
// when all exist). A claim from a template is the one named in
// status.resourceClaimStatuses, and must be owned by the pod; an entry
// whose status names no claim needs none and is left out.
func resolveClaims(pod *corev1.Pod, byName map[string]*resourceapi.ResourceClaim) ([]*resourceapi.ResourceClaim, string) {
	var out []*resourceapi.ResourceClaim
	why := ""
	miss := func(format string, args ...any) {
		out = append(out, nil)
		if why == "" {
			why = fmt.Sprintf(format, args...)
		}
	}
	for _, rc := range pod.Spec.ResourceClaims {
		switch {
		case rc.ResourceClaimName != nil:
			c := byName[pod.Namespace+"/"+*rc.ResourceClaimName]
			if c == nil {
				miss("waiting for ResourceClaim %s/%s (pod claim %q) to be created", pod.Namespace, *rc.ResourceClaimName, rc.Name)
				continue
			}
			out = append(out, c)
		case rc.ResourceClaimTemplateName != nil:
			name, found, needed := templateClaim(pod, rc.Name)
			switch {
			case !found:
				miss("waiting for the ResourceClaim of pod claim %q from template %s to be created (the resourceclaim controller of kube-controller-manager does it)", rc.Name, *rc.ResourceClaimTemplateName)
				continue
			case !needed:
				continue
			}
			c := byName[pod.Namespace+"/"+name]
			if c == nil {
				miss("waiting for ResourceClaim %s/%s (pod claim %q from template %s) to reach the scheduler", pod.Namespace, name, rc.Name, *rc.ResourceClaimTemplateName)
				continue
			}
			if !ownedBy(c, pod.UID) {
				miss("ResourceClaim %s/%s (pod claim %q) is not owned by the pod: it was not created for it from template %s", pod.Namespace, name, rc.Name, *rc.ResourceClaimTemplateName)
				continue
			}
			out = append(out, c)
		default:
			miss("pod claim %q names neither a ResourceClaim nor a template", rc.Name)
		}
	}
	return out, why
}

// templateClaim finds the claim generated for pod claim name in the pod's
// status: found says whether the status has the entry, needed whether it
// names a claim.
func templateClaim(pod *corev1.Pod, name string) (claim string, found, needed bool) {
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.Name == name {
			if s.ResourceClaimName == nil {
				return "", true, false
			}
			return *s.ResourceClaimName, true, true
		}
	}
	return "", false, false
}

func ownedBy(c *resourceapi.ResourceClaim, uid types.UID) bool {
	return slices.ContainsFunc(c.OwnerReferences, func(r metav1.OwnerReference) bool { return r.UID == uid })
}

// compact drops nil entries.
func compact(claims []*resourceapi.ResourceClaim) []*resourceapi.ResourceClaim {
	return slices.DeleteFunc(claims, func(c *resourceapi.ResourceClaim) bool { return c == nil })
}

// volumeBinder binds a pod's volumes for a node before the pod is bound
// there (*rules.Cycle).
type volumeBinder interface {
	BindVolumes(ctx context.Context, pod *corev1.Pod, node string, timeout time.Duration) error
}
