package simulate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/gpud/gpud/pkg/allocator"
	"github.com/gpud/gpud/pkg/trace"
)

// DefaultArrived are the arrived-workload percentages the published table
// reports.
var DefaultArrived = []int{90, 100, 110, 120, 130}

// Config is one static (FGD protocol) experiment.
type Config struct {
	// Workload names the pod list in the output, e.g. "openb_pod_list_default".
	Workload string
	Nodes    []trace.Node
	Pods     []trace.Pod
	// Policies by name (see allocator.NewPolicy).
	Policies []string
	Seeds    []uint64
	// Tune is the target total GPU request as a multiple of the cluster's GPU
	// capacity; zero means 1.3.
	Tune float64
	// Arrived are the percentages reported; nil means DefaultArrived.
	Arrived []int
	// Parallel runs; zero means GOMAXPROCS.
	Parallel int
	// Progress, if not nil, receives one line per finished run.
	Progress io.Writer
}

// Point is the cluster after one arrival.
type Point struct {
	ArrivedMilli int64
	UsedMilli    int64
	FragMilli    float64
}

// Run is the outcome of one policy and seed.
type Run struct {
	Policy   string
	Seed     uint64
	CapMilli int64
	Points   []Point
	Failed   int
	// MultiGPUFailed counts the failed pods that asked for 2 or more GPUs.
	MultiGPUFailed int
	Elapsed        time.Duration
}

// Row is one line of the published table.
type Row struct {
	Workload       string
	Policy         string // label, e.g. "06-FGD"
	ArrivedPct     int
	NSeeds         int
	UnallocMean    float64
	UnallocMedian  float64
	UnallocSD      float64
	FragOfTotalPct float64
}

// Bounds on a static experiment, so a bad flag is an error instead of a
// run that never ends.
const (
	// MaxTune bounds [Config.Tune]; the published experiments use 1.3.
	MaxTune = 10
	// MaxArrivals bounds the pods one run places after tuning.
	MaxArrivals = 2_000_000
	// MaxPoints bounds the points all runs keep (one per arrival, 24
	// bytes each): policies × seeds × arrivals.
	MaxPoints = 50_000_000
)

// ErrNoGPUPods is matched by the error for a pod list where no pod asks for
// a GPU: such a workload can never reach a GPU demand to tune to.
var ErrNoGPUPods = errors.New("no pod asks for a GPU")

// ErrNoGPUNodes is matched by the error for a node list without a GPU.
var ErrNoGPUNodes = errors.New("no node has a GPU")

// RunOpenB runs every policy with every seed and aggregates the table rows
// (policies in the given order, then arrived ascending) and the raw runs.
func RunOpenB(ctx context.Context, cfg Config) ([]Row, []Run, error) {
	if err := cfg.validate(); err != nil {
		return nil, nil, fmt.Errorf("simulate: %w", err)
	}
	if cfg.Tune == 0 {
		cfg.Tune = 1.3
	}
	if cfg.Arrived == nil {
		cfg.Arrived = DefaultArrived
	}
	// The artifact sorts both lists by name before drawing from its seed.
	tn := slices.Clone(cfg.Nodes)
	slices.SortStableFunc(tn, func(a, b trace.Node) int { return cmp.Compare(a.Name, b.Name) })
	nodes := Nodes(tn)
	pods := slices.Clone(cfg.Pods)
	slices.SortStableFunc(pods, func(a, b trace.Pod) int { return cmp.Compare(a.Name, b.Name) })
	reqs := Requests(pods)
	tmpl, err := allocator.NewCluster(nodes)
	if err != nil {
		return nil, nil, fmt.Errorf("simulate: %w", err)
	}
	arrivals, err := checkTunable(reqs, tmpl.GPUCapacityMilli(), cfg.Tune)
	if err != nil {
		return nil, nil, fmt.Errorf("simulate: %s: %w", cfg.Workload, err)
	}
	if points := float64(len(cfg.Policies)*len(cfg.Seeds)) * arrivals; points > MaxPoints {
		return nil, nil, fmt.Errorf("simulate: %s: %d policies × %d seeds × about %.0f pods is more than %d points: use fewer seeds",
			cfg.Workload, len(cfg.Policies), len(cfg.Seeds), arrivals, MaxPoints)
	}
	work := tmpl.Workload(reqs)
	for _, p := range cfg.Policies {
		if _, err := allocator.NewPolicy(p, work); err != nil {
			return nil, nil, fmt.Errorf("simulate: %w", err)
		}
	}
	runs, err := runAll(ctx, cfg, func(policy string, seed uint64) (Run, error) {
		return runOne(nodes, reqs, work, policy, seed, cfg.Tune)
	})
	if err != nil {
		return nil, nil, fmt.Errorf("simulate: %w", err)
	}
	var rows []Row
	for p := range cfg.Policies {
		rows = append(rows, Aggregate(cfg.Workload, runs[p*len(cfg.Seeds):(p+1)*len(cfg.Seeds)], cfg.Arrived)...)
	}
	return rows, runs, nil
}

