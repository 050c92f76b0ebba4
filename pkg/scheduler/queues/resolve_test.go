package queues

import (
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpud/gpud/pkg/allocator/jobs"
)

func names(qs []jobs.Queue) []string {
	var out []string
	for _, q := range qs {
		out = append(out, q.Name)
	}
	return out
}

func refusedFor(t *testing.T, s *Set, name, want string) {
	t.Helper()
	err := s.Refused[name]
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
		t.Fatalf("queue %s refused with %v, want ErrInvalid containing %q", name, err, want)
	}
}

// Invalid Queues are refused, each saying why, and the others stay.
func TestResolveRefusesOnlyTheBadQueues(t *testing.T) {
	s := Resolve([]*Queue{
		queue("org", ""), queue("team-a", "org"),
		queue("loop-1", "loop-2"), queue("loop-2", "loop-1"),
		queue("orphan", "nowhere"),
		queue("negative", "org", func(s *Spec) { s.Limit.GPUMilli = -1000 }),
		queue("child-of-negative", "negative"),
	}, nil, nil)
	if got := names(s.Queues); !slices.Equal(got, []string{"org", "team-a"}) {
		t.Fatalf("tree %v, want [org team-a]", got)
	}
	refusedFor(t, s, "loop-1", "spec.parent: parent cycle loop-1 -> loop-2 -> loop-1")
	refusedFor(t, s, "loop-2", "spec.parent: parent cycle")
	refusedFor(t, s, "orphan", `spec.parent: queue "nowhere" is not defined`)
	refusedFor(t, s, "negative", "spec.limit.gpuMilli")
	refusedFor(t, s, "child-of-negative", `spec.parent: queue "negative" is refused`)
	if _, err := jobs.NewQueueTree(s.Queues, nil); err != nil {
		t.Fatalf("the resolved tree does not build: %v", err)
	}
}

// A Queue object wins over the file's queue of its name; a refused one
// leaves the file's in place. File children may hang under objects.
func TestResolveObjectsOverTheFile(t *testing.T) {
	file := []jobs.Queue{{Name: "org"}, {Name: "team-a", Parent: "org", Quota: jobs.Quota{Limit: jobs.Resources{GPUMilli: 1000}}},
		{Name: "team-b", Parent: "org", Quota: jobs.Quota{Limit: jobs.Resources{GPUMilli: 1000}}}}
	fileRes := []jobs.Reservation{{Name: "file-res", Queue: "team-a", Nodes: []string{"n"}, Start: 0, End: 10}}
	s := Resolve([]*Queue{
		queue("team-a", "org", func(s *Spec) { s.Limit.GPUMilli = 8000 }),
		queue("team-b", "org", func(s *Spec) { s.Limit.GPUMilli = -1 }),
		queue("team-c", "org"),
	}, file, fileRes)
	limits := map[string]int64{}
	for _, q := range s.Queues {
		limits[q.Name] = q.Quota.Limit.GPUMilli
	}
	if limits["team-a"] != 8000 || limits["team-b"] != 1000 || len(limits) != 4 {
		t.Fatalf("limits %v, want team-a's object (8000), team-b's file entry (1000), team-c and org", limits)
	}
	if len(s.Reservations) != 0 {
		t.Fatalf("reservations %v: the file's reservation of team-a goes with the file's team-a", s.Reservations)
	}
}

func nsPod(ns, label string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ns}}
	if label != "" {
		p.Labels = map[string]string{"gpud.io/queue": label}
	}
	return p
}

func TestQueueOf(t *testing.T) {
	s := Resolve([]*Queue{
		queue("org", "", func(s *Spec) { s.Namespaces = []string{"org-ns"} }),
		queue("a", "org", func(s *Spec) { s.Namespaces = []string{"ns-a", "shared"} }),
		queue("b", "org", func(s *Spec) { s.Namespaces = []string{"ns-b", "shared"} }),
		queue("broken", "", func(s *Spec) { s.Namespaces = []string{"ns-broken"}; s.Weight = IntWeight(-1) }),
		queue("labelled", "org"),
	}, []jobs.Queue{{Name: "file-q"}}, nil)
	tests := []struct {
		name, ns, nsLabel, label string
		want                     string
		refusal                  string
	}{
		{name: "bound namespace, no label", ns: "ns-a", want: "a"},
		{name: "bound namespace, its own queue", ns: "ns-a", label: "a", want: "a"},
		{name: "tenant names another queue", ns: "ns-a", label: "b", refusal: "namespace ns-a is bound to queue a; the pod's label gpud.io/queue=b names another queue"},
		{name: "namespace label binds", ns: "ns-c", nsLabel: "labelled", want: "labelled"},
		{name: "namespace label and spec agree", ns: "ns-a", nsLabel: "a", want: "a"},
		{name: "namespace label and spec disagree", ns: "ns-a", nsLabel: "b", refusal: "bound to several queues (a, b"},
		{name: "two Queues list the namespace", ns: "shared", refusal: "bound to several queues (a, b"},
		{name: "bound to a refused queue", ns: "ns-broken", refusal: "which is refused: spec.weight"},
		{name: "bound to a parent", ns: "org-ns", refusal: "queue org, which has child queues"},
		{name: "labelled namespace, undefined queue", ns: "ns-x", nsLabel: "ghost", refusal: "queue ghost, which is not defined"},
		{name: "unbound namespace names a Queue object", ns: "free", label: "a", refusal: "namespace free is not bound to queue a"},
		{name: "unbound namespace names a file queue", ns: "free", label: "file-q", want: "file-q"},
		{name: "unbound namespace, no label", ns: "free", want: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.QueueOf(nsPod(tc.ns, tc.label), tc.nsLabel)
			if tc.refusal != "" {
				if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.refusal) || got != "" {
					t.Fatalf("QueueOf() = %q, %v; want a refusal containing %q", got, err, tc.refusal)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("QueueOf() = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	if !strings.Contains(s.Notes["org"], "spec.namespaces") {
		t.Fatalf("no note on org, whose namespaces are on a parent: %v", s.Notes)
	}
}
