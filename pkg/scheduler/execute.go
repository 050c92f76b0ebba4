package scheduler

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	schedutil "k8s.io/kubernetes/pkg/scheduler/util"

	"github.com/gpud/gpud/pkg/scheduler/evict"
	"github.com/gpud/gpud/pkg/scheduler/extres"
	"github.com/gpud/gpud/pkg/scheduler/plan"
	"github.com/gpud/gpud/pkg/scheduler/rules"
	"github.com/gpud/gpud/pkg/scheduler/view"
)

// Event reasons and actions (events.k8s.io), as kube-scheduler names them.
const (
	// codeVolumes is the pending code of a pod whose volumes could not be
	// bound for the node chosen.
	codeVolumes = "volume-binding"
	// codeBindError is the pending code of a pod whose bind failed (a
	// claim write or its Binding): it is decided again after its backoff.
	codeBindError          = "bind-error"
	reasonScheduled        = "Scheduled"
	reasonFailedScheduling = "FailedScheduling"
	reasonPreempted        = "Preempted"
	actionBinding          = "Binding"
	actionScheduling       = "Scheduling"
	actionPreempting       = "Preempting"
	// maxNoteBytes is the events.k8s.io note limit; maxMessageBytes bounds
	// a PodScheduled condition message.
	maxNoteBytes    = 1024
	maxMessageBytes = 4096
)

// writtenClaim is one claim of a bind as this process changed it: the
// claim as the decision read it and as the API server last returned it.
type writtenClaim struct {
	before, after *resourceapi.ResourceClaim
	// finalizer: this bind added resourceapi.Finalizer; status: it wrote
	// the claim's status (allocation and/or reservedFor); created: it
	// created the claim (extended resources backed by DRA), and a rollback
	// deletes it.
	finalizer, status, created bool
}

// execute carries out a plan: binds (gangs all-or-nothing) are handed to
// the bind workers (see bindQueue) and written while the next cycles
// decide; evictions, then the pending pods' conditions and events, are
// written by the cycle.
func (s *Scheduler) execute(ctx context.Context, sn *snapshot, p plan.Plan) {
	refused := sn.early.refused
	for _, unit := range plan.Units(p.Binds) {
		if sn.early.sent[unit[0].Pod.Pod.UID] {
			continue // handed over while the cycle decided
		}
		refused = append(refused, s.dispatch(ctx, sn.volumes, unit)...)
	}

	preemptors := map[types.UID]bool{}
	for _, e := range p.Evictions {
		if ctx.Err() != nil {
			return
		}
		if e.Victim == nil || e.Victim.Pod == nil {
			continue
		}
		if e.For != nil {
			preemptors[e.For.Pod.UID] = true
		}
		s.evictVictim(ctx, e)
	}
	s.m.preempts.Add(float64(len(preemptors)))

	pending := append(slices.Clone(sn.missing), p.Pending...)
	pending = append(pending, refused...)
	s.m.pending.Reset()
	for _, pd := range pending {
		s.m.pending.WithLabelValues(pd.Code).Inc()
		s.m.attempts.WithLabelValues(resultUnschedulable).Inc()
	}
	if sn.deferred > 0 {
		s.m.pending.WithLabelValues("deferred").Add(float64(sn.deferred))
	}
	if sn.backingOff > 0 {
		s.m.pending.WithLabelValues("backoff").Add(float64(sn.backingOff))
	}
	if sn.gated > 0 {
		s.m.pending.WithLabelValues("gated").Add(float64(sn.gated))
	}
	s.m.setPendingOldest(sn.Now, pending, sn.waiting...)
	s.writePending(ctx, pending)
}

// volumeReserver reserves a pod's volumes for a node within the cycle,
// to be bound later by a worker (*rules.Cycle).
type volumeReserver interface {
	ReserveVolumes(ctx context.Context, pod *corev1.Pod, node string) (*rules.VolumeReservation, error)
}

