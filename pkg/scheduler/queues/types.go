package queues

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// GroupVersion and GVR of the Queue CRD (deploy/scheduler/queue-crd.yaml).
var (
	GroupVersion = schema.GroupVersion{Group: "scheduling.gpud.io", Version: "v1alpha1"}
	GVR          = GroupVersion.WithResource(Resource)
)

// Resource is the Queue CRD's plural; Kind its kind.
const (
	Resource = "queues"
	Kind     = "Queue"
)

// NamespaceLabel on a Namespace binds it to the queue it names. Only
// admins may set it: deploy/scheduler/queue-crd.yaml's
// ValidatingAdmissionPolicy asks for the verb "bind" on that queue. It is
// the same key as the pod label plan.QueueLabel.
const NamespaceLabel = "gpud.io/queue"

// Bounds of a Queue's spec (the CRD's schema says the same).
const (
	// MaxWeight bounds spec.weight.
	MaxWeight = 1_000_000
	// MaxResource bounds each guarantee and limit, so that the sums over
	// MaxQueues queues fit in an int64 (as the queue file's).
	MaxResource = int64(1) << 48
	// MaxQueues bounds the Queue objects one scheduler reads.
	MaxQueues = 10_000
	// MaxModels bounds the GPU models of modelGuaranteed and modelLimit.
	MaxModels = 64
	// MaxReservations bounds spec.reservations.
	MaxReservations = 64
	// MaxNodes bounds one reservation's nodes.
	MaxNodes = 1000
	// MaxNamespaces bounds spec.namespaces.
	MaxNamespaces = 1000
)

// Queue is a node of the queue tree, as an API object.
type Queue struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              Spec   `json:"spec,omitempty"`
	Status            Status `json:"status,omitempty"`
}

// Spec is what an admin writes: the queue file's fields (docs/job-trace.md)
// with the object's name as the queue's, plus the namespaces it serves.
type Spec struct {
	// Parent names the parent Queue (or a queue of --queues); empty for a
	// top-level queue. Limits bind every ancestor.
	Parent string `json:"parent,omitempty"`
	// Weight scales the queue's fair share against its siblings; 0 is 1.
	// An integer (2) or a decimal string ("2.5", at most 3 decimals), 0
	// to MaxWeight, as the --queues file's weight.
	Weight intstr.IntOrString `json:"weight,omitempty"`
	// Guaranteed is what the queue may reclaim from others; Limit caps
	// what it holds, borrowing included (a zero field: no limit).
	Guaranteed Resources `json:"guaranteed,omitempty"`
	Limit      Resources `json:"limit,omitempty"`
	// ModelGuaranteed and ModelLimit are milli-GPU per GPU model (the
	// ResourceSlice attribute productName).
	ModelGuaranteed map[string]int64 `json:"modelGuaranteed,omitempty"`
	ModelLimit      map[string]int64 `json:"modelLimit,omitempty"`
	// Reservations hold nodes for this queue during [start, end).
	Reservations []Reservation `json:"reservations,omitempty"`
	// Namespaces are the namespaces whose pods this queue serves (a leaf
	// queue's); a namespace may also be bound by its label gpud.io/queue.
	Namespaces []string `json:"namespaces,omitempty"`
	// Objectives weigh the scheduler's terms for this queue's pods
	// (README: Objectives); nil: the scheduler's --objectives.
	Objectives *Objectives `json:"objectives,omitempty"`
}

// Resources count resources in the scheduler's exact units.
type Resources struct {
	CPUMilli     int64 `json:"cpuMilli,omitempty"`
	MemoryMiB    int64 `json:"memoryMiB,omitempty"`
	GPUMilli     int64 `json:"gpuMilli,omitempty"`
	GPUMemoryMiB int64 `json:"gpuMemoryMiB,omitempty"`
	MIGSlices    int64 `json:"migSlices,omitempty"`
}

// Reservation holds Nodes for the queue during [Start, End).
type Reservation struct {
	Name  string      `json:"name"`
	Nodes []string    `json:"nodes"`
	Start metav1.Time `json:"start"`
	End   metav1.Time `json:"end"`
}

// Status is what the leading scheduler writes.
type Status struct {
	// ObservedGeneration is the spec generation the status describes.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Usage is what the queue's bound pods hold, its children's included.
	Usage Resources `json:"usage,omitempty"`
	// PendingPods counts the pods waiting in the queue (a leaf's own).
	PendingPods int64 `json:"pendingPods,omitempty"`
	// Conditions: Accepted (the queue is in the tree, or why not) and
	// OverGuarantee (it borrows beyond its guarantee).
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Condition types and reasons of [Status.Conditions].
const (
	ConditionAccepted      = "Accepted"
	ConditionOverGuarantee = "OverGuarantee"

	ReasonAccepted          = "Accepted"
	ReasonNamespacesIgnored = "NamespacesOnParent"
	ReasonInvalid           = "Invalid"
	ReasonWithinGuarantee   = "WithinGuarantee"
	ReasonBorrowing         = "Borrowing"
)
