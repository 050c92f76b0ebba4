// Package plan is the contract between gpud scheduler's runtime (informers,
// leader election, API writes: pkg/scheduler) and its policy (who goes
// where, who waits, who is preempted: pkg/scheduler/decide).
//
// A cycle takes a [Snapshot] of the cluster, a [Decider] turns it into a
// [Plan], and the runtime carries the plan out against the API server:
// claim status writes and Bindings for [Bind], Eviction API calls for
// [Eviction], PodScheduled=False conditions and Events for [Pending]. A
// decider is pure: no API client, no clock (Snapshot.Now), no goroutines.
package plan

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpud/gpud/pkg/allocator/jobs"
	"github.com/gpud/gpud/pkg/gputel"
	"github.com/gpud/gpud/pkg/scheduler/view"
)

// Pod annotations and labels the scheduler reads.
const (
	// QueueLabel names the pod's leaf queue (from --queues).
	QueueLabel = "gpud.io/queue"
	// CheckpointableAnnotation "true" marks a pod that loses little when
	// preempted; victims are chosen among such pods first.
	CheckpointableAnnotation = "gpud.io/checkpointable"
	// RuntimeEstimateAnnotation is the pod's runtime estimate that
	// backfill trusts, a Go duration ("90m") or whole seconds ("5400").
	RuntimeEstimateAnnotation = "gpud.io/runtime-estimate"
	// LastCheckpointAnnotation is when the pod last wrote a checkpoint it
	// can resume from, RFC 3339 ("2026-12-01T09:30:00Z"): preemption
	// prefers victims that lose the least GPU-time since then.
	LastCheckpointAnnotation = "gpud.io/last-checkpoint"
	// PodGroupLabel names the pod's PodGroup in its namespace, as
	// scheduler-plugins' coscheduling reads it.
	PodGroupLabel = "scheduling.x-k8s.io/pod-group"
)

// Snapshot is the cluster as one decision cycle sees it.
type Snapshot struct {
	Now time.Time
	// View holds nodes, gpud devices and what every claim took (claims
	// this scheduler wrote but its informer has not seen included).
	View *view.View
	// Pending are this scheduler's pods without a node, not terminating,
	// whose claims all exist, oldest first.
	Pending []*Pod
	// Bound are pods with a node that are not finished (any scheduler):
	// their CPU and memory count against the node, and, with their claims,
	// they are the candidates for preemption.
	Bound []*Pod
	// Groups are the PodGroups by "namespace/name".
	Groups map[string]*Group
	// PDBs are every PodDisruptionBudget; a decider prefers victims whose
	// budgets allow the disruption (the Eviction API enforces them).
	PDBs []*policyv1.PodDisruptionBudget
	// Queues and Reservations come from --queues; empty: one queue, no
	// limits.
	Queues       []jobs.Queue
	Reservations []jobs.Reservation
	// Policy is the allocator policy name (--policy).
	Policy string
	// Rules are kube-scheduler's placement rules over this snapshot's
	// nodes and Bound pods (pkg/scheduler/rules); nil: the decider's own
	// checks only (cordon, node affinity, NoSchedule taints, CPU and
	// memory). A decider tells them each pod it places or releases
	// (Add, Remove), so one Rules serves one Decide call.
	Rules Rules
	// Devices are every driver's devices and allocations, for the claims
	// gpud's policy does not model (view.Other): kube-scheduler's
	// structured allocator allocates them on the node gpud chooses. A
	// decider tells it each allocation it assumes or releases, as it tells
	// the view. Nil: such claims are refused as unsupported.
	Devices Devices
	// Telemetry is what each node's agent streams to the scheduler (see
	// issue 13: health events and measured usage), by node name. A node
	// without a live stream is absent: decisions then use ResourceSlices
	// and claims alone. Nil: no telemetry listener.
	Telemetry map[string]*gputel.Node
	// Decided, when set, is told each unit of binds (a gang's members
	// placed together, or one pod) as the decider commits it, before
	// Decide returns, so that its writes start while the rest of the
	// cycle is decided (the first bind of a large cycle then comes after
	// one decision, not all). The Plan holds the same binds. Nil: the
	// binds are in the Plan only.
	Decided func(unit []Bind)
	// Healed are the nodes each gang that self-healing evicted recently
	// ran on, by PodGroup key: a decider places the gang's pending
	// members in those nodes' NVLink domain, then rack, first when they
	// have room (a preference, never a requirement). Nil: none.
	Healed map[string][]string
}

