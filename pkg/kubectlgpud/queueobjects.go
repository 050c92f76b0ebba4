package kubectlgpud

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/gpud/gpud/pkg/scheduler/queues"
)

// queueKind names the Queue objects in errors and notes.
var queueKind = queues.Resource + "." + queues.GroupVersion.Group

// LoadQueues lists the Queue objects (scheduling.gpud.io/v1alpha1) into
// s.Queues, page by page. A nil dyn, a CRD that is not installed and a
// list RBAC forbids are noted, not errors: the queues command still shows
// the pods by queue. An object that does not decode is noted and left
// out.
func LoadQueues(ctx context.Context, dyn dynamic.Interface, s *Snapshot) error {
	if dyn == nil {
		s.Notes = append(s.Notes, fmt.Sprintf("%s not read (no dynamic client): only the pods' queues are shown", queueKind))
		return nil
	}
	items, err := list(ctx, queueKind, func(o metav1.ListOptions) ([]unstructured.Unstructured, string, error) {
		l, err := dyn.Resource(queues.GVR).List(ctx, o)
		if err != nil {
			return nil, "", err
		}
		return l.Items, l.GetContinue(), nil
	})
	switch {
	case apierrors.IsNotFound(err):
		s.Notes = append(s.Notes, fmt.Sprintf("cannot list %s (NotFound): the Queue CRD is not installed (deploy/scheduler/queue-crd.yaml); only the pods' queues are shown", queueKind))
		return nil
	case apierrors.IsForbidden(err):
		s.Notes = append(s.Notes, fmt.Sprintf("cannot list %s (Forbidden): only the pods' queues are shown", queueKind))
		return nil
	case err != nil:
		return err
	}
	for _, u := range items {
		q, err := queues.FromUnstructured(u)
		if err != nil {
			s.Notes = append(s.Notes, fmt.Sprintf("Queue %s left out: %v", u.GetName(), err))
			continue
		}
		s.Queues = append(s.Queues, q)
	}
	s.QueuesRead = true
	return nil
}

// LoadNamespaces lists the namespaces labelled gpud.io/queue (a binding
// to a queue an admin made, queues.NamespaceLabel) into
// s.NamespaceQueues. A list RBAC forbids is noted, not an error: those
// namespaces' pods then count by their own label.
func LoadNamespaces(ctx context.Context, cs kubernetes.Interface, s *Snapshot) error {
	items, err := list(ctx, "namespaces", func(o metav1.ListOptions) ([]corev1.Namespace, string, error) {
		o.LabelSelector = queues.NamespaceLabel
		l, err := cs.CoreV1().Namespaces().List(ctx, o)
		if err != nil {
			return nil, "", err
		}
		return l.Items, l.Continue, nil
	})
	switch {
	case apierrors.IsForbidden(err):
		s.Notes = append(s.Notes, fmt.Sprintf("cannot list namespaces (Forbidden): namespaces bound to a queue by their %s label are not shown, and their pods count by the pods' own label",
			queues.NamespaceLabel))
		return nil
	case err != nil:
		return err
	}
	s.NamespaceQueues = map[string]string{}
	for _, n := range items {
		if q := n.Labels[queues.NamespaceLabel]; q != "" {
			s.NamespaceQueues[n.Name] = q
		}
	}
	s.NamespacesRead = true
	return nil
}

// QueueObject is one Queue object: its place in the tree, what its spec
// guarantees and limits, and the status the leading gpud scheduler wrote.
type QueueObject struct {
	Name   string `json:"name"`
	Parent string `json:"parent,omitempty"`
	// Depth is the queue's depth in the tree of Queue objects (0: a root,
	// or a queue whose parent is not a Queue object).
	Depth int `json:"depth"`
	// Weight is spec.weight as written ("1" for the default).
	Weight string `json:"weight,omitempty"`
	// Objectives are spec.objectives' weights ("util=0.5,energy=1"); ""
	// when the queue has none (gpud scheduler's --objectives).
	Objectives string   `json:"objectives,omitempty"`
	Namespaces []string `json:"namespaces,omitempty"`
	// LabelledNamespaces are the namespaces bound to the queue by their
	// gpud.io/queue label (read when RBAC lets the user list namespaces).
	LabelledNamespaces []string `json:"labelledNamespaces,omitempty"`

	Guaranteed      queues.Resources `json:"guaranteed"`
	Limit           queues.Resources `json:"limit"`
	ModelGuaranteed map[string]int64 `json:"modelGuaranteed,omitempty"`
	ModelLimit      map[string]int64 `json:"modelLimit,omitempty"`

	// Usage and PendingPods are the status: what the queue's pods hold
	// (children included) and how many wait.
	Usage       queues.Resources `json:"usage"`
	PendingPods int64            `json:"pendingPods"`
	// Accepted is the Accepted condition's status ("True", "False"; ""
	// before the scheduler wrote one), Message its message when False.
	Accepted string `json:"accepted,omitempty"`
	Message  string `json:"message,omitempty"`
	// Borrowing is the OverGuarantee condition: the queue holds more
	// than its guarantee (its pods are preempted first).
	Borrowing bool `json:"borrowing,omitempty"`
	// Stale: the status describes an older generation of the spec.
	Stale bool `json:"stale,omitempty"`
}