// dispatch hands one unit to the bind workers. First, within the cycle,
// it reserves the unit's volumes (VolumeBinding's Reserve: later decisions
// see them taken) and assumes the unit: each pod bound to its node and
// each claim allocated and reserved for it, so that the next cycle, which
// may start before a single write of the unit is done, never gives the
// same devices, ports, volumes or CPU to another pod. If a pod's volumes
// cannot be reserved, the unit is not bound and its pods are returned
// pending with the reason (backed off as any pod the plan left pending).
func (s *Scheduler) dispatch(ctx context.Context, vols volumeBinder, unit []plan.Bind) []plan.Pending {
	job := bindJob{ctx: ctx, unit: unit}
	if r, ok := vols.(volumeReserver); ok {
		job.vols = make([]*rules.VolumeReservation, len(unit))
		for i, b := range unit {
			res, err := r.ReserveVolumes(ctx, b.Pod.Pod, b.Node)
			if err == nil {
				job.vols[i] = res
				continue
			}
			for _, res := range job.vols[:i] {
				res.Unreserve(ctx)
			}
			s.log.Info("volumes not reserved, pods not bound", "pod", b.Pod.Key(), "node", b.Node, "gang", b.Gang, "err", err)
			now := s.cfg.Now()
			for _, m := range unit {
				s.backoff.failed(m.Pod.Pod.UID, now)
			}
			return volumesPending(unit, b, err)
		}
	} else if vols != nil {
		job.binder = vols
	}
	now := s.cfg.Now()
	for _, b := range unit {
		pod := b.Pod.Pod
		s.assumed.bound(pod.UID, b.Node)
		var claims []*resourceapi.ResourceClaim
		for _, a := range b.Allocations {
			if a.Claim == nil {
				continue
			}
			// As the worker will write it; an error here is the
			// worker's to report.
			if c, err := claimStatus(a, pod, now); err == nil && c != nil {
				claims = append(claims, c)
			}
		}
		s.assumed.inFlight(pod.UID, claims)
	}
	s.binds.add(job)
	return nil
}

// earlyBinds is what a cycle dispatched as its decider committed it: the
// pods handed to the bind workers, and those refused at dispatch (their
// volumes could not be reserved).
type earlyBinds struct {
	sent    map[types.UID]bool
	refused []plan.Pending
}

// streamBinds makes the decider hand each unit to the bind workers as it
// commits it (plan.Snapshot.Decided), so that on a cycle with thousands
// of pending pods the first Binding is written after one decision rather
// than after all of them; execute then dispatches only the rest.
func (s *Scheduler) streamBinds(ctx context.Context, sn *snapshot) {
	sn.early.sent = map[types.UID]bool{}
	sn.Decided = func(binds []plan.Bind) {
		for _, unit := range plan.Units(binds) {
			sn.early.refused = append(sn.early.refused, s.dispatch(ctx, sn.volumes, unit)...)
			for _, b := range unit {
				sn.early.sent[b.Pod.Pod.UID] = true
			}
		}
	}
}

// volumesPending is every pod of unit pending because failed's volumes
// could not be bound (err).
func volumesPending(unit []plan.Bind, failed plan.Bind, err error) []plan.Pending {
	out := make([]plan.Pending, 0, len(unit))
	for _, m := range unit {
		msg := err.Error()
		if m.Pod != failed.Pod {
			msg = fmt.Sprintf("gang member %s: %v", failed.Pod.Key(), err)
		}
		out = append(out, plan.Pending{Pod: m.Pod, Code: codeVolumes, Message: msg})
	}
	return out
}

// runBind is a bind worker's job: the unit's writes (bindUnit), then what
// follows from them. A pod bound is forgotten by the backoff; a pod not
// bound is no longer assumed (the next cycle sees it pending, and its
// claims as the rollback left them), backs off, and is told why, and a
// cycle is asked for. A job whose context ended before it started
// writes nothing.
func (s *Scheduler) runBind(j bindJob) {
	var failed []plan.Pending
	if j.ctx.Err() != nil {
		for i, b := range j.unit {
			if j.vols != nil {
				j.vols[i].Unreserve(j.ctx)
			}
			failed = append(failed, plan.Pending{Pod: b.Pod, Code: codeBindError, Message: "not bound: " + j.ctx.Err().Error()})
		}
	} else {
		failed = s.bindUnit(j.ctx, j, j.unit)
	}
	now := s.cfg.Now()
	notBound := make(map[types.UID]bool, len(failed))
	for _, pd := range failed {
		notBound[pd.Pod.Pod.UID] = true
	}
	for _, b := range j.unit {
		uid := b.Pod.Pod.UID
		if notBound[uid] {
			s.assumed.unbound(uid)
			s.backoff.failed(uid, now)
		} else {
			s.backoff.forget(uid)
		}
		s.assumed.landed(uid)
	}
	if len(failed) == 0 {
		return
	}
	if j.ctx.Err() == nil {
		s.writeFailed(j.ctx, failed)
	}
	s.poke()
}

