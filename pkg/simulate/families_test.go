package simulate

import (
	"testing"

	"github.com/gpud/gpud/pkg/trace"
	"github.com/gpud/gpud/pkg/tracefamily"
)

// TestGpudBeatsFGDOnFamilies checks gpud against FGD on the workload
// families derived from openb_pod_list_default (pkg/tracefamily): fewer
// unallocated GPUs at 100% and 130% arrived. By default it runs three
// families with seed 42, a few seconds; GPUD_SIM_LONG=1 runs every family
// with seeds 42-51 (make fgd-families prints the same table). gpud's
// weights were chosen on seeds 60-69; 42-51 only report.
//
// Measured with seeds 42-51, unallocated GPU % at 90/100/130% arrived, FGD
// and gpud (gpud minus FGD):
//
//	gpuspec05          10.380 5.326 5.140  10.927 4.222 4.133  (+0.547 −1.104 −1.007)
//	gpuspec15          11.929 5.977 5.779  11.840 4.190 4.093  (−0.089 −1.787 −1.686)
//	gpuspec33          13.760 5.490 5.298  13.209 4.211 4.089  (−0.551 −1.279 −1.209)
//	gpuspec33-single   14.976 6.308 5.982  14.110 5.060 4.089  (−0.866 −1.248 −1.893)
//	gpuspec15-sets     10.580 5.415 5.242  10.644 4.218 4.130  (+0.064 −1.197 −1.112)
//	gpuspec10-uniform  12.662 4.862 4.702  11.064 4.178 4.082  (−1.598 −0.684 −0.620)
//	multigpu10          9.998 4.167 4.035  10.070 3.611 3.521  (+0.072 −0.556 −0.514)
//	multigpu20          9.995 3.595 3.491  10.137 3.418 3.317  (+0.142 −0.177 −0.174)
//	multigpu20-8        9.963 3.109 3.031   9.963 2.744 2.676  (+0.000 −0.365 −0.355)
//	multigpu30-2       10.026 3.628 3.524  10.129 3.516 3.415  (+0.103 −0.112 −0.109)
//
// Before gpud measured fragmentation and pressure per GPU model (issue 15)
// it left, at 100% on seeds 60-69, 1.2 (gpuspec05) to 0.2
// (gpuspec33-single) points fewer than FGD, and 0.8 more on
// gpuspec10-uniform (seeds 60-64). At 90% gpud turns away a few pods FGD
// places: 8-GPU pods of 120 cores on the multi-GPU-heavy families (only
// the 39 G3 nodes hold them, and gpud fills G3 nodes earlier), and
// constrained pods on gpuspec05 and gpuspec15-sets.
func TestGpudBeatsFGDOnFamilies(t *testing.T) {
	skipReplaysUnderRace(t)
	if testing.Short() {
		t.Skip("short: simulations")
	}
	names, n := []string{"gpuspec10-uniform", "gpuspec33-single", "multigpu20-8"}, 1
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
