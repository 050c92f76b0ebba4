package queues

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpud/gpud/pkg/allocator/jobs"
	"github.com/gpud/gpud/pkg/scheduler/plan"
)

// Set is the queue tree one cycle decides with: the --queues file's
// queues and reservations with the accepted Queue objects over them (an
// object wins over the file's queue of the same name), and the namespace
// bindings. A Set is not changed once built; it is safe for concurrent
// reads.
type Set struct {
	Queues       []jobs.Queue
	Reservations []jobs.Reservation
	// Refused are the Queue objects left out of the tree, by name, each
	// with why (the field and what is wrong). A file queue of the same
	// name, if any, stays in the tree.
	Refused map[string]error
	// Notes are accepted objects' remarks by name (namespaces bound to a
	// queue with children, whose pods are refused).
	Notes map[string]string
	// objects names the Queue objects (accepted or refused): a pod reaches
	// them only through a namespace binding.
	objects map[string]bool
	parents map[string]bool // queues with children
	defined map[string]bool
	// bound lists, per namespace, the queues whose spec.namespaces
	// name it.
	bound map[string][]string
}

// Resolve builds the Set from the Queue objects and the file's queue
// tree (both may be empty). An object that is invalid on its own
// (Convert), whose parent is undefined or refused, or that closes a
// parent cycle is refused with the reason naming spec.parent; the other
// queues are not affected. More than [MaxQueues] objects: those after
// the first MaxQueues by name are refused.
func Resolve(objs []*Queue, file []jobs.Queue, fileRes []jobs.Reservation) *Set {
	return resolve(objs, nil, file, fileRes)
}

