package scheduler

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/gpud/gpud/pkg/scheduler/plan"
)

// writePending sets PodScheduled=False (reason Unschedulable, the
// decider's message) and the nominated node on each pending pod whose
// status says otherwise, with an Event (see writeStatuses). Entries of
// pods no longer pending are forgotten.
func (s *Scheduler) writePending(ctx context.Context, pending []plan.Pending) {
	live := make(map[types.UID]bool, len(pending))
	for _, pd := range pending {
		if pd.Pod != nil && pd.Pod.Pod != nil {
			live[pd.Pod.Pod.UID] = true
		}
	}
	s.mu.Lock()
	for uid := range s.written {
		if !live[uid] {
			delete(s.written, uid)
		}
	}
	s.mu.Unlock()
	s.writeStatuses(ctx, pending)
}

// writeFailed tells the pods of a failed bind why (writeStatuses); it
// forgets nothing, as it runs beside the cycles.
func (s *Scheduler) writeFailed(ctx context.Context, pending []plan.Pending) {
	s.writeStatuses(ctx, pending)
}

// writeStatuses writes the pending status of each pod whose status (or
// what this process wrote last) does not say so already: a pod whose
// reason has not changed costs no write. Writes are bounded twice: at most
// maxStatusWrites per call, and within the status budget (statusBudget),
// a share of the client's rate that leaves the rest to binds, so that
// pending pods never slow binds down; a write over budget is left to a
// later cycle (gpud_scheduler_status_writes_deferred_total).
func (s *Scheduler) writeStatuses(ctx context.Context, pending []plan.Pending) {
	var todo []plan.Pending
	deferred := 0
	for _, pd := range pending {
		if pd.Pod == nil || pd.Pod.Pod == nil {
			continue
		}
		pod := pd.Pod.Pod
		msg := truncate(pd.Message, maxMessageBytes)
		if statusSays(pod, msg, pd.NominatedNode, s.cfg.Now()) || s.statusWritten(pod.UID, msg, pd.NominatedNode) {
			s.log.Debug("pod pending", "pod", pd.Pod.Key(), "code", pd.Code, "reason", msg)
			continue
		}
		if len(todo) >= maxStatusWrites || !s.statusBudget.TryAccept() {
			deferred++
			continue
		}
		todo = append(todo, pd)
	}
	if deferred > 0 {
		s.statusDeferred.Add(float64(deferred))
	}

	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.cfg.Workers)
	for _, pd := range todo {
		g.Go(func() error {
			s.patchPending(gctx, pd)
			return nil
		})
	}
	_ = g.Wait()
}

// Status budget: pending-status writes may take statusShare of the API
// client's rate (its QPS as client-go's rate limiter reports it, burst one
// second of that), or defaultStatusQPS when the client has no limiter
// (a fake); the rest is the binds' (claim writes, Binding: three or more
// requests per pod).
const (
	statusShare      = 0.25
	defaultStatusQPS = 50
)

// newStatusBudget is the token bucket of pending-status writes for
// client, on the scheduler's clock now.
func newStatusBudget(client kubernetes.Interface, now func() time.Time) flowcontrol.PassiveRateLimiter {
	qps := float32(defaultStatusQPS)
	if rc := client.CoreV1().RESTClient(); rc != nil && !isNilRESTClient(rc) {
		if rl := rc.GetRateLimiter(); rl != nil && rl.QPS() > 0 {
			qps = max(1, rl.QPS()*statusShare)
		}
	}
	return flowcontrol.NewTokenBucketPassiveRateLimiterWithClock(qps, max(1, int(qps)), passiveClock(now))
}

// isNilRESTClient reports whether rc is a nil *rest.RESTClient (what the
// fake clientset returns) in its interface.
func isNilRESTClient(rc rest.Interface) bool {
	c, ok := rc.(*rest.RESTClient)
	return ok && c == nil
}

// passiveClock is a clock.PassiveClock on a Now function.
type passiveClock func() time.Time

func (c passiveClock) Now() time.Time                  { return c() }
func (c passiveClock) Since(t time.Time) time.Duration { return c().Sub(t) }

