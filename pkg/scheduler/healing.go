package scheduler

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/resourceclaim"

	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/gputel"
	"github.com/gpud/gpud/pkg/scheduler/heal"
	"github.com/gpud/gpud/pkg/scheduler/plan"
	"github.com/gpud/gpud/pkg/scheduler/view"
)

// Event reasons and actions of self-healing.
const (
	reasonGPUFailed        = "GPUFailed"
	reasonGPUFailedKept    = "GPUFailedKept"
	reasonGPUFailedBackoff = "GPUFailedBackoff"
	actionEvicting         = "Evicting"
	actionDeleting         = "Deleting"
	actionHealing          = "Healing"
)

// unhealthyTaintKey is the key of the DRA device taint gpud's agent puts
// on an unhealthy device (pkg/dra.TaintKey).
const unhealthyTaintKey = "gpu.gpud.io/unhealthy"

// healing is the scheduler's self-healing state (the loop's goroutine
// alone uses it).
type healing struct {
	h *heal.Healer
	m *healMetrics
	// told is what each pod was last told about being left on a failed
	// GPU (one Event per pod and message); warned what it was told about
	// a bad heal.Annotation.
	told, warned map[types.UID]string
	// def is the action without the annotation.
	def heal.Action
	// removed are the pods evicted or deleted, and when: until the
	// informer shows them terminating, a cycle does not remove them again
	// (nor count or tell it twice) within removeAgain.
	removed map[types.UID]time.Time
}

// removeAgain is how long after a successful removal a pod that still
// shows no deletionTimestamp is left before it is removed again.
const removeAgain = 30 * time.Second

type healMetrics struct {
	removals *prometheus.CounterVec
	failures *prometheus.CounterVec
	backoffs prometheus.Counter
	left     *prometheus.GaugeVec
}

func newHealMetrics(reg prometheus.Registerer) *healMetrics {
	m := &healMetrics{
		removals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpud_heal_evictions_total",
			Help: "Pods removed because a GPU they hold failed, by reason (device: the pod holds the failed GPU; gang: a member of its gang does) and action (evict, delete).",
		}, []string{"reason", "action"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpud_heal_eviction_failures_total",
			Help: "Removals of pods on failed GPUs the API server refused (a PodDisruptionBudget, a conflict), by action; retried next cycle.",
		}, []string{"action"}),
		backoffs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpud_heal_backoffs_total",
			Help: "Times an owner (gang, controller or pod) started backing off because its pods were healed again soon after the last healing.",
		}),
		left: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpud_heal_pods_left",
			Help: "Pods the last cycle left running on failed GPUs, by why: keep (annotation " + heal.Annotation + "=keep), backoff, deferred (beyond the per-cycle bound).",
		}, []string{"why"}),
	}
	reg.MustRegister(m.removals, m.failures, m.backoffs, m.left)
	return m
}

// newHealing sets self-healing up from cfg (nil when it is off).
func newHealing(cfg Config, reg prometheus.Registerer) (*healing, error) {
	if cfg.HealOff {
		return nil, nil
	}
	h, err := heal.New(cfg.Heal)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	return &healing{h: h, m: newHealMetrics(reg), told: map[types.UID]string{}, warned: map[types.UID]string{}, removed: map[types.UID]time.Time{},
		def: cmp.Or(cfg.Heal.Default, heal.Evict)}, nil
}