// resolve is Resolve with undecodable, the Queue objects that did not
// decode (by name, with why), refused up front.
func resolve(objs []*Queue, undecodable map[string]error, file []jobs.Queue, fileRes []jobs.Reservation) *Set {
	s := &Set{Refused: map[string]error{}, Notes: map[string]string{}, objects: map[string]bool{},
		parents: map[string]bool{}, defined: map[string]bool{}, bound: map[string][]string{}}
	objs = slices.Clone(objs)
	slices.SortFunc(objs, func(a, b *Queue) int { return strings.Compare(a.Name, b.Name) })
	fileByName := make(map[string]jobs.Queue, len(file))
	for _, q := range file {
		fileByName[q.Name] = q
	}
	for n, err := range undecodable {
		s.objects[n] = true
		s.Refused[n] = err
	}
	accepted := map[string]jobs.Queue{}
	res := map[string][]jobs.Reservation{}
	byName := map[string]*Queue{}
	for i, o := range objs {
		s.objects[o.Name] = true
		if i >= MaxQueues {
			s.Refused[o.Name] = fmt.Errorf("%w: more than %d Queue objects", ErrInvalid, MaxQueues)
			continue
		}
		q, rs, err := Convert(o)
		if err != nil {
			s.Refused[o.Name] = err
			continue
		}
		accepted[o.Name], res[o.Name], byName[o.Name] = q, rs, o
	}
	// Refuse objects whose parent chain breaks until none does; a refused
	// object's name falls back to the file's queue, if any.
	merged := func() map[string]jobs.Queue {
		m := make(map[string]jobs.Queue, len(fileByName)+len(accepted))
		for n, q := range fileByName {
			m[n] = q
		}
		for n, q := range accepted {
			m[n] = q
		}
		return m
	}
	for {
		all := merged()
		var bad []string
		for _, name := range sortedNames(accepted) {
			if err := chainError(name, all, s.Refused); err != nil {
				s.Refused[name] = err
				bad = append(bad, name)
			}
		}
		if len(bad) == 0 {
			break
		}
		for _, n := range bad {
			delete(accepted, n)
		}
	}
	all := merged()
	for _, name := range sortedNames(all) {
		q := all[name]
		s.Queues = append(s.Queues, q)
		s.defined[name] = true
		if q.Parent != "" {
			s.parents[q.Parent] = true
		}
	}
	if _, err := jobs.NewQueueTree(s.Queues, nil); err != nil {
		// Not reached: every chain was checked. Keep the file's tree.
		for n := range accepted {
			s.Refused[n] = fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		r := resolve(nil, nil, file, fileRes)
		r.Refused, r.objects = s.Refused, s.objects
		return r
	}
	for _, r := range fileRes {
		if _, over := accepted[r.Queue]; !over {
			s.Reservations = append(s.Reservations, r)
		}
	}
	for _, name := range sortedNames(accepted) {
		s.Reservations = append(s.Reservations, res[name]...)
		o := byName[name]
		for _, ns := range o.Spec.Namespaces {
			s.bound[ns] = append(s.bound[ns], name)
		}
		if len(o.Spec.Namespaces) > 0 && s.parents[name] {
			s.Notes[name] = fmt.Sprintf("spec.namespaces: queue %s has child queues, and pods are placed in leaf queues only: the pods of %s are refused until the namespaces are bound to a leaf queue",
				name, strings.Join(o.Spec.Namespaces, ", "))
		}
	}
	for _, n := range sortedNames(s.Refused) {
		for _, ns := range byNameNamespaces(objs, n) {
			s.bound[ns] = append(s.bound[ns], n)
		}
	}
	for ns := range s.bound {
		slices.Sort(s.bound[ns])
		s.bound[ns] = slices.Compact(s.bound[ns])
	}
	return s
}

// byNameNamespaces is spec.namespaces of the object named name (a refused
// object's bindings still hold: its namespaces' pods are refused rather
// than let into another queue).
func byNameNamespaces(objs []*Queue, name string) []string {
	for _, o := range objs {
		if o.Name == name {
			return o.Spec.Namespaces
		}
	}
	return nil
}

// chainError says why name's parent chain in all does not reach a root
// (nil if it does): a parent that is undefined, or refused, or a cycle
// that name is on. A chain that runs into a cycle name is not on is left
// to the cycle's members (refused first, which may restore a file queue).
func chainError(name string, all map[string]jobs.Queue, refused map[string]error) error {
	seen := map[string]bool{name: true}
	path := []string{name}
	for cur := all[name]; cur.Parent != ""; cur = all[cur.Parent] {
		p := cur.Parent
		if _, ok := all[p]; !ok {
			if cur.Name != name {
				return nil // an ancestor's own problem, reported on it
			}
			if err, ok := refused[p]; ok && err != nil {
				return fmt.Errorf("%w: spec.parent: queue %q is refused", ErrInvalid, p)
			}
			return fmt.Errorf("%w: spec.parent: queue %q is not defined (no Queue object or --queues entry of that name)", ErrInvalid, p)
		}
		if p == name {
			return fmt.Errorf("%w: spec.parent: parent cycle %s", ErrInvalid, strings.Join(append(path, name), " -> "))
		}
		if seen[p] {
			return nil
		}
		seen[p] = true
		path = append(path, p)
	}
	return nil
}

// reason is a refusal's message without the ErrInvalid prefix.
func reason(err error) string {
	return strings.TrimPrefix(err.Error(), ErrInvalid.Error()+": ")
}

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// QueueOf is the leaf queue a pod is placed in ("" for none: the
// unqueued share), given its namespace's label gpud.io/queue (nsLabel,
// "" for none), or why it may not be placed (errors.Is ErrRefused):
//
//   - A namespace bound to a queue (a Queue's spec.namespaces, or the
//     namespace label) puts its pods there; a pod whose label
//     gpud.io/queue names another queue is refused, as is every pod of a
//     namespace bound to several queues, or to one that is refused,
//     undefined or not a leaf.
//   - A pod of an unbound namespace may not name a queue defined by a
//     Queue object; it may name a --queues file queue (as before Queue
//     objects), and without a label it is unqueued.
func (s *Set) QueueOf(pod *corev1.Pod, nsLabel string) (string, error) {
	ns, label := pod.Namespace, pod.Labels[plan.QueueLabel]
	bound := s.bound[ns]
	if nsLabel != "" && !slices.Contains(bound, nsLabel) {
		bound = append(slices.Clone(bound), nsLabel)
		slices.Sort(bound)
	}
	refuse := func(format string, args ...any) (string, error) {
		return "", fmt.Errorf("%w: %s", ErrRefused, fmt.Sprintf(format, args...))
	}
	switch {
	case len(bound) > 1:
		return refuse("namespace %s is bound to several queues (%s: Queue spec.namespaces and the namespace label %s); an admin must leave one",
			ns, strings.Join(bound, ", "), NamespaceLabel)
	case len(bound) == 1:
		q := bound[0]
		switch err := s.Refused[q]; {
		case label != "" && label != q:
			return refuse("namespace %s is bound to queue %s; the pod's label %s=%s names another queue (remove the label, or ask an admin to bind the namespace to %s)",
				ns, q, plan.QueueLabel, label, label)
		case err != nil && !s.defined[q]:
			return refuse("namespace %s is bound to queue %s, which is refused: %s", ns, q, reason(err))
		case !s.defined[q]:
			return refuse("namespace %s is bound to queue %s, which is not defined", ns, q)
		case s.parents[q]:
			return refuse("namespace %s is bound to queue %s, which has child queues: pods run in leaf queues", ns, q)
		}
		return q, nil
	case label != "" && s.objects[label]:
		return refuse("namespace %s is not bound to queue %s: a Queue serves the namespaces in its spec.namespaces and those an admin labels %s=%s",
			ns, label, NamespaceLabel, label)
	}
	return label, nil
}
