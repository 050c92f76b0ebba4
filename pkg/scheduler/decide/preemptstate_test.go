package decide

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpud/gpud/pkg/scheduler/plan"
)

// TestPreemptStateSearches: a cycle starts at most limit preemption
// searches; a refused start counts nothing.
func TestPreemptStateSearches(t *testing.T) {
	s := newPreemptState(2)
	for i := range 2 {
		if !s.open() || !s.start() {
			t.Fatalf("search %d refused under a limit of 2", i+1)
		}
	}
	if s.open() || s.start() {
		t.Fatal("a third search started under a limit of 2")
	}
	if s.searches != 2 {
		t.Errorf("searches %d after a refused start, want 2", s.searches)
	}
	if z := newPreemptState(0); z.start() {
		t.Error("a search started under a limit of 0")
	}
}

// TestPreemptStateVictims: the victims are built once, on first use.
func TestPreemptStateVictims(t *testing.T) {
	s := newPreemptState(1)
	builds := 0
	build := func() []*victim { builds++; return []*victim{{key: "default/a"}} }
	first := s.victimList(build)
	second := s.victimList(build)
	if builds != 1 || len(second) != 1 || second[0] != first[0] {
		t.Errorf("built %d times, second list %v; want one build, the same victims", builds, second)
	}
}

// TestPreemptStateNominated: a node a preemptor holds is held for every
// later victim on it, and no other node is.
func TestPreemptStateNominated(t *testing.T) {
	s := newPreemptState(1)
	if s.held([]string{"a"}) {
		t.Fatal("a held before any nomination")
	}
	s.nominate("a")
	if !s.held([]string{"b", "a"}) {
		t.Error("a victim on b and a: not held")
	}
	if s.held([]string{"b"}) || s.held(nil) {
		t.Error("a victim on b alone: held")
	}
}

func pdbPod(ns, name string, labels map[string]string) *plan.Pod {
	return &plan.Pod{Pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}}}
}

func pdb(name string, allowed int32, sel *metav1.LabelSelector) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: policyv1.PodDisruptionBudgetSpec{Selector: sel}, Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed}}
}

// TestPreemptStatePDB: a budget blocks a victim with more covered pods
// than its disruptions left, this cycle's evictions spend them (only for
// pods a budget covers), and budgets without a usable selector, pods in
// other namespaces and other labels are not counted.
func TestPreemptStatePDB(t *testing.T) {
	db := map[string]string{"app": "db"}
	pdbs := []*policyv1.PodDisruptionBudget{
		nil,
		pdb("db", 1, &metav1.LabelSelector{MatchLabels: db}),
		pdb("none", 0, nil),
		pdb("empty", 0, &metav1.LabelSelector{}),
	}
	db0, db1 := pdbPod("default", "db-0", db), pdbPod("default", "db-1", db)
	web := pdbPod("default", "web", map[string]string{"app": "web"})
	other := pdbPod("other", "db", db)
	s := newPreemptState(1)
	if got := s.pdbBlocking(pdbs, []*plan.Pod{db0}); got != "" {
		t.Fatalf("db-0 with one disruption allowed: blocked by %s", got)
	}
	if got := s.pdbBlocking(pdbs, []*plan.Pod{db0, db1}); got != "default/db" {
		t.Fatalf("a gang of db-0 and db-1 with one disruption allowed: blocked by %q, want default/db", got)
	}
	s.evicted(pdbs, web)
	s.evicted(pdbs, other)
	if got := s.pdbBlocking(pdbs, []*plan.Pod{db1}); got != "" {
		t.Fatalf("db-1 after evicting pods the budget does not cover: blocked by %s", got)
	}
	s.evicted(pdbs, db0)
	if got := s.pdbBlocking(pdbs, []*plan.Pod{db1}); got != "default/db" {
		t.Errorf("db-1 after db-0's eviction spent the budget: blocked by %q, want default/db", got)
	}
	for _, p := range []*plan.Pod{web, other} {
		if got := s.pdbBlocking(pdbs, []*plan.Pod{p}); got != "" {
			t.Errorf("%s/%s: blocked by %s", p.Pod.Namespace, p.Pod.Name, got)
		}
	}
	if !slices.Equal([]int{s.pdbUsed["default/db"], len(s.pdbUsed)}, []int{1, 1}) {
		t.Errorf("pdbUsed %v, want default/db: 1 alone", s.pdbUsed)
	}
}
