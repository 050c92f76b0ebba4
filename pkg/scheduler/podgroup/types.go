package podgroup

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The PodGroup API of kubernetes-sigs/scheduler-plugins (coscheduling).
const (
	Group    = "scheduling.x-k8s.io"
	Version  = "v1alpha1"
	Kind     = "PodGroup"
	Resource = "podgroups"
)

// GroupVersion is scheduling.x-k8s.io/v1alpha1.
var GroupVersion = schema.GroupVersion{Group: Group, Version: Version}

// GVR is the PodGroup resource for the dynamic client and informers.
var GVR = GroupVersion.WithResource(Resource)

// GVK is the PodGroup kind.
var GVK = GroupVersion.WithKind(Kind)

// Phase is a PodGroup's status.phase as coscheduling's controller writes it.
type Phase string

// The phases of scheduler-plugins' PodGroup controller. gpud reads
// status but writes none of it.
const (
	PhasePending    Phase = "Pending"
	PhaseRunning    Phase = "Running"
	PhaseScheduling Phase = "Scheduling"
	PhaseUnknown    Phase = "Unknown"
	PhaseFinished   Phase = "Finished"
	PhaseFailed     Phase = "Failed"
)

// PodGroup is scheduler-plugins' scheduling.x-k8s.io/v1alpha1 PodGroup,
// field for field as its CRD (deploy/scheduler/podgroup-crd.yaml) serves
// it: pods labelled plan.PodGroupLabel=<name> in its namespace are its
// members.
type PodGroup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   Spec   `json:"spec,omitempty"`
	Status Status `json:"status,omitempty"`
}

// Spec is what the user asks of a PodGroup.
type Spec struct {
	// MinMember pods must be placed together or none is.
	MinMember int32 `json:"minMember,omitempty"`
	// MinResources is the least the group needs in all; gpud reads but
	// does not use it (the pods' own requests and claims are exact).
	MinResources corev1.ResourceList `json:"minResources,omitempty"`
	// ScheduleTimeoutSeconds is how long the group may wait for its
	// members to fit; nil: no timeout of its own.
	ScheduleTimeoutSeconds *int32 `json:"scheduleTimeoutSeconds,omitempty"`
}

// Status is what scheduler-plugins' PodGroup controller reports.
type Status struct {
	Phase             Phase       `json:"phase,omitempty"`
	OccupiedBy        string      `json:"occupiedBy,omitempty"`
	Running           int32       `json:"running,omitempty"`
	Succeeded         int32       `json:"succeeded,omitempty"`
	Failed            int32       `json:"failed,omitempty"`
	ScheduleStartTime metav1.Time `json:"scheduleStartTime,omitempty"`
}

// List is a PodGroupList.
type List struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []PodGroup `json:"items"`
}

var (
	_ runtime.Object = (*PodGroup)(nil)
	_ runtime.Object = (*List)(nil)
)

// DeepCopyInto copies pg into out; out must not be nil.
func (pg *PodGroup) DeepCopyInto(out *PodGroup) {
	*out = *pg
	out.TypeMeta = pg.TypeMeta
	pg.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	pg.Spec.DeepCopyInto(&out.Spec)
	pg.Status.DeepCopyInto(&out.Status)
}

// DeepCopy returns a copy of pg that shares no memory with it; nil for nil.
func (pg *PodGroup) DeepCopy() *PodGroup {
	if pg == nil {
		return nil
	}
	out := new(PodGroup)
	pg.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (pg *PodGroup) DeepCopyObject() runtime.Object {
	if c := pg.DeepCopy(); c != nil {
		return c
	}
	return nil
}

// DeepCopyInto copies s into out; out must not be nil.
func (s *Spec) DeepCopyInto(out *Spec) {
	*out = *s
	if s.MinResources != nil {
		out.MinResources = make(corev1.ResourceList, len(s.MinResources))
		for k, v := range s.MinResources {
			out.MinResources[k] = v.DeepCopy()
		}
	}
	if s.ScheduleTimeoutSeconds != nil {
		v := *s.ScheduleTimeoutSeconds
		out.ScheduleTimeoutSeconds = &v
	}
}

// DeepCopyInto copies s into out; out must not be nil.
func (s *Status) DeepCopyInto(out *Status) {
	*out = *s
	s.ScheduleStartTime.DeepCopyInto(&out.ScheduleStartTime)
}

// DeepCopyInto copies l into out; out must not be nil.
func (l *List) DeepCopyInto(out *List) {
	*out = *l
	out.TypeMeta = l.TypeMeta
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]PodGroup, len(l.Items))
		for i := range l.Items {
			l.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
}

// DeepCopy returns a copy of l that shares no memory with it; nil for nil.
func (l *List) DeepCopy() *List {
	if l == nil {
		return nil
	}
	out := new(List)
	l.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (l *List) DeepCopyObject() runtime.Object {
	if c := l.DeepCopy(); c != nil {
		return c
	}
	return nil
}
