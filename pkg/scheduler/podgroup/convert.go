package podgroup

import (
	"fmt"
	"math"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpud/gpud/pkg/scheduler/plan"
)

// Bounds on what a group may ask; beyond them the object is refused with
// ErrInvalid rather than clamped.
const (
	MaxMinMember      = 10000
	MaxTimeoutSeconds = 86400 // one day
)

// Key is the plan.Snapshot.Groups key of a group: "namespace/name".
func Key(namespace, name string) string { return namespace + "/" + name }

// KeyOf returns the group key of pod, "" when it belongs to none.
//
// A pod names its group in one of two ways. Kubernetes 1.37's
// spec.schedulingGroup.podGroupName (feature gate GenericWorkload) names a
// scheduling.k8s.io/v1beta1 PodGroup and wins when set; otherwise the
// label plan.PodGroupLabel ("scheduling.x-k8s.io/pod-group") names a
// coscheduling PodGroup. Both name an object in the pod's namespace, so
// both formats share one key space (see Groups for a name used by both).
func KeyOf(pod *corev1.Pod) string {
	if pod == nil {
		return ""
	}
	if sg := pod.Spec.SchedulingGroup; sg != nil && sg.PodGroupName != nil && *sg.PodGroupName != "" {
		return Key(pod.Namespace, *sg.PodGroupName)
	}
	if name := pod.Labels[plan.PodGroupLabel]; name != "" {
		return Key(pod.Namespace, name)
	}
	return ""
}

// FromUnstructured decodes a scheduling.x-k8s.io/v1alpha1 PodGroup as the
// dynamic client returns it. It checks apiVersion and kind when set, and
// that the int32 fields fit in an int32 (the converter would wrap them).
// It does not check the values' ranges: ToGroup does.
func FromUnstructured(u *unstructured.Unstructured) (*PodGroup, error) {
	if u == nil || u.Object == nil {
		return nil, fmt.Errorf("%w: nil object", ErrInvalid)
	}
	id := fmt.Sprintf("PodGroup %s/%s", u.GetNamespace(), u.GetName())
	if av := u.GetAPIVersion(); av != "" && av != GroupVersion.String() {
		return nil, fmt.Errorf("%s: apiVersion %q, want %s: %w", id, av, GroupVersion, ErrInvalid)
	}
	if k := u.GetKind(); k != "" && k != Kind {
		return nil, fmt.Errorf("%s: kind %q, want %s: %w", id, k, Kind, ErrInvalid)
	}
	for _, f := range []string{"minMember", "scheduleTimeoutSeconds"} {
		v, found, err := unstructured.NestedFieldNoCopy(u.Object, "spec", f)
		if err != nil || !found || v == nil {
			continue // a wrong spec type fails the conversion below
		}
		if n, ok := v.(int64); ok && (n < math.MinInt32 || n > math.MaxInt32) {
			return nil, fmt.Errorf("%s: spec.%s %d does not fit in an int32: %w", id, f, n, ErrInvalid)
		}
	}
	pg := new(PodGroup)
	if err := convertFromUnstructured(u.Object, pg); err != nil {
		return nil, fmt.Errorf("%s: decode: %v: %w", id, err, ErrInvalid)
	}
	return pg, nil
}

// convertFromUnstructured turns a converter panic (on input no API server
// would serve) into an error.
func convertFromUnstructured(obj map[string]any, pg *PodGroup) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("converter panic: %v", r)
		}
	}()
	return runtime.DefaultUnstructuredConverter.FromUnstructured(obj, pg)
}