func (cfg *Config) validate() error {
	switch {
	case len(cfg.Nodes) == 0:
		return errors.New("no nodes")
	case len(cfg.Pods) == 0:
		return errors.New("no pods")
	case len(cfg.Policies) == 0:
		return errors.New("no policies")
	case len(cfg.Seeds) == 0:
		return errors.New("no seeds")
	case math.IsNaN(cfg.Tune) || cfg.Tune < 0 || cfg.Tune > MaxTune:
		return fmt.Errorf("tune %v: want a number in (0, %d]", cfg.Tune, MaxTune)
	}
	return nil
}

// checkTunable rejects a workload that [Resample] could never tune to
// tune × capMilli, or only with more than [MaxArrivals] pods; else it
// returns about how many pods tuning gives.
func checkTunable(reqs []allocator.Request, capMilli int64, tune float64) (float64, error) {
	var total int64
	for _, r := range reqs {
		total += r.TotalGPUMilli()
	}
	switch {
	case capMilli == 0:
		return 0, ErrNoGPUNodes
	case total == 0:
		return 0, ErrNoGPUPods
	}
	want := tune * float64(capMilli) / float64(total) * float64(len(reqs))
	if want > MaxArrivals {
		return 0, fmt.Errorf("tune %v asks for about %.0f pods, more than %d", tune, want, MaxArrivals)
	}
	return max(want, float64(len(reqs))), nil
}

// runAll calls run for every policy and seed of cfg on cfg.Parallel
// goroutines; runs are ordered by policy, then seed.
func runAll(ctx context.Context, cfg Config, run func(policy string, seed uint64) (Run, error)) ([]Run, error) {
	par := cfg.Parallel
	if par <= 0 {
		par = runtime.GOMAXPROCS(0)
	}
	type job struct{ policy, seed int }
	jobs := make(chan job)
	runs := make([]Run, len(cfg.Policies)*len(cfg.Seeds))
	errs := make([]error, len(runs))
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := 0
	for range par {
		wg.Go(func() {
			for j := range jobs {
				i := j.policy*len(cfg.Seeds) + j.seed
				runs[i], errs[i] = run(cfg.Policies[j.policy], cfg.Seeds[j.seed])
				if cfg.Progress != nil {
					mu.Lock()
					done++
					fmt.Fprintf(cfg.Progress, "sim %s: %s seed %d done in %v (%d/%d)\n", cfg.Workload,
						allocator.PolicyLabel(runs[i].Policy), runs[i].Seed, runs[i].Elapsed.Round(time.Millisecond), done, len(runs))
					mu.Unlock()
				}
			}
		})
	}
feed:
	for p := range cfg.Policies {
		for s := range cfg.Seeds {
			select {
			case jobs <- job{p, s}:
			case <-ctx.Done():
				break feed
			}
		}
	}
	close(jobs)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return runs, nil
}