// heal evicts or deletes the bound pods whose GPUs failed (telemetry's
// unhealthy devices, untolerated NoExecute device taints), gangs whole
// (an elastic gang only its failed members while it keeps minMember),
// and tells each pod why with an Event. It sets sn.Healed to where the
// gangs healed recently ran, for the decider.
func (s *Scheduler) heal(ctx context.Context, sn *snapshot, slices []*resourceapi.ResourceSlice, now time.Time) {
	hs := s.healing
	if hs == nil {
		return
	}
	s.warnHealAnnotations(sn.Bound)
	in, failed := healInput(sn.Bound, slices, sn.Telemetry, now)
	if !failed && !hs.h.Pending() {
		// Nothing failed and nothing left to finish: the common cycle.
		if len(hs.told) > 0 {
			hs.told = map[types.UID]string{}
		}
		hs.m.left.Reset()
		sn.Healed = hs.h.Homes(now)
		return
	}
	for key, g := range sn.Groups {
		if g != nil && g.Invalid == "" && g.MinMember > 0 {
			if in.MinMember == nil {
				in.MinMember = map[string]int{}
			}
			in.MinMember[key] = int(g.MinMember)
		}
	}
	p := hs.h.Plan(in)
	// The decider places the healed gangs' new members where they ran.
	sn.Healed = hs.h.Homes(now)
	byUID := make(map[string]*corev1.Pod, len(sn.Bound))
	for _, b := range sn.Bound {
		byUID[string(b.Pod.UID)] = b.Pod
	}
	told := make(map[types.UID]string, len(p.Left))
	tell := func(pod *corev1.Pod, typ, reason, action, msg string) {
		told[pod.UID] = msg
		if hs.told[pod.UID] != msg {
			s.recorder.Eventf(pod, nil, typ, reason, action, "%s", truncate(msg, maxNoteBytes))
		}
	}
	kept, backoff := 0, 0
	for _, l := range p.Left {
		pod := byUID[l.Pod.UID]
		if pod == nil {
			continue
		}
		why := heal.Removal{Pod: l.Pod, Device: l.Device, Reason: l.Reason}.Why()
		if l.Kept {
			kept++
			tell(pod, corev1.EventTypeWarning, reasonGPUFailedKept, actionHealing, why+"; left running: annotation "+heal.Annotation+"=keep")
			continue
		}
		backoff++
		msg := fmt.Sprintf("%s; left running until %s: healed %d times recently, backing off", why, l.Until.UTC().Format(time.RFC3339), l.Attempt)
		tell(pod, corev1.EventTypeWarning, reasonGPUFailedBackoff, actionHealing, msg)
	}
	hs.told = told
	hs.m.left.WithLabelValues("keep").Set(float64(kept))
	hs.m.left.WithLabelValues("backoff").Set(float64(backoff))
	hs.m.left.WithLabelValues("deferred").Set(float64(p.Deferred))
	hs.m.backoffs.Add(float64(p.NewBackoffs))
	for uid := range hs.removed {
		if pod := byUID[string(uid)]; pod == nil || pod.DeletionTimestamp != nil {
			delete(hs.removed, uid)
		}
	}
	for _, r := range p.Removals {
		pod := byUID[r.Pod.UID]
		if pod == nil {
			continue
		}
		if at, ok := hs.removed[pod.UID]; ok && now.Sub(at) < removeAgain {
			continue
		}
		if s.removeFailed(ctx, pod, r, hs.m) {
			hs.removed[pod.UID] = now
		}
	}
}

// warnHealAnnotations tells each bound pod whose heal.Annotation is
// malformed, once per value, before any of its GPUs fails (the default
// action applies to it meanwhile).
func (s *Scheduler) warnHealAnnotations(bound []*plan.Pod) {
	hs := s.healing
	var warned map[types.UID]string
	for _, b := range bound {
		v, ok := b.Pod.Annotations[heal.Annotation]
		if !ok {
			continue
		}
		if _, err := heal.ParseAction(v, hs.def); err != nil {
			if warned == nil {
				warned = map[types.UID]string{}
			}
			msg := err.Error()
			warned[b.Pod.UID] = msg
			if hs.warned[b.Pod.UID] != msg {
				s.log.Info("pod annotation ignored", "pod", b.Key(), "reason", msg)
				s.recorder.Eventf(b.Pod, nil, corev1.EventTypeWarning, reasonInvalidAnnotation, actionHealing, "%s", truncate(msg, maxNoteBytes))
			}
		}
	}
	hs.warned = warned
}

// removeFailed evicts or deletes one pod of a healing; it reports whether
// the API server accepted it.
func (s *Scheduler) removeFailed(ctx context.Context, pod *corev1.Pod, r heal.Removal, m *healMetrics) bool {
	key := pod.Namespace + "/" + pod.Name
	reason := "device"
	if r.Mate != "" {
		reason = "gang"
	}
	var err error
	action := actionEvicting
	if r.Action == heal.Delete {
		action = actionDeleting
		uid := pod.UID
		err = s.cfg.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if apierrors.IsNotFound(err) {
			err = nil
		}
	} else {
		err = s.evict(ctx, pod)
	}
	why := r.Why()
	if err != nil {
		m.failures.WithLabelValues(string(r.Action)).Inc()
		s.log.Warn("pod on a failed GPU not removed", "pod", key, "action", string(r.Action), "why", why, "err", err)
		return false
	}
	m.removals.WithLabelValues(reason, string(r.Action)).Inc()
	s.log.Info("pod on a failed GPU removed", "pod", key, "node", pod.Spec.NodeName, "gpu_uuid", r.Device.UUID,
		"action", string(r.Action), "why", why, "reported_by", r.Device.ReportedBy(), "attempt", r.Attempt)
	verb := "Evicted"
	if r.Action == heal.Delete {
		verb = "Deleted"
	}
	note := verb + ": " + why
	if r.Pod.Checkpointable {
		note += "; checkpointable"
		if !r.Pod.LastCheckpoint.IsZero() {
			note += fmt.Sprintf(", last checkpoint %s ago", s.cfg.Now().Sub(r.Pod.LastCheckpoint).Round(time.Second))
		}
	}
	s.recorder.Eventf(pod, nil, corev1.EventTypeWarning, reasonGPUFailed, action, "%s", truncate(note, maxNoteBytes))
	return true
}

