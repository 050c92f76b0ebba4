package queues

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpud/gpud/pkg/allocator/jobs"
)

// writeStatus writes the Queues' status once the leader has decided, at
// most one round per StatusInterval, each Queue only when its status
// changed.
func (s *Source) writeStatus(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.poke:
		}
		s.obsMu.Lock()
		leading, usage, pending := s.leading, s.usage, s.pending
		s.obsMu.Unlock()
		if leading && s.live() {
			if left := s.flush(ctx, usage, pending); left {
				s.wake()
			}
		}
		t := time.NewTimer(s.cfg.StatusInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// flush writes the status of every Queue whose status differs from what
// it should be; it reports whether writes were left for the next round.
func (s *Source) flush(ctx context.Context, usage map[string]jobs.Resources, pending map[string]int) bool {
	set := s.Current()
	subtree := set.pendingBySubtree(pending)
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	writes := 0
	for _, o := range s.queues.GetStore().List() {
		q, ok := o.(*Queue)
		if !ok {
			continue // no status to write on what does not decode
		}
		want := DesiredStatus(q, set, usage[q.Name], subtree[q.Name], now)
		if equality.Semantic.DeepEqual(q.Status, want) {
			continue
		}
		if writes >= maxStatusWrites {
			return true
		}
		writes++
		if err := s.patchStatus(ctx, q.Name, want); err != nil {
			s.cfg.Log.Warn("queue status not written", "queue", q.Name, "err", err)
		}
	}
	return false
}

func (s *Source) patchStatus(ctx context.Context, name string, st Status) error {
	// A JSON patch that replaces the whole status: a merge patch would
	// leave fields that went to zero (omitted) at their old values.
	body, err := json.Marshal([]map[string]any{{"op": "add", "path": "/status", "value": st}})
	if err != nil {
		return fmt.Errorf("queues: status of %s: %w", name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := s.cfg.Dynamic.Resource(GVR).Patch(ctx, name, types.JSONPatchType, body, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("queues: status of %s: %w", name, err)
	}
	return nil
}

// pendingBySubtree sums the leaves' pending pods into every ancestor.
func (s *Set) pendingBySubtree(pending map[string]int) map[string]int64 {
	parent := make(map[string]string, len(s.Queues))
	for _, q := range s.Queues {
		parent[q.Name] = q.Parent
	}
	out := map[string]int64{}
	for leaf, n := range pending {
		if _, ok := parent[leaf]; !ok {
			continue
		}
		for q, steps := leaf, 0; q != "" && steps <= len(parent); q, steps = parent[q], steps+1 {
			out[q] += int64(n)
		}
	}
	return out
}

// DesiredStatus is the status a Queue should show: the usage and
// pending pods the leader last decided with (zero for a refused queue),
// Accepted (True, or False naming the field at fault) and OverGuarantee.
// Conditions whose status, reason and message are unchanged keep their
// lastTransitionTime; now stamps the others.
func DesiredStatus(q *Queue, set *Set, usage jobs.Resources, pending int64, now metav1.Time) Status {
	st := Status{ObservedGeneration: q.Generation, Conditions: slices.Clone(q.Status.Conditions)}
	set1 := func(c metav1.Condition) {
		c.ObservedGeneration, c.LastTransitionTime = q.Generation, now
		if old := meta.FindStatusCondition(st.Conditions, c.Type); old != nil && old.Status == c.Status &&
			old.Reason == c.Reason && old.Message == c.Message && old.ObservedGeneration == c.ObservedGeneration {
			return
		}
		meta.RemoveStatusCondition(&st.Conditions, c.Type)
		st.Conditions = append(st.Conditions, c)
	}
	if err := set.Refused[q.Name]; err != nil {
		msg := reason(err)
		set1(metav1.Condition{Type: ConditionAccepted, Status: metav1.ConditionFalse, Reason: ReasonInvalid, Message: truncate(msg)})
		meta.RemoveStatusCondition(&st.Conditions, ConditionOverGuarantee)
		return st
	}
	st.Usage, st.PendingPods = fromJobs(usage), pending
	if note := set.Notes[q.Name]; note != "" {
		set1(metav1.Condition{Type: ConditionAccepted, Status: metav1.ConditionTrue, Reason: ReasonNamespacesIgnored, Message: truncate(note)})
	} else {
		set1(metav1.Condition{Type: ConditionAccepted, Status: metav1.ConditionTrue, Reason: ReasonAccepted, Message: "in the queue tree"})
	}
	var over []string
	g := q.Spec.Guaranteed.fields()
	for i, u := range st.Usage.fields() {
		if u.v > g[i].v {
			over = append(over, fmt.Sprintf("%s %d used, %d guaranteed", u.name, u.v, g[i].v))
		}
	}
	if len(over) > 0 {
		set1(metav1.Condition{Type: ConditionOverGuarantee, Status: metav1.ConditionTrue, Reason: ReasonBorrowing,
			Message: truncate("borrowing beyond the guarantee (preemptible by queues under theirs): " + strings.Join(over, ", "))})
	} else {
		set1(metav1.Condition{Type: ConditionOverGuarantee, Status: metav1.ConditionFalse, Reason: ReasonWithinGuarantee, Message: "within the guarantee"})
	}
	return st
}

// maxMessage is metav1.Condition's message limit.
const maxMessage = 32768

func truncate(s string) string {
	if len(s) > maxMessage {
		return s[:maxMessage-3] + "..."
	}
	return s
}