// bindUnit binds the unit's volumes (reserved by the cycle, see
// dispatch), as kube-scheduler's VolumeBinding PreBind does, then writes
// every claim of the unit's binds, then binds each pod. It returns the
// pods not bound, with why. If a pod's volumes are not bound in time,
// nothing is written and no pod of the unit is bound (a later cycle finds
// its volumes bound, or provisioning under way on that node). If a claim
// write fails, the claims written so far are rolled back and nothing is
// bound; if a Binding fails, that pod's claims are rolled back.
func (s *Scheduler) bindUnit(ctx context.Context, j bindJob, unit []plan.Bind) []plan.Pending {
	if pending := s.bindVolumes(ctx, j, unit); pending != nil {
		return pending
	}
	written := make([][]writtenClaim, 0, len(unit))
	for _, b := range unit {
		w, err := s.writeClaims(ctx, b)
		written = append(written, w)
		if err == nil {
			continue
		}
		for i := len(written) - 1; i >= 0; i-- {
			s.rollback(ctx, unit[i].Pod.Pod, written[i])
		}
		failed := unit[len(written)-1].Pod
		var out []plan.Pending
		for _, b := range unit {
			s.m.attempts.WithLabelValues(resultError).Inc()
			s.log.Warn("claims not written, pod not bound", "pod", b.Pod.Key(), "node", b.Node, "gang", b.Gang,
				"failed_pod", failed.Key(), "err", err)
			msg := err.Error()
			if b.Pod != failed {
				msg = fmt.Sprintf("gang member %s: %v", failed.Key(), err)
			}
			out = append(out, plan.Pending{Pod: b.Pod, Code: codeBindError, Message: msg})
		}
		return out
	}
	var out []plan.Pending
	for i, b := range unit {
		pod := b.Pod.Pod
		err := ctx.Err() // the term ended: no Binding after it
		if err == nil {
			err = s.cfg.Client.CoreV1().Pods(pod.Namespace).Bind(ctx, &corev1.Binding{
				ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
				Target:     corev1.ObjectReference{Kind: "Node", Name: b.Node},
			}, metav1.CreateOptions{})
		}
		if err != nil && s.boundAnyway(ctx, pod, b.Node) {
			err = nil // the request failed on our side (a timeout, a cancel) after the API server bound it
		}
		if err != nil {
			s.rollback(ctx, pod, written[i])
			s.m.attempts.WithLabelValues(resultError).Inc()
			s.log.Warn("binding failed, claims rolled back", "pod", b.Pod.Key(), "node", b.Node, "gang", b.Gang, "err", err)
			out = append(out, plan.Pending{Pod: b.Pod, Code: codeBindError,
				Message: fmt.Sprintf("binding to node %s failed (decided again): %v", b.Node, err)})
			continue
		}
		s.assumed.bound(pod.UID, b.Node)
		s.forgetStatus(pod.UID)
		s.m.binds.Inc()
		s.m.attempts.WithLabelValues(resultScheduled).Inc()
		if !pod.CreationTimestamp.IsZero() {
			s.m.podLatency.Observe(s.cfg.Now().Sub(pod.CreationTimestamp.Time).Seconds())
		}
		s.log.Info("pod bound", "pod", b.Pod.Key(), "node", b.Node, "gang", b.Gang, "claims", claimNames(b.Allocations),
			"devices", deviceNames(written[i]))
		msg := fmt.Sprintf("Successfully assigned %s/%s to %s", pod.Namespace, pod.Name, b.Node)
		if b.Note != "" {
			msg += "; " + b.Note
		}
		s.recorder.Eventf(pod, nil, corev1.EventTypeNormal, reasonScheduled, actionBinding, "%s", truncate(msg, maxNoteBytes))
	}
	return out
}

