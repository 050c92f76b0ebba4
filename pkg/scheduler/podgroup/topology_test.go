package podgroup

import (
	"errors"
	"strings"
	"testing"

	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gpud/gpud/pkg/scheduler/plan"
	"github.com/gpud/gpud/pkg/scheduler/podgroup/autogang"
)

const where = "PodGroup team-a/train"

func TestParseTopology(t *testing.T) {
	src := "annotation gpud.io/gang-topology on " + where
	tests := []struct {
		name    string
		ann     map[string]string
		want    plan.GangTopology
		wantErr string // substring; "" = no error
	}{
		{name: "none", ann: map[string]string{"other": "x"}},
		{name: "rack, required by default", ann: map[string]string{autogang.TopologyAnnotation: "rack"},
			want: plan.GangTopology{Level: "rack", Required: true, Source: src}},
		{name: "nvlink preferred", ann: map[string]string{autogang.TopologyAnnotation: "nvlink", autogang.TopologyModeAnnotation: "preferred"},
			want: plan.GangTopology{Level: "nvlink", Source: src}},
		{name: "node required", ann: map[string]string{autogang.TopologyAnnotation: "node", autogang.TopologyModeAnnotation: "required"},
			want: plan.GangTopology{Level: "node", Required: true, Source: src}},
		{name: "a label key", ann: map[string]string{autogang.TopologyAnnotation: "example.com/block"},
			want: plan.GangTopology{Level: "example.com/block", Required: true, Source: src}},
		{name: "not a level", ann: map[string]string{autogang.TopologyAnnotation: "the rack please"},
			wantErr: `PodGroup team-a/train: annotation gpud.io/gang-topology "the rack please" is not a topology level; want nvlink, node, rack, zone, or a node label key`},
		{name: "empty level", ann: map[string]string{autogang.TopologyAnnotation: ""}, wantErr: "is not a topology level"},
		{name: "bad mode", ann: map[string]string{autogang.TopologyAnnotation: "zone", autogang.TopologyModeAnnotation: "hard"},
			wantErr: `annotation gpud.io/gang-topology-mode "hard"; want required (the default) or preferred`},
		{name: "mode alone", ann: map[string]string{autogang.TopologyModeAnnotation: "preferred"},
			wantErr: "annotation gpud.io/gang-topology-mode is set without gpud.io/gang-topology"},
		{name: "long value cut", ann: map[string]string{autogang.TopologyAnnotation: strings.Repeat("x ", 1000)}, wantErr: `..." is not a topology level`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseTopology(tc.ann, where)
			if tc.wantErr != "" {
				if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseTopology() = %+v, %v; want an ErrInvalid containing %q", got, err, tc.wantErr)
				}
				if len(err.Error()) > 400 {
					t.Errorf("reason of %d bytes", len(err.Error()))
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseTopology() = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// TestGroupsCarryTopology: both PodGroup APIs carry a gang's topology:
// the annotations on either, and the in-tree PodGroup's
// spec.schedulingConstraints.topology (required, as Kubernetes defines
// it), which wins over annotations; bad values make the group invalid.
func TestGroupsCarryTopology(t *testing.T) {
	pg := pgWith(2, nil)
	pg.Annotations = map[string]string{autogang.TopologyAnnotation: "rack", autogang.TopologyModeAnnotation: "preferred"}
	g, err := ToGroup(pg)
	if err != nil || g.Topology != (plan.GangTopology{Level: "rack", Source: "annotation gpud.io/gang-topology on PodGroup team-a/train"}) {
		t.Fatalf("coscheduling PodGroup: %+v, %v", g, err)
	}
	pg.Annotations[autogang.TopologyModeAnnotation] = "soft"
	if g, err := ToGroup(pg); err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "gang-topology-mode") {
		t.Fatalf("bad mode: %+v, %v", g, err)
	}

	gang := schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 2}}
	in := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "w",
		Annotations: map[string]string{autogang.TopologyAnnotation: "zone", autogang.TopologyModeAnnotation: "preferred"}},
		Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: gang}}
	if g, err := FromInTree(in); err != nil || g.Topology.Level != "zone" || g.Topology.Required {
		t.Fatalf("in-tree PodGroup annotations: %+v, %v", g, err)
	}
	in.Spec.SchedulingConstraints = &schedulingv1beta1.PodGroupSchedulingConstraints{
		Topology: []schedulingv1beta1.TopologyConstraint{{Key: "topology.kubernetes.io/rack"}}}
	g, err = FromInTree(in)
	want := plan.GangTopology{Level: "topology.kubernetes.io/rack", Required: true,
		Source: "spec.schedulingConstraints.topology of scheduling.k8s.io PodGroup ml/w"}
	if err != nil || g.Topology != want {
		t.Fatalf("in-tree PodGroup constraint: %+v, %v; want %+v", g, err, want)
	}
	in.Spec.SchedulingConstraints.Topology[0].Key = "not a key"
	if g, err := FromInTree(in); err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "topology[0].key") {
		t.Fatalf("bad key: %+v, %v", g, err)
	}
	in.Spec.SchedulingConstraints.Topology = []schedulingv1beta1.TopologyConstraint{{Key: "a"}, {Key: "b"}}
	if g, err := FromInTree(in); err == nil || !strings.Contains(err.Error(), "at most one") {
		t.Fatalf("two constraints: %+v, %v", g, err)
	}
}

// FuzzParseTopology: any annotation values parse or are refused without
// panicking; an accepted level is one of TopologyLevels or a label key,
// and a refusal names the annotation, stays short, and wraps ErrInvalid.
func FuzzParseTopology(f *testing.F) {
	for _, s := range [][2]string{{"rack", ""}, {"nvlink", "preferred"}, {"example.com/x", "required"}, {"", "x"}, {"a b", "required"}, {"\x00", "\xff"}} {
		f.Add(s[0], s[1], true, true)
	}
	f.Fuzz(func(t *testing.T, level, mode string, hasLevel, hasMode bool) {
		ann := map[string]string{}
		if hasLevel {
			ann[autogang.TopologyAnnotation] = level
		}
		if hasMode {
			ann[autogang.TopologyModeAnnotation] = mode
		}
		got, err := ParseTopology(ann, where)
		if err != nil {
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "annotation gpud.io/gang-topology") || len(err.Error()) > 600 {
				t.Fatalf("refusal %q", err)
			}
			return
		}
		switch {
		case !hasLevel && !hasMode:
			if got != (plan.GangTopology{}) {
				t.Fatalf("no annotations: %+v", got)
			}
		case !isKnownLevel(got.Level) && len(validation.IsQualifiedName(got.Level)) > 0:
			t.Fatalf("accepted level %q", got.Level)
		case got.Required != (mode != "preferred" || !hasMode):
			t.Fatalf("mode %q (set %v): required %v", mode, hasMode, got.Required)
		}
	})
}

func isKnownLevel(s string) bool {
	for _, l := range TopologyLevels {
		if s == l {
			return true
		}
	}
	return false
}