// QueueObjects turns the snapshot's Queue objects into rows in tree
// order: each root by name, then its children by name, depth first.
func QueueObjects(s *Snapshot) []QueueObject {
	byName := make(map[string]*queues.Queue, len(s.Queues))
	children := map[string][]string{}
	for _, q := range s.Queues {
		byName[q.Name] = q
	}
	var roots []string
	for _, q := range s.Queues {
		if p := q.Spec.Parent; p != "" && byName[p] != nil && p != q.Name {
			children[p] = append(children[p], q.Name)
		} else {
			roots = append(roots, q.Name)
		}
	}
	slices.Sort(roots)
	out := make([]QueueObject, 0, len(s.Queues))
	seen := map[string]bool{}
	labelled := map[string][]string{}
	for ns, q := range s.NamespaceQueues {
		labelled[q] = append(labelled[q], ns)
	}
	var walk func(name string, depth int)
	walk = func(name string, depth int) {
		if seen[name] {
			return
		}
		seen[name] = true
		o := queueObject(byName[name], depth)
		o.LabelledNamespaces = slices.Sorted(slices.Values(labelled[name]))
		out = append(out, o)
		kids := children[name]
		slices.Sort(kids)
		for _, k := range kids {
			walk(k, depth+1)
		}
	}
	for _, r := range roots {
		walk(r, 0)
	}
	// A parent cycle has no root: its queues follow at depth 0 (the
	// scheduler refuses them, as their status says).
	rest := make([]string, 0)
	for _, q := range s.Queues {
		if !seen[q.Name] {
			rest = append(rest, q.Name)
		}
	}
	slices.Sort(rest)
	for _, r := range rest {
		walk(r, 0)
	}
	return out
}

// UnknownLabelQueues lists, by namespace, the namespaces whose
// gpud.io/queue label names no Queue object (a queue of gpud scheduler's
// --queues file, which kubectl cannot read, or none), as "namespace
// (queue)".
func UnknownLabelQueues(s *Snapshot) []string {
	objs := make(map[string]bool, len(s.Queues))
	for _, q := range s.Queues {
		objs[q.Name] = true
	}
	var out []string
	for _, ns := range slices.Sorted(maps.Keys(s.NamespaceQueues)) {
		if q := s.NamespaceQueues[ns]; !objs[q] {
			out = append(out, fmt.Sprintf("%s (%s)", ns, q))
		}
	}
	return out
}

// namespacesCell is a Queue's NAMESPACES cell: spec.namespaces, then the
// namespaces bound by label, marked "(label)"; "-" for none.
func namespacesCell(q QueueObject) string {
	parts := slices.Clone(q.Namespaces)
	for _, ns := range q.LabelledNamespaces {
		parts = append(parts, ns+"(label)")
	}
	return dash(strings.Join(parts, ","))
}

func queueObject(q *queues.Queue, depth int) QueueObject {
	o := QueueObject{Name: q.Name, Parent: q.Spec.Parent, Depth: depth, Weight: queues.WeightString(q.Spec.Weight), Objectives: q.Spec.Objectives.String(),
		Namespaces: slices.Clone(q.Spec.Namespaces), Guaranteed: q.Spec.Guaranteed, Limit: q.Spec.Limit,
		ModelGuaranteed: q.Spec.ModelGuaranteed, ModelLimit: q.Spec.ModelLimit,
		Usage: q.Status.Usage, PendingPods: q.Status.PendingPods,
		Stale: q.Status.ObservedGeneration != 0 && q.Status.ObservedGeneration < q.Generation}
	if c := meta.FindStatusCondition(q.Status.Conditions, queues.ConditionAccepted); c != nil {
		o.Accepted = string(c.Status)
		if c.Status != metav1.ConditionTrue || c.Reason != queues.ReasonAccepted {
			o.Message = c.Message
		}
	}
	o.Borrowing = meta.IsStatusConditionTrue(q.Status.Conditions, queues.ConditionOverGuarantee)
	return o
}

// resourceCells names the non-zero fields of r and of the per-model map
// as a Queue's spec writes them ("gpuMilli=8000, memoryMiB=1024,
// gpuMilli[A100]=4000"); "-" when all are zero.
func resourceCells(r queues.Resources, models map[string]int64) string {
	var parts []string
	for _, f := range []struct {
		name string
		v    int64
	}{{"cpuMilli", r.CPUMilli}, {"memoryMiB", r.MemoryMiB}, {"gpuMilli", r.GPUMilli}, {"gpuMemoryMiB", r.GPUMemoryMiB}, {"migSlices", r.MIGSlices}} {
		if f.v != 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", f.name, f.v))
		}
	}
	keys := make([]string, 0, len(models))
	for k := range models {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, cmp.Compare)
	for _, k := range keys {
		if models[k] != 0 {
			parts = append(parts, fmt.Sprintf("gpuMilli[%s]=%d", k, models[k]))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// queueState is a Queue's STATUS cell.
func queueState(q QueueObject) string {
	var s string
	switch q.Accepted {
	case "":
		return "no status yet"
	case string(metav1.ConditionTrue):
		s = "accepted"
		if q.Message != "" {
			s += " (see below)"
		}
		if q.Borrowing {
			s += ", borrowing"
		}
	default:
		s = "refused (see below)"
	}
	if q.Stale {
		s += ", status of an older spec"
	}
	return s
}