// bindVolumes binds every pod's volumes of the unit for its node (those
// the cycle reserved, or all through j.binder); if one fails, the others'
// reservations are undone and every pod of the unit is returned pending
// with the reason (a gang binds all or nothing). Nil when all are bound.
func (s *Scheduler) bindVolumes(ctx context.Context, j bindJob, unit []plan.Bind) []plan.Pending {
	for i, b := range unit {
		var err error
		switch {
		case j.vols != nil:
			err = j.vols[i].Bind(ctx, rules.VolumeBindTimeout)
		case j.binder != nil:
			err = j.binder.BindVolumes(ctx, b.Pod.Pod, b.Node, rules.VolumeBindTimeout)
		}
		if err == nil {
			continue
		}
		if j.vols != nil {
			for _, r := range j.vols[i+1:] {
				r.Unreserve(ctx)
			}
		}
		for range unit {
			s.m.attempts.WithLabelValues(resultUnschedulable).Inc()
		}
		s.log.Info("volumes not bound, pods not bound", "pod", b.Pod.Key(), "node", b.Node, "gang", b.Gang, "err", err)
		return volumesPending(unit, b, err)
	}
	return nil
}

// boundAnyway reports whether pod is bound to node after all: a Binding
// whose response was lost (the context ended, a timeout) may have been
// carried out, and its claims must then not be rolled back.
func (s *Scheduler) boundAnyway(ctx context.Context, pod *corev1.Pod, node string) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	cur, err := s.cfg.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	return err == nil && cur.UID == pod.UID && cur.Spec.NodeName == node
}

// writeClaims writes a bind's claims: status.allocation plus reservedFor
// for new allocations (after adding the delete-protection finalizer, as
// kube-scheduler does, so that a claim in use is not deleted before its
// devices are released), reservedFor alone for allocated claims (skipped
// when the pod is in it already). It returns what it wrote, also on error.
func (s *Scheduler) writeClaims(ctx context.Context, b plan.Bind) ([]writtenClaim, error) {
	pod := b.Pod.Pod
	var out []writtenClaim
	fail := func(what string, c *resourceapi.ResourceClaim, err error) error {
		if apierrors.IsConflict(err) {
			s.m.conflicts.Inc()
		}
		return fmt.Errorf("%s claim %s/%s for pod %s (decided again next cycle): %w", what, c.Namespace, c.Name, b.Pod.Key(), err)
	}
	extended := ""
	for _, a := range b.Allocations {
		if a.Claim == nil {
			continue
		}
		if err := ctx.Err(); err != nil { // the term ended: no write after it
			return out, fmt.Errorf("claim %s/%s for pod %s not written: %w", a.Claim.Namespace, a.Claim.Name, b.Pod.Key(), err)
		}
		w := writtenClaim{before: a.Claim, after: a.Claim}
		if extres.IsPlaceholder(a.Claim) {
			// Created with the finalizer, as kube-scheduler's PreBind
			// creates it and then adds the finalizer with the allocation.
			c := extres.ForWrite(a.Claim)
			c.Finalizers = append(c.Finalizers, resourceapi.Finalizer)
			got, err := s.cfg.Client.ResourceV1().ResourceClaims(c.Namespace).Create(ctx, c, metav1.CreateOptions{})
			if err != nil {
				return out, fmt.Errorf("create the claim of extended resources for pod %s (decided again next cycle): %w", b.Pod.Key(), err)
			}
			w = writtenClaim{before: got, after: got, finalizer: true, created: true}
			out = append(out, w)
			a.Claim = got
		}
		if extres.IsExtendedClaim(a.Claim, pod.UID) {
			extended = a.Claim.Name
		}
		if a.Claim.Status.Allocation == nil && !slices.Contains(a.Claim.Finalizers, resourceapi.Finalizer) {
			c := a.Claim.DeepCopy()
			c.Finalizers = append(c.Finalizers, resourceapi.Finalizer)
			got, err := s.cfg.Client.ResourceV1().ResourceClaims(c.Namespace).Update(ctx, c, metav1.UpdateOptions{})
			if err != nil {
				return out, fail("add the finalizer to", c, err)
			}
			w.after, w.finalizer = got, true
			out = append(out, w) // rolled back if the status write fails
			a.Claim = got
		}
		st, err := claimStatus(a, pod, s.cfg.Now())
		if err != nil {
			return out, err
		}
		if st == nil {
			continue // reserved for the pod already
		}
		got, err := s.cfg.Client.ResourceV1().ResourceClaims(st.Namespace).UpdateStatus(ctx, st, metav1.UpdateOptions{})
		if err != nil {
			return out, fail("write the status of", st, err)
		}
		s.assumed.claim(got, s.cfg.Now())
		w.after, w.status = got, true
		if w.finalizer {
			out[len(out)-1] = w
		} else {
			out = append(out, w)
		}
	}
	if extended != "" {
		mappings := b.Pod.ExtendedResources
		if b.ExtendedResources != nil {
			mappings = b.ExtendedResources
		}
		if err := s.writeExtendedStatus(ctx, b.Pod, extended, mappings); err != nil {
			return out, err
		}
	}
	return out, nil
}

