package podgroup

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	"github.com/gpud/gpud/pkg/scheduler/plan"
)

var created = metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))

func pgWith(minMember int32, timeout *int32) *PodGroup {
	return &PodGroup{
		TypeMeta:   metav1.TypeMeta{APIVersion: GroupVersion.String(), Kind: Kind},
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "train", CreationTimestamp: created},
		Spec:       Spec{MinMember: minMember, ScheduleTimeoutSeconds: timeout},
	}
}

func TestToGroup(t *testing.T) {
	tests := []struct {
		name    string
		pg      *PodGroup
		want    *plan.Group
		wantErr string // substring; "" = no error
	}{
		{name: "gang with timeout", pg: pgWith(4, ptr.To[int32](600)),
			want: &plan.Group{Namespace: "team-a", Name: "train", MinMember: 4, ScheduleTimeout: 10 * time.Minute, Created: created.Time}},
		{name: "no timeout", pg: pgWith(1, nil),
			want: &plan.Group{Namespace: "team-a", Name: "train", MinMember: 1, Created: created.Time}},
		{name: "zero timeout is none", pg: pgWith(2, ptr.To[int32](0)),
			want: &plan.Group{Namespace: "team-a", Name: "train", MinMember: 2, Created: created.Time}},
		{name: "upper bounds", pg: pgWith(MaxMinMember, ptr.To[int32](MaxTimeoutSeconds)),
			want: &plan.Group{Namespace: "team-a", Name: "train", MinMember: MaxMinMember, ScheduleTimeout: 24 * time.Hour, Created: created.Time}},
		{name: "minMember missing", pg: pgWith(0, nil), wantErr: "PodGroup team-a/train: spec.minMember 0 is outside 1..10000"},
		{name: "minMember negative", pg: pgWith(-3, nil), wantErr: "spec.minMember -3"},
		{name: "minMember too large", pg: pgWith(MaxMinMember+1, nil), wantErr: "spec.minMember 10001"},
		{name: "timeout negative", pg: pgWith(2, ptr.To[int32](-1)), wantErr: "spec.scheduleTimeoutSeconds -1 is outside 0..86400"},
		{name: "timeout too long", pg: pgWith(2, ptr.To[int32](MaxTimeoutSeconds+1)), wantErr: "spec.scheduleTimeoutSeconds 86401"},
		{name: "no namespace", pg: func() *PodGroup { p := pgWith(2, nil); p.Namespace = ""; return p }(), wantErr: "metadata.namespace"},
		{name: "nil", pg: nil, wantErr: "nil PodGroup"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ToGroup(tc.pg)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, ErrInvalid) {
					t.Fatalf("ToGroup() = %+v, %v; want an ErrInvalid containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ToGroup(): %v", err)
			}
			if !same(got, tc.want) {
				t.Fatalf("ToGroup() = %+v, want %+v", *got, *tc.want)
			}
		})
	}
}

// coschedulingPodGroup is a PodGroup as the dynamic client returns one
// that a coscheduling user wrote.
func coschedulingPodGroup() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "scheduling.x-k8s.io/v1alpha1",
		"kind":       "PodGroup",
		"metadata": map[string]any{
			"name": "nginx", "namespace": "default",
			"creationTimestamp": "2026-01-02T03:04:05Z", "resourceVersion": "7",
		},
		"spec": map[string]any{
			"minMember":              int64(3),
			"scheduleTimeoutSeconds": int64(10),
			"minResources":           map[string]any{"cpu": "3", "memory": "6Gi", "nvidia.com/gpu": int64(8)},
		},
		"status": map[string]any{
			"phase": "Running", "running": int64(3), "occupiedBy": "default/nginx",
			"scheduleStartTime": "2026-01-02T03:04:06Z",
		},
	}}
}