// Pod is one pod with what the scheduler derived from it.
type Pod struct {
	Pod *corev1.Pod
	// Claims are the pod's ResourceClaims in pod.spec.resourceClaims
	// order (allocated ones included), then the claim of its extended
	// resources backed by DRA, if it asks for any (pkg/scheduler/extres:
	// a placeholder until the runtime creates it at bind).
	Claims []*resourceapi.ResourceClaim
	// ExtendedResources map the pod's containers' DRA-backed extended
	// resources to the requests of that last claim; the runtime writes
	// them to status.extendedResourceClaimStatus before the Binding. Nil:
	// the pod asks for none.
	ExtendedResources []corev1.ContainerExtendedResourceRequest
	// PerNode, for a pending pod whose DRA-backed extended resources some
	// nodes serve through a device plugin instead (kube-scheduler decides
	// node by node: a node whose allocatable lists the resource counts it
	// there, and no claim is made), is the pod as it is placed on each set
	// of nodes, in the order a decider tries them (claims first). Each
	// entry's Pod is this pod with the Claims, ExtendedResources and
	// PluginDevices that hold on Nodes; a Bind on one of them carries the
	// entry's claim in Allocations and its mappings in the Bind's
	// ExtendedResources. Nil: Claims and ExtendedResources hold on
	// every node.
	PerNode []PerNode
	// PluginDevices counts the devices the pod holds (bound) or asks (an
	// entry of PerNode) through device plugins among the extended
	// resources a DeviceClass also serves (nvidia.com/gpu): whole GPUs to
	// queues and preemption, though gpud's view has no device for them.
	PluginDevices int64
	// Group is the PodGroup key "namespace/name", "" for none.
	Group string
	// Queue is the QueueLabel value, "" for none.
	Queue    string
	Priority int32
	// Checkpointable is CheckpointableAnnotation == "true".
	Checkpointable bool
	// RuntimeEstimate is RuntimeEstimateAnnotation; 0 unknown.
	RuntimeEstimate time.Duration
	// LastCheckpoint is LastCheckpointAnnotation; zero when absent or
	// malformed. Preemption counts it for Checkpointable pods (work since
	// then is lost); otherwise the pod's start counts.
	LastCheckpoint time.Time
	// Created is the pod's creation time (FIFO order).
	Created time.Time
	// Retry is set on a pending pod that an earlier cycle tried and left
	// pending (the runtime's backoff let it back in); a pod without it
	// is new and is always considered, whatever the cap on the pods a
	// cycle considers, so old pods that cannot fit never starve it.
	Retry bool
}

// PerNode is a pod as it is placed on some nodes (Pod.PerNode).
type PerNode struct {
	Nodes map[string]bool
	Pod   *Pod
	// NeverFits, when set, says why no node of Nodes could ever serve
	// what Pod asks through device plugins (more than any has
	// allocatable): a decider does not try the entry and reports this.
	NeverFits string
}

// Key returns "namespace/name".
func (p *Pod) Key() string { return p.Pod.Namespace + "/" + p.Pod.Name }

// Group is a PodGroup: pods bound all or nothing.
type Group struct {
	Namespace, Name string
	// MinMember pods must be bound together.
	MinMember int32
	// ScheduleTimeout, if not zero, is how long a group may wait from
	// Created before it is reported as timed out.
	ScheduleTimeout time.Duration
	Created         time.Time
	// Invalid, if set, says why the PodGroup object cannot be used as
	// written ("spec.minMember 0 is outside 1..10000; ..."): its pods
	// wait with that reason instead of "not found".
	Invalid string
	// Topology is the topology level the gang asks to be placed within;
	// the zero value asks for none (the decider's own preferred order).
	Topology GangTopology
}

// GangTopology is the topology level a gang asks for: the
// gpud.io/gang-topology and gpud.io/gang-topology-mode annotations on its
// PodGroup or workload, or a scheduling.k8s.io PodGroup's
// spec.schedulingConstraints.topology.
type GangTopology struct {
	// Level is "nvlink" (NVLink domain), "node", "rack", "zone", or a node
	// label key whose values name the domains; "" none.
	Level string
	// Required: the gang's members (at least minMember) are placed within
	// one domain of Level, or the gang waits; false: preferred, the
	// decider tries Level's domains first and places it elsewhere when
	// none has room.
	Required bool
	// Source names where the level was set, for reasons ("annotation
	// gpud.io/gang-topology on PodGroup default/train").
	Source string
}

// Plan is what a cycle decided.
type Plan struct {
	// Binds are carried out in order. Binds sharing a non-empty Gang are
	// all-or-nothing: every claim of the gang is written before any pod
	// is bound, and written claims are rolled back if one write fails.
	Binds []Bind
	// Evictions free room for Pending pods nominated to a node.
	Evictions []Eviction
	// Pending pods stay unbound this cycle, each with the reason.
	Pending []Pending
	// QueueUsage, if the decider tracks queues, is what each queue of
	// Snapshot.Queues (leaves and ancestors) holds once the plan is
	// carried out, by queue name; the runtime exports it as metrics next
	// to the queues' guarantees and limits. Nil: not tracked.
	QueueUsage map[string]jobs.Resources
}

