package simulate

import (
	"bytes"
	"math"
	randv1 "math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpud/gpud/internal/openbdata"
	"github.com/gpud/gpud/pkg/allocator"
	"github.com/gpud/gpud/pkg/trace"
)

var dataDir = openbdata.Dir()

// longRun enables the full published table (all traces, 10 seeds); `make
// fgd-table` prints the same comparison.
var longRun = os.Getenv("GPUD_SIM_LONG") != ""

// skipReplaysUnderRace skips a test made of whole-trace replays in a -race
// build: they are single-threaded allocator code run by RunOpenB's worker
// pool, which TestGpudModelConstraints races; under the detector they
// took 5 of make test's minutes. make test runs them without -race.
func skipReplaysUnderRace(t *testing.T) {
	t.Helper()
	if raceDetector {
		t.Skip("whole-trace replays run without -race (make test runs this package again without it)")
	}
}

func load(t *testing.T, workload string) ([]trace.Node, []trace.Pod, map[PublishedKey]Row) {
	t.Helper()
	nodes, err := trace.ReadNodesFile(filepath.Join(dataDir, "openb_node_list_gpu_node.csv"))
	if err != nil {
		t.Skipf("trace data absent: %v", err)
	}
	pods, err := trace.ReadPodsFile(filepath.Join(dataDir, workload+".csv"))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ReadPublished(filepath.Join(dataDir, "fgd-published-unallocated.csv"))
	if err != nil {
		t.Fatal(err)
	}
	return nodes, pods, pub
}

func seeds(n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = 42 + uint64(i)
	}
	return out
}

// tolerance is how far (percentage points) each baseline's mean unallocated
// GPU may sit from the published table with seeds 42-51, at every published
// arrived point. The deterministic baselines replay the artifact's random
// stream (artifactStream): measured over all nine traces, DotProd,
// GpuClustering, GpuPacking and BestFit match to 0.001 (the table's
// rounding) and FGD to 0.066 (cpu250; 0.023 gpushare80, 0.003 cpu200,
// exact elsewhere). Random's placements draw from the artifact's global
// source concurrently with its scheduler, which cannot be replayed; its
// worst measured gap is 0.150 (gpushare80).
var tolerance = map[string]float64{
	"01-Random": 0.3, "02-DotProd": 0.005, "03-GpuClustering": 0.005,
	"04-GpuPacking": 0.005, "05-BestFit": 0.005, "06-FGD": 0.1,
}

func TestBaselinesMatchPublished(t *testing.T) {
	skipReplaysUnderRace(t)
	workloads := []string{"openb_pod_list_default"}
	policies := []string{"Random", "GpuClustering", "FGD"}
	if longRun {
		workloads = traces
		policies = allocator.PolicyNames[:6]
	} else if testing.Short() {
		t.Skip("short: 30 simulations")
	}
	for _, wl := range workloads {
		t.Run(wl, func(t *testing.T) {
			nodes, pods, pub := load(t, wl)
			rows, _, err := RunOpenB(t.Context(), Config{Workload: wl, Nodes: nodes, Pods: pods, Policies: policies, Seeds: seeds(10)})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				p, ok := pub[PublishedKey{r.Workload, r.Policy, r.ArrivedPct}]
				if !ok {
					t.Errorf("%s %s @%d%%: no published row", wl, r.Policy, r.ArrivedPct)
					continue
				}
				tol := tolerance[r.Policy]
				if d := math.Abs(r.UnallocMean - p.UnallocMean); d > tol {
					t.Errorf("%s %s @%d%%: unallocated %.3f, published %.3f (|diff| %.3f > %.3f)", wl, r.Policy, r.ArrivedPct, r.UnallocMean, p.UnallocMean, d, tol)
				}
			}
		})
	}
}

// traces are the pod lists with a published FGD row.
var traces = []string{"openb_pod_list_default", "openb_pod_list_cpu050", "openb_pod_list_cpu100", "openb_pod_list_cpu200",
	"openb_pod_list_cpu250", "openb_pod_list_gpushare40", "openb_pod_list_gpushare60", "openb_pod_list_gpushare80", "openb_pod_list_gpushare100"}