func TestFromUnstructured(t *testing.T) {
	pg, err := FromUnstructured(coschedulingPodGroup())
	if err != nil {
		t.Fatal(err)
	}
	if pg.Spec.MinMember != 3 || *pg.Spec.ScheduleTimeoutSeconds != 10 || pg.Status.Phase != PhaseRunning ||
		pg.Status.Running != 3 || pg.Status.OccupiedBy != "default/nginx" || pg.ResourceVersion != "7" {
		t.Fatalf("FromUnstructured() = %+v", pg)
	}
	if q := pg.Spec.MinResources[corev1.ResourceMemory]; q.Cmp(resource.MustParse("6Gi")) != 0 {
		t.Fatalf("minResources.memory = %s, want 6Gi", q.String())
	}
	if q := pg.Spec.MinResources["nvidia.com/gpu"]; q.Value() != 8 {
		t.Fatalf("minResources[nvidia.com/gpu] = %s, want 8", q.String())
	}
	if !pg.Status.ScheduleStartTime.Equal(&metav1.Time{Time: created.Add(time.Second)}) {
		t.Fatalf("scheduleStartTime = %v", pg.Status.ScheduleStartTime)
	}
	g, err := FromUnstructuredGroup(coschedulingPodGroup())
	if err != nil {
		t.Fatal(err)
	}
	want := plan.Group{Namespace: "default", Name: "nginx", MinMember: 3, ScheduleTimeout: 10 * time.Second, Created: created.Time}
	if !same(g, &want) {
		t.Fatalf("FromUnstructuredGroup() = %+v, want %+v", *g, want)
	}
}

func TestFromUnstructuredBad(t *testing.T) {
	tests := []struct {
		name    string
		change  func(o map[string]any)
		wantErr string
	}{
		{name: "wrong group", change: func(o map[string]any) { o["apiVersion"] = "scheduling.sigs.k8s.io/v1alpha1" },
			wantErr: `PodGroup default/nginx: apiVersion "scheduling.sigs.k8s.io/v1alpha1"`},
		{name: "wrong kind", change: func(o map[string]any) { o["kind"] = "Pod" }, wantErr: `kind "Pod"`},
		{name: "minMember over int32", change: func(o map[string]any) { o["spec"].(map[string]any)["minMember"] = int64(1) << 33 },
			wantErr: "spec.minMember 8589934592 does not fit in an int32"},
		{name: "timeout under int32", change: func(o map[string]any) {
			o["spec"].(map[string]any)["scheduleTimeoutSeconds"] = int64(-1) << 40
		}, wantErr: "spec.scheduleTimeoutSeconds"},
		{name: "minMember a string", change: func(o map[string]any) { o["spec"].(map[string]any)["minMember"] = "three" },
			wantErr: "PodGroup default/nginx: decode"},
		{name: "spec a list", change: func(o map[string]any) { o["spec"] = []any{int64(1)} }, wantErr: "decode"},
		{name: "bad quantity", change: func(o map[string]any) {
			o["spec"].(map[string]any)["minResources"] = map[string]any{"cpu": "lots"}
		}, wantErr: "decode"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			u := coschedulingPodGroup()
			tc.change(u.Object)
			pg, err := FromUnstructured(u)
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("FromUnstructured() = %+v, %v; want an ErrInvalid containing %q", pg, err, tc.wantErr)
			}
		})
	}
	if _, err := FromUnstructured(nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("FromUnstructured(nil) = %v, want ErrInvalid", err)
	}
}