// Bind places one pod.
type Bind struct {
	Pod  *Pod
	Node string
	// Allocations are the claims to write (status.allocation and
	// reservedFor); already allocated claims get only reservedFor.
	Allocations []view.Allocation
	// Gang is the group key for all-or-nothing binds; "" alone.
	Gang string
	// ExtendedResources, for a pod placed as an entry of its PerNode, are
	// that entry's: the mappings of the extended-resource claim among
	// Allocations (nil: none is made on Node). Nil otherwise: the Pod's.
	ExtendedResources []corev1.ContainerExtendedResourceRequest
	// Note, when set, is what the placement does to other pods that the
	// pod's Scheduled Event adds (the borrowers the driver will evict to
	// give it its memory); "" for none.
	Note string
}

// Eviction removes a running pod through the Eviction API.
type Eviction struct {
	Victim *Pod
	// For is the pending pod the room is for.
	For *Pod
	// Why is "priority", "reclaim" or "reservation".
	Why string
}

// Reason codes of a pending pod (jobs.Code* plus the scheduler's own).
const (
	CodeInvalid = "invalid" // a claim or request that cannot be placed as written
	CodeGang    = "gang"    // the PodGroup has fewer than minMember pods, or does not fit as a whole
	// CodeUnschedulable: kube-scheduler's rules refuse the pod on every
	// node for a reason no eviction changes (a missing
	// PersistentVolumeClaim, a node name or affinity no node matches).
	CodeUnschedulable = "unschedulable"
)

// Devices is kube-scheduler's structured allocator over every driver's
// devices (pkg/scheduler/anydevice), for the claims gpud's policy does
// not model. One Devices serves one Decide call.
type Devices interface {
	// Allocate allocates the unallocated claims on node, all or none,
	// with the devices taken so far counted, one result per claim in
	// claims' order; it does not assume them.
	Allocate(node string, claims []*resourceapi.ResourceClaim) ([]resourceapi.AllocationResult, error)
	// AllocatedFits says why an already allocated claim cannot be used
	// on node ("" when it can).
	AllocatedFits(node string, claims []*resourceapi.ResourceClaim) string
	// Assume counts an allocation's devices as taken; Release stops
	// counting them.
	Assume(*resourceapi.AllocationResult)
	Release(*resourceapi.AllocationResult)
}

// Rules are kube-scheduler's placement rules over one cycle's nodes and
// bound pods, as the decider sees them (*rules.Cycle implements them).
type Rules interface {
	// Filter says why the rules refuse pod on node; "" when they allow it.
	Filter(pod *corev1.Pod, node string) string
	// FilterAll is Filter on each of nodes, the reasons in their order
	// (the nodes may be checked in parallel).
	FilterAll(pod *corev1.Pod, nodes []string) []string
	// Unresolvable reports whether the rules refuse pod on every node for
	// a reason no eviction changes, and the reason.
	Unresolvable(pod *corev1.Pod) (string, bool)
	// Score ranks nodes the rules allow by the pod's preferences (higher
	// is preferred).
	Score(pod *corev1.Pod, nodes []string) map[string]int64
	// Add counts pod on node from now on (placed this cycle, or put back
	// after a what-if); Remove stops counting it (a what-if eviction, a
	// placement undone).
	Add(pod *corev1.Pod, node string) error
	Remove(pod *corev1.Pod, node string) error
}

// Pending is one pod left waiting.
type Pending struct {
	Pod *Pod
	// Code is one of jobs.Code* or the Code constants here.
	Code string
	// Message is the allocator's reason, written into the PodScheduled
	// condition and the event ("no GPU with 40Gi free on a H100 ...").
	Message string
	// NominatedNode is set when evictions are under way for the pod.
	NominatedNode string
}

// Decider turns a snapshot into a plan. It must not modify the snapshot:
// what-ifs and placements it makes on the View (Assume, Release) are
// undone before Decide returns, since the next cycle's view starts from
// this one's usage (view.UsageCache).
type Decider interface {
	Decide(s *Snapshot) Plan
}

// Units groups binds into the units written all or nothing: each gang
// (binds with the same non-empty Gang) is one unit, at its first bind's
// place; every other bind is a unit of its own. Binds without a pod are
// left out.
func Units(binds []Bind) [][]Bind {
	var out [][]Bind
	at := map[string]int{}
	for _, b := range binds {
		if b.Pod == nil || b.Pod.Pod == nil {
			continue
		}
		if b.Gang == "" {
			out = append(out, []Bind{b})
			continue
		}
		i, ok := at[b.Gang]
		if !ok {
			i = len(out)
			at[b.Gang] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], b)
	}
	return out
}