// TestGpudBeatsFGD checks gpud against FGD (ours, same protocol, same
// seeds) on every trace with a published row (GPUD_SIM_LONG=1: every pod
// list in the data directory) at every published arrived point: strictly fewer
// unallocated GPUs at 100-130% arrived, and never more at 90%, where both
// usually place everything (100 − 90 = 10% is then the floor for any
// policy). It also checks that gpud turns away no more multi-GPU pods than
// FGD, summed over the traces. The default run uses seeds 42-43;
// GPUD_SIM_LONG=1 uses 42-51 (make fgd-table prints the same table).
//
// Measured with seeds 42-51 (the artifact's random stream, so our FGD is
// the published FGD), gpud minus FGD (pp) at 90/100/110/120/130%:
//
//	default     −0.013 −0.573 −0.534 −0.509 −0.486
//	cpu050      +0.000 −0.798 −0.745 −0.717 −0.673
//	cpu100      +0.000 −0.586 −0.554 −0.532 −0.519
//	cpu200      +0.000 −0.954 −0.899 −0.847 −0.814
//	cpu250      +0.000 −1.732 −1.723 −1.715 −1.711
//	gpushare40  +0.000 −0.499 −0.466 −0.444 −0.434
//	gpushare60  +0.000 −0.421 −0.415 −0.413 −0.414
//	gpushare80  −0.388 −0.360 −0.347 −0.349 −0.346
//	gpushare100 −0.443 −0.422 −0.415 −0.412 −0.411
//
// and on the pod lists without a published row, at 90/100/130%:
//
//	cpu0        +0.000 −0.995 −0.880
//	cpu037      +0.000 −0.614 −0.496
//	cpu072      +0.000 −0.709 −0.616
//	cpu235      +0.000 −1.123 −1.043
//	cpu300      −0.656 −0.657 −0.652
//	gpushare20  +0.000 −0.627 −0.537
//
// Multi-GPU pods turned away over the nine traces: FGD 1797, gpud 1746.
func TestGpudBeatsFGD(t *testing.T) {
	skipReplaysUnderRace(t)
	if testing.Short() {
		t.Skip("short: 36 simulations")
	}
	n := 2
	if longRun {
		n = 10
	}
	multi := map[string]int{}
	list := traces
	if longRun {
		list = podLists(t)
	}
	for _, wl := range list {
		t.Run(wl, func(t *testing.T) {
			nodes, pods, _ := load(t, wl)
			rows, runs, err := RunOpenB(t.Context(), Config{Workload: wl, Nodes: nodes, Pods: pods, Policies: []string{"FGD", "gpud"}, Seeds: seeds(n)})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range runs {
				multi[r.Policy] += r.MultiGPUFailed
			}
			k := len(DefaultArrived)
			if len(rows) != 2*k {
				t.Fatalf("%d rows, want %d", len(rows), 2*k)
			}
			for i := range k {
				fgd, gpud := rows[i], rows[i+k]
				t.Logf("%s @%d%%: FGD %.3f gpud %.3f (%+.3f)", wl, fgd.ArrivedPct, fgd.UnallocMean, gpud.UnallocMean, gpud.UnallocMean-fgd.UnallocMean)
				worse := gpud.UnallocMean >= fgd.UnallocMean
				if fgd.ArrivedPct == 90 {
					worse = gpud.UnallocMean > fgd.UnallocMean
				}
				if worse {
					t.Errorf("%s @%d%%: gpud leaves %.3f%% unallocated, FGD %.3f%%", wl, fgd.ArrivedPct, gpud.UnallocMean, fgd.UnallocMean)
				}
			}
		})
	}
	t.Logf("multi-GPU pods turned away: FGD %d, gpud %d", multi[allocator.PolicyFGD], multi[allocator.PolicyGpud])
	if multi[allocator.PolicyGpud] > multi[allocator.PolicyFGD] {
		t.Errorf("gpud turned away %d multi-GPU pods, FGD %d", multi[allocator.PolicyGpud], multi[allocator.PolicyFGD])
	}
}

