package queues

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpud/gpud/pkg/allocator/jobs"
)

var t0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func queue(name, parent string, mutate ...func(*Spec)) *Queue {
	q := &Queue{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: Spec{Parent: parent}}
	for _, m := range mutate {
		m(&q.Spec)
	}
	return q
}

func TestConvert(t *testing.T) {
	q := queue("team-a", "org", func(s *Spec) {
		s.Weight = IntWeight(3)
		s.Guaranteed = Resources{GPUMilli: 2000, CPUMilli: 4000}
		s.Limit = Resources{GPUMilli: 4000}
		s.ModelLimit = map[string]int64{"NVIDIA H100 80GB HBM3": 8000}
		s.Reservations = []Reservation{{Name: "demo", Nodes: []string{"node-1"}, Start: metav1.NewTime(t0), End: metav1.NewTime(t0.Add(time.Hour))}}
		s.Namespaces = []string{"team-a"}
	})
	got, rs, err := Convert(q)
	if err != nil {
		t.Fatal(err)
	}
	want := jobs.Queue{Name: "team-a", Parent: "org", Weight: 3, Quota: jobs.Quota{
		Guaranteed: jobs.Resources{GPUMilli: 2000, CPUMilli: 4000}, Limit: jobs.Resources{GPUMilli: 4000},
		ModelLimit: map[string]int64{"NVIDIA H100 80GB HBM3": 8000}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Convert() = %+v, want %+v", got, want)
	}
	wantRes := []jobs.Reservation{{Name: "team-a/demo", Queue: "team-a", Nodes: []string{"node-1"}, Start: t0.Unix(), End: t0.Add(time.Hour).Unix()}}
	if !reflect.DeepEqual(rs, wantRes) {
		t.Fatalf("reservations %+v, want %+v", rs, wantRes)
	}
}

func TestConvertRefusesNamingTheField(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Spec)
		field  string
	}{
		{"negative limit", func(s *Spec) { s.Limit.GPUMilli = -1 }, "spec.limit.gpuMilli"},
		{"limit too large", func(s *Spec) { s.Limit.CPUMilli = MaxResource + 1 }, "spec.limit.cpuMilli"},
		{"negative guarantee", func(s *Spec) { s.Guaranteed.MemoryMiB = -5 }, "spec.guaranteed.memoryMiB"},
		{"guarantee over limit", func(s *Spec) { s.Guaranteed.GPUMilli, s.Limit.GPUMilli = 3000, 2000 }, "spec.guaranteed.gpuMilli"},
		{"weight", func(s *Spec) { s.Weight = IntWeight(-1) }, "spec.weight"},
		{"own parent", func(s *Spec) { s.Parent = "q" }, "spec.parent"},
		{"negative model limit", func(s *Spec) { s.ModelLimit = map[string]int64{"A100": -1} }, "spec.modelLimit[A100]"},
		{"model guarantee over limit", func(s *Spec) {
			s.ModelGuaranteed, s.ModelLimit = map[string]int64{"A100": 2000}, map[string]int64{"A100": 1000}
		}, "spec.modelGuaranteed[A100]"},
		{"reservation ends before it starts", func(s *Spec) {
			s.Reservations = []Reservation{{Name: "r", Nodes: []string{"n"}, Start: metav1.NewTime(t0), End: metav1.NewTime(t0)}}
		}, "spec.reservations[0].end"},
		{"reservation without nodes", func(s *Spec) {
			s.Reservations = []Reservation{{Name: "r", Start: metav1.NewTime(t0), End: metav1.NewTime(t0.Add(time.Hour))}}
		}, "spec.reservations[0].nodes"},
		{"bad namespace", func(s *Spec) { s.Namespaces = []string{"Team_A"} }, "spec.namespaces[0]"},
		{"duplicate namespace", func(s *Spec) { s.Namespaces = []string{"a", "a"} }, "spec.namespaces[1]"},
		{"objective weight", func(s *Spec) { s.Objectives = &Objectives{Energy: DecimalWeight("1.2345")} }, "spec.objectives.energy"},
		{"negative objective weight", func(s *Spec) { s.Objectives = &Objectives{Cost: IntWeight(-1)} }, "spec.objectives.cost"},
		{"objective weights all 0", func(s *Spec) { s.Objectives = &Objectives{Util: IntWeight(0)} }, "spec.objectives"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Convert(queue("q", "", tc.mutate))
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.field+":") {
				t.Fatalf("Convert() = %v, want ErrInvalid naming %s", err, tc.field)
			}
		})
	}
}

func TestFromUnstructured(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "scheduling.gpud.io/v1alpha1", "kind": "Queue", "metadata": map[string]any{"name": "a"},
		"spec": map[string]any{"limit": map[string]any{"gpuMilli": int64(8000)}, "namespaces": []any{"team-a"},
			"reservations": []any{map[string]any{"name": "r", "nodes": []any{"n"}, "start": "2026-12-01T00:00:00Z", "end": "2026-12-01T01:00:00Z"}}},
	}}
	q, err := FromUnstructured(u)
	if err != nil {
		t.Fatal(err)
	}
	if q.Spec.Limit.GPUMilli != 8000 || q.Spec.Namespaces[0] != "team-a" || !q.Spec.Reservations[0].Start.Time.Equal(t0) {
		t.Fatalf("decoded %+v", q.Spec)
	}
	u.Object["spec"] = map[string]any{"limit": "lots"}
	if _, err := FromUnstructured(u); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a limit that is a string: %v, want ErrInvalid", err)
	}
}

// spec.objectives become the queue's weights, decimals as spec.weight
// takes them; without them the queue has none (the scheduler's
// --objectives).
func TestConvertObjectives(t *testing.T) {
	got, _, err := Convert(queue("green", "", func(s *Spec) {
		s.Objectives = &Objectives{Energy: IntWeight(2), Util: DecimalWeight("0.5"), Wait: DecimalWeight("0")}
	}))
	if err != nil {
		t.Fatal(err)
	}
	if want := (jobs.Objective{Util: 0.5, Energy: 2}); got.Objective == nil || !reflect.DeepEqual(*got.Objective, want) {
		t.Fatalf("objective %+v, want %+v", got.Objective, want)
	}
	if err := got.Objective.Validate(); err != nil {
		t.Fatalf("converted objective invalid: %v", err)
	}
	plain, _, err := Convert(queue("plain", ""))
	if err != nil || plain.Objective != nil {
		t.Fatalf("a queue without spec.objectives: %+v, %v; want no objective", plain.Objective, err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "scheduling.gpud.io/v1alpha1", "kind": "Queue", "metadata": map[string]any{"name": "a"},
		"spec": map[string]any{"objectives": map[string]any{"energy": int64(1), "cost": "0.25"}},
	}}
	q, err := FromUnstructured(u)
	if err != nil {
		t.Fatal(err)
	}
	if got, _, err := Convert(q); err != nil || got.Objective.Energy != 1 || got.Objective.Cost != 0.25 {
		t.Fatalf("decoded objectives %+v, %v; want energy 1, cost 0.25", got.Objective, err)
	}
}