func (s *Scheduler) patchPending(ctx context.Context, pd plan.Pending) {
	pod := pd.Pod.Pod
	msg := truncate(pd.Message, maxMessageBytes)
	now := metav1.NewTime(s.cfg.Now().UTC().Truncate(time.Second))
	transition := now
	if c := podScheduled(pod); c != nil && c.Status == corev1.ConditionFalse {
		transition = c.LastTransitionTime
	}
	st := map[string]any{"conditions": []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: corev1.PodReasonUnschedulable, Message: msg, LastTransitionTime: transition, LastProbeTime: now}}}
	switch {
	case pd.NominatedNode != "":
		st["nominatedNodeName"] = pd.NominatedNode
	case pod.Status.NominatedNodeName != "":
		// A nomination this cycle did not renew (its victims' room went to
		// another pod, or the pod no longer needs preemption) is cleared, as
		// kube-scheduler does: a stale one makes other schedulers and
		// autoscalers count the pod on that node.
		st["nominatedNodeName"] = nil
	}
	patch, err := json.Marshal(map[string]any{"status": st})
	if err != nil {
		s.log.Error("pod status patch not encoded", "pod", pd.Pod.Key(), "err", err)
		return
	}
	_, err = s.cfg.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	switch {
	case apierrors.IsNotFound(err):
		return
	case err != nil:
		s.log.Warn("pod status not written", "pod", pd.Pod.Key(), "err", err)
		return
	}
	s.mu.Lock()
	s.written[pod.UID] = writtenStatus{shape: messageShape(msg) + "\x00" + pd.NominatedNode, at: s.cfg.Now()}
	s.mu.Unlock()
	s.log.Info("pod pending", "pod", pd.Pod.Key(), "code", pd.Code, "reason", msg, "nominated_node", pd.NominatedNode)
	s.recorder.Eventf(pod, nil, corev1.EventTypeWarning, reasonFailedScheduling, actionScheduling, "%s", truncate(msg, maxNoteBytes))
}

// refreshStatus is how long a pending condition whose message differs from
// the new one only in its numbers ("68 nodes short" / "65 nodes short")
// stays as written: rewriting it every cycle spends the API budget that
// binds need (seen in make sched-bench as ~100 status writes/s).
const refreshStatus = time.Minute

// statusSays reports whether the pod's status already holds the pending
// condition with msg, or one differing only in numbers written less than
// refreshStatus ago, and the nomination (none when nominated is "").
func statusSays(pod *corev1.Pod, msg, nominated string, now time.Time) bool {
	c := podScheduled(pod)
	if c == nil || c.Status != corev1.ConditionFalse || c.Reason != corev1.PodReasonUnschedulable ||
		pod.Status.NominatedNodeName != nominated {
		return false
	}
	return c.Message == msg || (messageShape(c.Message) == messageShape(msg) && now.Sub(c.LastProbeTime.Time) < refreshStatus)
}

// messageShape is msg with every run of digits replaced by '#'.
func messageShape(msg string) string {
	var b strings.Builder
	b.Grow(len(msg))
	digits := false
	for _, r := range msg {
		if r >= '0' && r <= '9' {
			if !digits {
				b.WriteByte('#')
			}
			digits = true
			continue
		}
		digits = false
		b.WriteRune(r)
	}
	return b.String()
}

// writtenStatus is a pending status this process wrote: its message shape
// with the nomination, and when.
type writtenStatus struct {
	shape string
	at    time.Time
}

func podScheduled(pod *corev1.Pod) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodScheduled {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// statusWritten reports whether this process wrote that status already
// (its informer may not show it yet).
func (s *Scheduler) statusWritten(uid types.UID, msg, nominated string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.written[uid]
	return ok && w.shape == messageShape(msg)+"\x00"+nominated && s.cfg.Now().Sub(w.at) < refreshStatus
}

func (s *Scheduler) forgetStatus(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.written, uid)
}

// truncate cuts s to at most n bytes on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("...")
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "..."
}

// reasonInvalidAnnotation is the Event reason for a malformed gpud
// annotation on a pod.
const reasonInvalidAnnotation = "InvalidAnnotation"

// warnAnnotations tells each pod with malformed gpud annotations, once
// per problem, with a Warning Event (the decider ignores the values, so
// backfill and preemption would otherwise silently not use them). Pods
// that are gone or fixed are forgotten.
func (s *Scheduler) warnAnnotations(bad []plan.Pending) {
	next := make(map[types.UID]string, len(bad))
	for _, b := range bad {
		pod := b.Pod.Pod
		next[pod.UID] = b.Message
		if s.warned[pod.UID] == b.Message {
			continue
		}
		s.log.Info("pod annotation ignored", "pod", b.Pod.Key(), "reason", b.Message)
		s.recorder.Eventf(pod, nil, corev1.EventTypeWarning, reasonInvalidAnnotation, actionScheduling, "%s", truncate(b.Message, maxNoteBytes))
	}
	s.warned = next
}