// writeExtendedStatus tells the kubelet which request of claim serves
// each container's extended resources (status.extendedResourceClaimStatus),
// unless the pod's status says so already.
func (s *Scheduler) writeExtendedStatus(ctx context.Context, p *plan.Pod, claim string, mappings []corev1.ContainerExtendedResourceRequest) error {
	pod := p.Pod
	want := &corev1.PodExtendedResourceClaimStatus{ResourceClaimName: claim, RequestMappings: mappings}
	if equality.Semantic.DeepEqual(pod.Status.ExtendedResourceClaimStatus, want) {
		return nil
	}
	st := pod.Status.DeepCopy()
	st.ExtendedResourceClaimStatus = want
	if err := schedutil.PatchPodStatus(ctx, s.cfg.Client, pod.Name, pod.Namespace, &pod.Status, st); err != nil {
		return fmt.Errorf("write the extended resource claim %s to the status of pod %s (decided again next cycle): %w", claim, p.Key(), err)
	}
	return nil
}

// claimStatus is the claim to write for allocation a of pod, or nil if
// the claim is allocated and reserved for the pod already.
func claimStatus(a view.Allocation, pod *corev1.Pod, now time.Time) (*resourceapi.ResourceClaim, error) {
	if a.Claim.Status.Allocation == nil {
		if a.Result == nil {
			return nil, fmt.Errorf("claim %s/%s: no allocation decided for it: %w", a.Claim.Namespace, a.Claim.Name, view.ErrInvalid)
		}
		return a.Status(pod, now)
	}
	if reservedFor(a.Claim, pod.UID) {
		return nil, nil
	}
	if len(a.Claim.Status.ReservedFor) >= resourceapi.ResourceClaimReservedForMaxSize {
		return nil, fmt.Errorf("claim %s/%s: reservedFor holds %d consumers already: %w", a.Claim.Namespace, a.Claim.Name, len(a.Claim.Status.ReservedFor), view.ErrInvalid)
	}
	c := a.Claim.DeepCopy()
	c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: pod.Name, UID: pod.UID})
	return c, nil
}

func reservedFor(c *resourceapi.ResourceClaim, uid types.UID) bool {
	return slices.ContainsFunc(c.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool {
		return r.UID == uid
	})
}

// rollback undoes a pod's claim writes, last first: the pod leaves
// reservedFor, an allocation this bind made is cleared once nobody else
// reserves the claim, and then the finalizer this bind added is removed.
// A conflict re-reads the claim and retries.
func (s *Scheduler) rollback(ctx context.Context, pod *corev1.Pod, ws []writtenClaim) {
	// Rollbacks run even when the cycle's context is done: a claim left
	// allocated for an unbound pod pins it to that node.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	for i := len(ws) - 1; i >= 0; i-- {
		w := ws[i]
		key := w.after.Namespace + "/" + w.after.Name
		deallocated, latest := !w.status, w.after
		if w.status {
			ours := w.before.Status.Allocation == nil
			err := s.updateClaim(ctx, w.after, true, func(c *resourceapi.ResourceClaim) {
				c.Status.ReservedFor = slices.DeleteFunc(c.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool {
					return r.UID == pod.UID
				})
				if ours && len(c.Status.ReservedFor) == 0 {
					c.Status.Allocation = nil
				}
			}, func(c *resourceapi.ResourceClaim) { deallocated, latest = c.Status.Allocation == nil, c })
			if err != nil && !apierrors.IsNotFound(err) {
				s.log.Error("claim rollback failed: the claim stays allocated for the pod, which is decided again on its node", "claim", key, "pod", pod.Namespace+"/"+pod.Name, "err", err)
				continue
			}
			s.m.rollbacks.Inc()
		}
		if w.finalizer && deallocated {
			err := s.updateClaim(ctx, latest, false, func(c *resourceapi.ResourceClaim) {
				if c.Status.Allocation == nil {
					c.Finalizers = slices.DeleteFunc(c.Finalizers, func(f string) bool { return f == resourceapi.Finalizer })
				}
			}, nil)
			if err != nil && !apierrors.IsNotFound(err) {
				s.log.Warn("claim finalizer not removed after a rollback", "claim", key, "err", err)
			}
		}
		if w.created && deallocated {
			// The next attempt writes a new claim; this one would be
			// left to the garbage collector only once the pod is gone.
			err := s.cfg.Client.ResourceV1().ResourceClaims(w.after.Namespace).Delete(ctx, w.after.Name,
				metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &w.after.UID}})
			if err != nil && !apierrors.IsNotFound(err) {
				s.log.Warn("claim of extended resources not deleted after a rollback", "claim", key, "err", err)
			}
		}
	}
}