// ToGroup converts a coscheduling PodGroup into the plan's group, refusing
// (ErrInvalid, naming the object and the field) a spec.minMember outside
// 1..MaxMinMember, a spec.scheduleTimeoutSeconds outside
// 0..MaxTimeoutSeconds, a missing name or namespace, and topology
// annotations ParseTopology refuses. A nil or zero
// scheduleTimeoutSeconds becomes ScheduleTimeout 0 (no timeout of the
// group's own). Created is the object's creationTimestamp.
func ToGroup(pg *PodGroup) (*plan.Group, error) {
	if pg == nil {
		return nil, fmt.Errorf("%w: nil PodGroup", ErrInvalid)
	}
	id := fmt.Sprintf("PodGroup %s/%s", pg.Namespace, pg.Name)
	if pg.Name == "" || pg.Namespace == "" {
		return nil, fmt.Errorf("%s: metadata.name and metadata.namespace are required: %w", id, ErrInvalid)
	}
	if m := pg.Spec.MinMember; m < 1 || m > MaxMinMember {
		return nil, fmt.Errorf("%s: spec.minMember %d is outside 1..%d; set it to the number of pods that must start together: %w",
			id, m, MaxMinMember, ErrInvalid)
	}
	var timeout time.Duration
	if p := pg.Spec.ScheduleTimeoutSeconds; p != nil {
		if *p < 0 || *p > MaxTimeoutSeconds {
			return nil, fmt.Errorf("%s: spec.scheduleTimeoutSeconds %d is outside 0..%d; omit it for no timeout: %w",
				id, *p, MaxTimeoutSeconds, ErrInvalid)
		}
		timeout = time.Duration(*p) * time.Second
	}
	topo, err := ParseTopology(pg.Annotations, id)
	if err != nil {
		return nil, err
	}
	return &plan.Group{
		Namespace:       pg.Namespace,
		Name:            pg.Name,
		MinMember:       pg.Spec.MinMember,
		ScheduleTimeout: timeout,
		Created:         pg.CreationTimestamp.Time,
		Topology:        topo,
	}, nil
}

// FromUnstructuredGroup is FromUnstructured then ToGroup.
func FromUnstructuredGroup(u *unstructured.Unstructured) (*plan.Group, error) {
	pg, err := FromUnstructured(u)
	if err != nil {
		return nil, err
	}
	return ToGroup(pg)
}

// FromInTree converts a Kubernetes 1.37 scheduling.k8s.io/v1beta1 PodGroup
// (the runtime group a Workload controller creates from one of the
// Workload's podGroupTemplates, and that pods name in
// spec.schedulingGroup.podGroupName). Its gang policy's minCount becomes
// MinMember (1..MaxMinMember); a basic policy becomes MinMember 1 (each
// pod alone). The in-tree API has no schedule timeout: ScheduleTimeout is
// 0. Its topology constraint (spec.schedulingConstraints.topology: one
// node label key) becomes a required Topology; without one, the
// PodGroup's topology annotations count (ParseTopology). PodGroup-level
// claims are not carried.
func FromInTree(pg *schedulingv1beta1.PodGroup) (*plan.Group, error) {
	if pg == nil {
		return nil, fmt.Errorf("%w: nil scheduling.k8s.io PodGroup", ErrInvalid)
	}
	id := fmt.Sprintf("scheduling.k8s.io PodGroup %s/%s", pg.Namespace, pg.Name)
	if pg.Name == "" || pg.Namespace == "" {
		return nil, fmt.Errorf("%s: metadata.name and metadata.namespace are required: %w", id, ErrInvalid)
	}
	g := &plan.Group{Namespace: pg.Namespace, Name: pg.Name, Created: pg.CreationTimestamp.Time}
	sp := pg.Spec.SchedulingPolicy
	switch {
	case sp.Gang != nil && sp.Basic != nil:
		return nil, fmt.Errorf("%s: spec.schedulingPolicy sets both basic and gang; set one: %w", id, ErrInvalid)
	case sp.Gang != nil:
		if m := sp.Gang.MinCount; m < 1 || m > MaxMinMember {
			return nil, fmt.Errorf("%s: spec.schedulingPolicy.gang.minCount %d is outside 1..%d: %w", id, m, MaxMinMember, ErrInvalid)
		}
		g.MinMember = sp.Gang.MinCount
	case sp.Basic != nil:
		g.MinMember = 1
	default:
		return nil, fmt.Errorf("%s: spec.schedulingPolicy sets neither basic nor gang: %w", id, ErrInvalid)
	}
	topo, err := inTreeTopology(pg, id)
	if err != nil {
		return nil, err
	}
	g.Topology = topo
	return g, nil
}