// healDevice is what heal needs of one device of gpud's slices.
type healDevice struct {
	uuid, parent string
	taints       []resourceapi.DeviceTaint
}

// healInput turns the bound pods, gpud's slices (DeviceTaintRules
// applied) and the telemetry into the healer's input; failed reports
// whether any device failed (without one, the pods are left out).
func healInput(bound []*plan.Pod, slices []*resourceapi.ResourceSlice, tel map[string]*gputel.Node, now time.Time) (in heal.Input, failed bool) {
	type devKey struct{ pool, name string }
	for _, sl := range slices {
		if sl.Spec.Driver != view.DriverName {
			continue
		}
		for i := range sl.Spec.Devices {
			for _, t := range sl.Spec.Devices[i].Taints {
				failed = failed || t.Effect == resourceapi.DeviceTaintEffectNoExecute
			}
		}
	}
	in = heal.Input{Now: now, Unhealthy: map[heal.DeviceKey]string{}}
	for node, nt := range tel {
		for uuid, d := range nt.Devices {
			// Only failures no workload survives, as for the agent's
			// NoExecute taints; the rest keep new pods off the GPU.
			if d.Unhealthy && gpu.Fatal(gpu.Unhealthy, d.HealthReason) {
				in.Unhealthy[heal.DeviceKey{Node: node, UUID: uuid}] = d.HealthReason
				failed = true
			}
		}
	}
	if !failed {
		return in, false
	}
	// Something failed: the devices by pool and name, for the pods'
	// allocations (made only now: at thousands of nodes, most of a
	// cycle's time when every cycle made it).
	devs := map[devKey]healDevice{}
	for _, sl := range slices {
		if sl.Spec.Driver != view.DriverName {
			continue
		}
		for _, d := range sl.Spec.Devices {
			var hd healDevice
			if a, ok := d.Attributes["uuid"]; ok && a.StringValue != nil {
				hd.uuid = *a.StringValue
			}
			if a, ok := d.Attributes["parentUUID"]; ok && a.StringValue != nil {
				hd.parent = *a.StringValue
			}
			for _, t := range d.Taints {
				if t.Effect == resourceapi.DeviceTaintEffectNoExecute {
					hd.taints = append(hd.taints, t)
				}
			}
			devs[devKey{sl.Spec.Pool.Name, d.Name}] = hd
		}
	}
	for _, b := range bound {
		pod := b.Pod
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		hp := heal.Pod{Key: b.Key(), UID: string(pod.UID), Node: pod.Spec.NodeName, Group: b.Group,
			Annotation: pod.Annotations[heal.Annotation], Checkpointable: b.Checkpointable, LastCheckpoint: b.LastCheckpoint,
			Terminating: pod.DeletionTimestamp != nil}
		if c := metav1.GetControllerOf(pod); c != nil {
			hp.Owner = pod.Namespace + "/" + c.Kind + "/" + c.Name
		}
		if pod.Status.StartTime != nil {
			hp.Started = pod.Status.StartTime.Time
		}
		seen := map[devKey]bool{}
		for _, c := range b.Claims {
			if c == nil || c.Status.Allocation == nil {
				continue
			}
			for _, r := range c.Status.Allocation.Devices.Results {
				k := devKey{r.Pool, r.Device}
				if r.Driver != view.DriverName || seen[k] {
					continue
				}
				seen[k] = true
				d, ok := devs[k]
				if !ok {
					continue
				}
				hd := heal.Device{Node: r.Pool, Name: r.Device, UUID: d.uuid, ParentUUID: d.parent}
				for _, t := range d.taints {
					if !tolerated(r.Tolerations, t) {
						hd.Taint = taintReason(t)
						break
					}
				}
				hp.Devices = append(hp.Devices, hd)
			}
		}
		in.Pods = append(in.Pods, hp)
	}
	return in, true
}

func tolerated(tols []resourceapi.DeviceToleration, t resourceapi.DeviceTaint) bool {
	for _, tol := range tols {
		if resourceclaim.ToleratesTaint(tol, t) {
			return true
		}
	}
	return false
}

// taintReason says why a NoExecute taint is there: gpud's own taint
// carries the agent's reason ("Xid-79" reads "Xid 79"), others name the
// taint.
func taintReason(t resourceapi.DeviceTaint) string {
	if t.Key == unhealthyTaintKey && t.Value != "" {
		if rest, ok := strings.CutPrefix(t.Value, "Xid-"); ok {
			return "Xid " + rest
		}
		return t.Value
	}
	if t.Value == "" {
		return "taint " + t.Key + " (NoExecute)"
	}
	return "taint " + t.Key + "=" + t.Value + " (NoExecute)"
}