// updateClaim applies change to cur and writes it, its status
// subresource if status, retrying conflicts on a fresh read; done, if
// set, sees the claim written.
func (s *Scheduler) updateClaim(ctx context.Context, cur *resourceapi.ResourceClaim, status bool, change, done func(*resourceapi.ResourceClaim)) error {
	ns, name := cur.Namespace, cur.Name
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if cur == nil {
			got, err := s.cfg.Client.ResourceV1().ResourceClaims(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cur = got
		}
		c := cur.DeepCopy()
		cur = nil // a retry reads the claim again
		change(c)
		var got *resourceapi.ResourceClaim
		var err error
		if status {
			got, err = s.cfg.Client.ResourceV1().ResourceClaims(c.Namespace).UpdateStatus(ctx, c, metav1.UpdateOptions{})
		} else {
			got, err = s.cfg.Client.ResourceV1().ResourceClaims(c.Namespace).Update(ctx, c, metav1.UpdateOptions{})
		}
		if err != nil {
			return err
		}
		s.assumed.claim(got, s.cfg.Now())
		if done != nil {
			done(got)
		}
		return nil
	})
}

// evictVictim evicts one preemption victim (once: a victim being deleted
// is skipped).
func (s *Scheduler) evictVictim(ctx context.Context, e plan.Eviction) {
	v := e.Victim.Pod
	if v.DeletionTimestamp != nil {
		return
	}
	forKey := ""
	if e.For != nil {
		forKey = e.For.Key()
	}
	if err := s.evict(ctx, v); err != nil {
		s.log.Warn("eviction failed", "victim", e.Victim.Key(), "for", forKey, "why", e.Why, "err", err)
		return
	}
	s.m.victims.Inc()
	s.log.Info("pod evicted", "victim", e.Victim.Key(), "node", v.Spec.NodeName, "for", forKey, "why", e.Why)
	s.recorder.Eventf(v, nil, corev1.EventTypeNormal, reasonPreempted, actionPreempting, "Preempted by %s (%s) on node %s", forKey, e.Why, v.Spec.NodeName)
}

// evict is Config.Evict, or evict.Evict: the policy/v1 Eviction API with
// the pod's own grace period, PodDisruptionBudgets honoured (a refusal is
// an *evict.BudgetError, retried next cycle).
func (s *Scheduler) evict(ctx context.Context, pod *corev1.Pod) error {
	if s.cfg.Evict != nil {
		return s.cfg.Evict(ctx, pod)
	}
	return evict.Evict(ctx, s.cfg.Client, pod, evict.Options{})
}

func claimNames(allocs []view.Allocation) []string {
	out := make([]string, 0, len(allocs))
	for _, a := range allocs {
		if a.Claim != nil {
			out = append(out, a.Claim.Name)
		}
	}
	return out
}

func deviceNames(ws []writtenClaim) []string {
	var out []string
	for _, w := range ws {
		if w.after.Status.Allocation == nil {
			continue
		}
		for _, r := range w.after.Status.Allocation.Devices.Results {
			out = append(out, r.Pool+"/"+r.Device)
		}
	}
	return out
}