func TestFromInTree(t *testing.T) {
	meta := metav1.ObjectMeta{Namespace: "ml", Name: "workers-0", CreationTimestamp: created}
	tests := []struct {
		name    string
		policy  schedulingv1beta1.PodGroupSchedulingPolicy
		want    int32
		wantErr string
	}{
		{name: "gang", policy: schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 4}}, want: 4},
		{name: "basic", policy: schedulingv1beta1.PodGroupSchedulingPolicy{Basic: &schedulingv1beta1.BasicSchedulingPolicy{}}, want: 1},
		{name: "gang zero", policy: schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{}},
			wantErr: "scheduling.k8s.io PodGroup ml/workers-0: spec.schedulingPolicy.gang.minCount 0"},
		{name: "gang too large", policy: schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: MaxMinMember + 1}},
			wantErr: "minCount 10001"},
		{name: "neither", wantErr: "neither basic nor gang"},
		{name: "both", policy: schedulingv1beta1.PodGroupSchedulingPolicy{Basic: &schedulingv1beta1.BasicSchedulingPolicy{},
			Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 2}}, wantErr: "both basic and gang"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, err := FromInTree(&schedulingv1beta1.PodGroup{ObjectMeta: meta, Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: tc.policy}})
			if tc.wantErr != "" {
				if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("FromInTree() = %+v, %v; want an ErrInvalid containing %q", g, err, tc.wantErr)
				}
				return
			}
			want := plan.Group{Namespace: "ml", Name: "workers-0", MinMember: tc.want, Created: created.Time}
			if err != nil || !same(g, &want) {
				t.Fatalf("FromInTree() = %+v, %v; want %+v", g, err, want)
			}
		})
	}
}

func TestKeyOf(t *testing.T) {
	pod := func(label string, group *string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}}
		if label != "" {
			p.Labels = map[string]string{plan.PodGroupLabel: label}
		}
		if group != nil {
			p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: group}
		}
		return p
	}
	tests := []struct {
		name string
		pod  *corev1.Pod
		want string
	}{
		{name: "none", pod: pod("", nil), want: ""},
		{name: "nil pod", pod: nil, want: ""},
		{name: "coscheduling label", pod: pod("train", nil), want: "ns/train"},
		{name: "schedulingGroup", pod: pod("", ptr.To("workers-0")), want: "ns/workers-0"},
		{name: "schedulingGroup wins", pod: pod("train", ptr.To("workers-0")), want: "ns/workers-0"},
		{name: "empty schedulingGroup falls back", pod: pod("train", ptr.To("")), want: "ns/train"},
		{name: "schedulingGroup without name", pod: func() *corev1.Pod {
			p := pod("", nil)
			p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{}
			return p
		}(), want: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := KeyOf(tc.pod); got != tc.want {
				t.Fatalf("KeyOf() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestDeepCopy(t *testing.T) {
	pg, err := FromUnstructured(coschedulingPodGroup())
	if err != nil {
		t.Fatal(err)
	}
	pg.Labels = map[string]string{"a": "b"}
	c := pg.DeepCopyObject().(*PodGroup)
	*c.Spec.ScheduleTimeoutSeconds = 99
	c.Spec.MinResources[corev1.ResourceCPU] = resource.MustParse("100")
	c.Labels["a"] = "changed"
	if *pg.Spec.ScheduleTimeoutSeconds != 10 || pg.Labels["a"] != "b" {
		t.Fatalf("DeepCopy shares memory with the original: %+v", pg)
	}
	if q := pg.Spec.MinResources[corev1.ResourceCPU]; q.Cmp(resource.MustParse("3")) != 0 {
		t.Fatalf("DeepCopy shares minResources: cpu %s", q.String())
	}
	l := &List{Items: []PodGroup{*pg}}
	lc := l.DeepCopyObject().(*List)
	lc.Items[0].Spec.MinMember = 42
	if l.Items[0].Spec.MinMember != 3 {
		t.Fatal("List.DeepCopy shares items")
	}
	if (*PodGroup)(nil).DeepCopy() != nil || (*List)(nil).DeepCopy() != nil {
		t.Fatal("DeepCopy(nil) != nil")
	}
}

// same compares groups with time.Time.Equal (a decoded time is Local).
func same(a, b *plan.Group) bool {
	if a == nil || b == nil {
		return a == b
	}
	x, y := *a, *b
	if !x.Created.Equal(y.Created) {
		return false
	}
	x.Created, y.Created = time.Time{}, time.Time{}
	return x == y
}