func runOne(nodes []allocator.Node, reqs []allocator.Request, work allocator.Workload, policy string, seed uint64, tune float64) (Run, error) {
	start := time.Now()
	c, err := allocator.NewCluster(nodes)
	if err != nil {
		return Run{}, err
	}
	p, err := allocator.NewPolicy(policy, work)
	if err != nil {
		return Run{}, err
	}
	run := Run{Policy: p.Name(), Seed: seed, CapMilli: c.GPUCapacityMilli()}
	order, ranks := artifactStream(reqs, run.CapMilli, tune, seed, c.Len())
	// Random's own draws (and only those) come from a separate stream: the
	// artifact's RandomScore shares the global source with the scheduler's
	// goroutines, which no replay can follow.
	a := allocator.New(c, p, rand.New(rand.NewPCG(seed, 0x7135)))
	if err := a.SetTieOrder(ranks); err != nil {
		return Run{}, err
	}
	nodeFrag := make([]float64, c.Len())
	var frag float64
	for i := range nodeFrag {
		nodeFrag[i] = c.NodeFragMilli(&work, i)
		frag += nodeFrag[i]
	}
	run.Points = make([]Point, 0, len(order))
	var arrived int64
	for _, r := range order {
		arrived += r.TotalGPUMilli()
		d, err := a.Place(r)
		switch {
		case errors.Is(err, allocator.ErrNoFit):
			run.Failed++
			if r.NumGPU >= 2 {
				run.MultiGPUFailed++
			}
		case err != nil:
			return run, fmt.Errorf("%s seed %d: %w", policy, seed, err)
		default:
			f := c.NodeFragMilli(&work, d.Node)
			frag += f - nodeFrag[d.Node]
			nodeFrag[d.Node] = f
		}
		run.Points = append(run.Points, Point{ArrivedMilli: arrived, UsedMilli: c.AllocatedGPUMilli(), FragMilli: frag})
	}
	run.Elapsed = time.Since(start)
	return run, nil
}

// Aggregate turns runs of one policy into table rows, measuring as the FGD
// artifact's analysis does: at arrived X%, the mean allocation (rounded to
// 0.01%) over all arrivals whose arrived percentage rounds to X (±1 if none),
// unallocated = 100 − that; then mean, median and sample SD across seeds.
func Aggregate(workload string, runs []Run, arrived []int) []Row {
	var rows []Row
	if len(runs) == 0 {
		return nil
	}
	for _, x := range arrived {
		var unalloc, frag []float64
		for _, r := range runs {
			a, f, ok := atArrived(r, x)
			if ok {
				unalloc = append(unalloc, 100-a)
				frag = append(frag, f)
			}
		}
		if len(unalloc) == 0 {
			continue
		}
		rows = append(rows, Row{
			Workload: workload, Policy: allocator.PolicyLabel(runs[0].Policy), ArrivedPct: x, NSeeds: len(unalloc),
			UnallocMean: mean(unalloc), UnallocMedian: median(unalloc), UnallocSD: sd(unalloc), FragOfTotalPct: mean(frag),
		})
	}
	return rows
}

func atArrived(r Run, x int) (alloc, frag float64, ok bool) {
	for _, win := range []float64{0, 1} {
		var sa, sf float64
		n := 0
		for _, p := range r.Points {
			ar := math.RoundToEven(float64(p.ArrivedMilli) / float64(r.CapMilli) * 100)
			if math.Abs(ar-float64(x)) <= win {
				sa += math.Round(float64(p.UsedMilli)/float64(r.CapMilli)*100*100) / 100
				sf += p.FragMilli / float64(r.CapMilli) * 100
				n++
			}
		}
		if n > 0 {
			return math.Round(sa/float64(n)*100) / 100, sf / float64(n), true
		}
	}
	return 0, 0, false
}

func mean(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func sd(v []float64) float64 {
	if len(v) < 2 {
		return 0
	}
	m := mean(v)
	var s float64
	for _, x := range v {
		s += (x - m) * (x - m)
	}
	return math.Sqrt(s / float64(len(v)-1))
}
