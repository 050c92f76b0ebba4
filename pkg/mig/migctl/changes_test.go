package migctl

import (
	"fmt"
	"slices"
	"testing"

	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/mig"
	"github.com/gpud/gpud/pkg/simnode"
)

// Each apply's changed GPUs are told with their layouts before and after,
// through the service's Changed hook as the agent wires it; an apply that
// changes nothing tells nothing, nor does one whose GPU waits for a reset.
func TestReportChanges(t *testing.T) {
	n := simnode.NewBuiltin("dgx-a100")
	var told []string
	svc, err := mig.NewService(mig.ServiceConfig{
		Lib: n, Applier: mig.NewApplier(n, nil, mig.WithResetter(n.ResetGPU)), Processes: discovery.ProcessReader{Lib: n},
		Changed: func(res mig.Result) {
			ReportChanges(res, func(uuid, from, to string) { told = append(told, fmt.Sprintf("%s: %s -> %s", uuid, from, to)) })
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	uuid := n.Device(0).UUID()
	f := mustLayouts(t)
	// Without resets the MIG mode change waits: nothing changed yet.
	waiting, err := mig.NewService(mig.ServiceConfig{Lib: n, Applier: mig.NewApplier(n, nil), Processes: discovery.ProcessReader{Lib: n},
		Changed: func(res mig.Result) {
			ReportChanges(res, func(uuid, from, to string) { t.Errorf("a pending GPU told: %s %s -> %s", uuid, from, to) })
		}})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := waiting.Apply(t.Context(), f, "two-3g", false); err != nil || len(res.Pending) != 1 {
		t.Fatalf("apply without resets: %v pending %v, want GPU 0 pending", err, res.Pending)
	}
	steps := []struct {
		layout string
		want   []string
	}{
		{"two-3g", []string{uuid + ": MIG disabled -> 3g.20gb×2"}},
		{"seven-1g", []string{uuid + ": 3g.20gb×2 -> 1g.5gb×7"}},
		{"seven-1g", nil},
	}
	for _, s := range steps {
		told = nil
		if _, err := svc.Apply(t.Context(), f, s.layout, false); err != nil {
			t.Fatalf("apply %s: %v", s.layout, err)
		}
		if !slices.Equal(told, s.want) {
			t.Errorf("apply %s told %q, want %q", s.layout, told, s.want)
		}
	}
}

func TestLayoutOf(t *testing.T) {
	in := []mig.Instance{{Profile: "3g.40gb"}, {Profile: "1g.10gb"}, {Profile: "3g.40gb"}}
	if got := layoutOf(true, in); got != "1g.10gb×1, 3g.40gb×2" {
		t.Errorf("layoutOf = %q", got)
	}
	if got := layoutOf(true, nil); got != "MIG enabled, no MIG devices" {
		t.Errorf("layoutOf(empty) = %q", got)
	}
	if got := layoutOf(false, in); got != "MIG disabled" {
		t.Errorf("layoutOf(disabled) = %q", got)
	}
}