// podLists are the workloads of every openb_pod_list_*.csv in the data
// directory.
func podLists(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dataDir, "openb_pod_list_*.csv"))
	if err != nil || len(files) == 0 {
		t.Skipf("trace data absent: %v", err)
	}
	out := make([]string, len(files))
	for i, f := range files {
		out[i] = trace.Workload(f)
	}
	return out
}

func TestOutputs(t *testing.T) {
	rows := []Row{{Workload: "w", Policy: "06-FGD", ArrivedPct: 100, NSeeds: 2, UnallocMean: 4.5}, {Workload: "w", Policy: "06-FGD", ArrivedPct: 130, NSeeds: 2, UnallocMean: 4.2}}
	var buf bytes.Buffer
	if err := WriteCSV(&buf, rows); err != nil {
		t.Fatal(err)
	}
	if first, _, _ := strings.Cut(buf.String(), "\n"); first != "workload,policy,arrived_pct,n_seeds,unalloc_gpu_pct_mean,unalloc_gpu_pct_median,unalloc_gpu_pct_sd,frag_gpu_pct_of_total_mean" {
		t.Fatalf("header = %q", first)
	}
	buf.Reset()
	if err := WriteSVG(&buf, "t", rows); err != nil {
		t.Fatal(err)
	}
	if s := buf.String(); !strings.HasPrefix(s, "<svg") || !strings.Contains(s, "polyline") || !strings.Contains(s, "06-FGD") {
		t.Fatalf("svg = %.200s", s)
	}
}

func TestResampleHitsTarget(t *testing.T) {
	reqs := []allocator.Request{{NumGPU: 1}, {NumGPU: 1, GPUMilli: 500}, {CPUMilli: 1000}}
	out := Resample(reqs, 100_000, 1.3, randv1.New(randv1.NewSource(1)))
	var total int64
	for _, r := range out {
		total += r.TotalGPUMilli()
	}
	if total > 130_000 || total < 129_000 {
		t.Fatalf("resampled total = %d, want about 130000", total)
	}
}

func TestReplay(t *testing.T) {
	nodes := []trace.Node{{Name: "a", CPUMilli: 8000, MemoryMiB: 1024, NumGPU: 1, Model: "T4"}}
	pods := []trace.Pod{
		{Name: "p0", CPUMilli: 1000, NumGPU: 1, GPUMilli: 1000, CreationTime: 0, DeletionTime: 10},
		{Name: "p1", CPUMilli: 1000, NumGPU: 1, GPUMilli: 1000, CreationTime: 5, DeletionTime: 15},
		{Name: "p2", CPUMilli: 1000, NumGPU: 2, CreationTime: 6},
	}
	res, err := Replay(nodes, pods, "gpud", 1)
	if err != nil {
		t.Fatal(err)
	}
	if res.Placed != 2 || res.Unplaced != 1 || res.Delayed != 1 || res.MaxQueueDelaySec != 5 {
		t.Fatalf("Replay() = %+v", res)
	}
	if res.AllocGPUPctTimeAvg != 100 {
		t.Fatalf("time-averaged allocation = %v, want 100", res.AllocGPUPctTimeAvg)
	}
}

func TestWriteComparison(t *testing.T) {
	rows := []Row{
		{Workload: "w", Policy: "06-FGD", ArrivedPct: 100, UnallocMean: 4.5},
		{Workload: "w", Policy: "07-gpud", ArrivedPct: 100, UnallocMean: 4.0},
	}
	pub := map[PublishedKey]Row{{"w", "06-FGD", 100}: {UnallocMean: 4.4}}
	var buf bytes.Buffer
	WriteComparison(&buf, rows, pub)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("comparison:\n%s", buf.String())
	}
	if f := strings.Fields(lines[1]); f[4] != "4.400" || f[5] != "+0.100" || f[6] != "+0.000" {
		t.Fatalf("FGD line = %q", lines[1])
	}
	if f := strings.Fields(lines[2]); f[4] != "-" || f[6] != "-0.500" {
		t.Fatalf("gpud line = %q", lines[2])
	}
}
