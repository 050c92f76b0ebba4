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

	"github.com/gpud/gpud/pkg/scheduler/plan"
)

// writePending sets PodScheduled=False (reason Unschedulable, the
// decider's message) and the nominated node on each pending pod whose
// status says otherwise, with an Event, at most maxStatusWrites per cycle.
// Entries of pods no longer pending are forgotten.
func (s *Scheduler) writePending(ctx context.Context, pending []plan.Pending) {
	live := make(map[types.UID]bool, len(pending))
	var todo []plan.Pending
	for _, pd := range pending {
		if pd.Pod == nil || pd.Pod.Pod == nil {
			continue
		}
		pod := pd.Pod.Pod
		live[pod.UID] = true
		msg := truncate(pd.Message, maxMessageBytes)
		if statusSays(pod, msg, pd.NominatedNode, s.cfg.Now()) || s.statusWritten(pod.UID, msg, pd.NominatedNode) {
			s.log.Debug("pod pending", "pod", pd.Pod.Key(), "code", pd.Code, "reason", msg)
			continue
		}
		if len(todo) < maxStatusWrites {
			todo = append(todo, pd)
		}
	}
	s.mu.Lock()
	for uid := range s.written {
		if !live[uid] {
			delete(s.written, uid)
		}
	}
	s.mu.Unlock()

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
