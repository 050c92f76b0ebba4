package simulate

import (
	"testing"

	"github.com/gpud/gpud/pkg/trace"
	"github.com/gpud/gpud/pkg/tracefamily"
)

// TestGpudBeatsFGDOnFamilies checks gpud against FGD on the workload
// families derived from openb_pod_list_default (pkg/tracefamily): fewer
// unallocated GPUs at 100% and 130% arrived. By default it runs two
// families with seed 42, a few seconds; GPUD_SIM_LONG=1 runs every family
// with seeds 42-51 (make fgd-families prints the same table). gpud's
// weights were chosen on seeds 60-69; 42-51 only report.
func TestGpudBeatsFGDOnFamilies(t *testing.T) {
	if testing.Short() {
		t.Skip("short: simulations")
	}
	names, n := []string{"gpuspec33-single", "multigpu20-8"}, 1
	if longRun {
		names, n = tracefamily.Names(), 10
	}
	nodes, base, _ := load(t, "openb_pod_list_default")
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			f, err := tracefamily.ByName(name)
			if err != nil {
				t.Fatal(err)
			}
			pods, err := f.Apply(nodes, base)
			if err != nil {
				t.Fatal(err)
			}
			checkBeatsFGD(t, "openb_pod_list_default+"+name, nodes, pods, seeds(n))
		})
	}
}

// checkBeatsFGD runs FGD and gpud and fails where gpud leaves as many or
// more GPUs unallocated at 100% or 130% arrived.
func checkBeatsFGD(t *testing.T, workload string, nodes []trace.Node, pods []trace.Pod, sd []uint64) {
	t.Helper()
	rows, _, err := RunOpenB(t.Context(), Config{Workload: workload, Nodes: nodes, Pods: pods,
		Policies: []string{"FGD", "gpud"}, Seeds: sd, Arrived: []int{90, 100, 130}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 6 {
		t.Fatalf("%d rows, want 6", len(rows))
	}
	for i := range 3 {
		fgd, gpud := rows[i], rows[i+3]
		t.Logf("%s @%d%%: FGD %.3f gpud %.3f (%+.3f)", workload, fgd.ArrivedPct, fgd.UnallocMean, gpud.UnallocMean, gpud.UnallocMean-fgd.UnallocMean)
		if fgd.ArrivedPct >= 100 && gpud.UnallocMean >= fgd.UnallocMean {
			t.Errorf("%s @%d%%: gpud leaves %.3f%% unallocated, FGD %.3f%%", workload, fgd.ArrivedPct, gpud.UnallocMean, fgd.UnallocMean)
		}
	}
}
