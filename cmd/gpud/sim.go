package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/gpud/gpud/pkg/allocator"
	"github.com/gpud/gpud/pkg/simulate"
	"github.com/gpud/gpud/pkg/trace"
	"github.com/gpud/gpud/pkg/tracefamily"
)

const simUsage = `usage:
  gpud sim openb  --nodes FILE --pods FILE [--policy NAME[,NAME...]] [--seeds 42-51] [--tune 1.3] [--family NAME|all] [-o csv] [--plot F.svg]
  gpud sim replay --nodes FILE --pods FILE [--policy NAME[,NAME...]] [--seed 42] [-o csv]
  gpud sim jobs     --nodes FILE --jobs FILE [--policies gpud,fifo,no-backfill]   (gang, queues, preemption, backfill)
  gpud sim jobs-gen --pods FILE --nodes FILE [--seed 42] [--jobs 20000] [-o jobs.csv]   (synthetic job trace; docs/job-trace.md)

policies: ` + "Random, DotProd, GpuClustering, GpuPacking, BestFit, FGD, gpud (default), or all"

// runSim implements `gpud sim ...`; args exclude "gpud sim".
func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, simUsage)
		return errors.New("sim: missing subcommand")
	}
	switch args[0] {
	case "openb":
		return runSimOpenB(ctx, args[1:], stdout, stderr)
	case "replay":
		return runSimReplay(ctx, args[1:], stdout, stderr)
	case "jobs":
		return runSimJobs(ctx, args[1:], stdout, stderr)
	case "jobs-gen":
		return runSimJobsGen(ctx, args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprintln(stdout, simUsage)
		return nil
	}
	fmt.Fprintln(stderr, simUsage)
	return fmt.Errorf("sim: unknown subcommand %q", args[0])
}

type simFlags struct {
	nodes, pods, policy, out string
	// podColumns are the pod list's columns load read.
	podColumns []string
}

func (f *simFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.nodes, "nodes", "", "node list CSV (openb_node_list_gpu_node.csv)")
	fs.StringVar(&f.pods, "pods", "", "pod list CSV (openb_pod_list_*.csv)")
	fs.StringVar(&f.policy, "policy", allocator.PolicyGpud, "policies, comma-separated, or \"all\"")
	fs.StringVar(&f.out, "o", "csv", "output format (csv)")
}

func loadSim(f *simFlags) ([]trace.Node, []trace.Pod, []string, error) {
	if f.nodes == "" || f.pods == "" {
		return nil, nil, nil, errors.New("sim: --nodes and --pods are required")
	}
	if f.out != "csv" {
		return nil, nil, nil, fmt.Errorf("sim: -o %q: only csv is supported", f.out)
	}
	policies := allocator.PolicyNames
	if f.policy != "all" {
		var err error
		policies, err = parsePolicies("--policy", f.policy, func(name string) (string, error) {
			p, err := allocator.NewPolicy(name, allocator.Workload{})
			if err != nil {
				return "", err
			}
			return p.Name(), nil
		})
		if err != nil {
			return nil, nil, nil, fmt.Errorf("sim: %w", err)
		}
	}
	nodes, err := trace.ReadNodesFile(f.nodes)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("sim: %w", err)
	}
	pods, cols, err := trace.ReadPodsFileColumns(f.pods)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("sim: %w", err)
	}
	f.podColumns = cols
	return nodes, pods, policies, nil
}

func runSimOpenB(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newSimFlagSet("gpud sim openb", simUsage, stderr)
	var f simFlags
	f.register(fs)
	seeds := fs.String("seeds", "42-51", "seeds: a range A-B or a list A,B,C")
	tune := fs.Float64("tune", 1.3, "total GPU request as a multiple of cluster GPU capacity")
	plot := fs.String("plot", "", "also write an SVG plot of unallocated GPU % to this file")
	quiet := fs.Bool("q", false, "no progress on stderr")
	published := fs.String("published", "", "published table CSV to print ours next to, on stderr")
	family := fs.String("family", "", "derive a workload family from the pod list (pkg/tracefamily), or all of them: "+strings.Join(tracefamily.Names(), ", ")+", all")
	if err := parseOnlyFlags(fs, args); err != nil {
		return fmt.Errorf("sim openb: %w", err)
	}
	seedList, err := parseSeeds(*seeds)
	if err != nil {
		return fmt.Errorf("sim openb: %w", err)
	}
	if !(*tune > 0 && *tune <= simulate.MaxTune) { // NaN fails both
		return fmt.Errorf("sim openb: --tune %v: want a number in (0, %d]", *tune, simulate.MaxTune)
	}
	// fams are the families to derive; nil runs the pod list as it is.
	var fams []tracefamily.Family
	switch *family {
	case "":
	case "all":
		fams = tracefamily.Families
	default:
		fam, err := tracefamily.ByName(*family)
		if err != nil {
			return fmt.Errorf("sim openb: --family: %w", err)
		}
		fams = []tracefamily.Family{fam}
	}
	nodes, pods, policies, err := loadSim(&f)
	if err != nil {
		return err
	}
	cfg := simulate.Config{
		Workload: trace.Workload(f.pods), Nodes: nodes, Pods: pods,
		Policies: policies, Seeds: seedList, Tune: *tune,
	}
	if !*quiet {
		cfg.Progress = stderr
		fmt.Fprintf(stderr, "sim openb: %s: read columns %s\n", f.pods, strings.Join(f.podColumns, ","))
	}
	runs := []simulate.Config{cfg}
	if fams != nil {
		runs = runs[:0]
		for _, fam := range fams {
			c := cfg
			if c.Pods, err = fam.Apply(nodes, pods); err != nil {
				return fmt.Errorf("sim openb: %w", err)
			}
			c.Workload += "+" + fam.Name
			runs = append(runs, c)
		}
	}
	var rows []simulate.Row
	for _, c := range runs {
		r, _, err := simulate.RunOpenB(ctx, c)
		switch {
		case errors.Is(err, simulate.ErrNoGPUPods):
			return fmt.Errorf("sim openb: %s: %w", f.pods, simulate.ErrNoGPUPods)
		case errors.Is(err, simulate.ErrNoGPUNodes):
			return fmt.Errorf("sim openb: %s: %w", f.nodes, simulate.ErrNoGPUNodes)
		case err != nil:
			return err
		}
		rows = append(rows, r...)
	}
	if err := simulate.WriteCSV(stdout, rows); err != nil {
		return err
	}
	if *published != "" {
		pub, err := simulate.ReadPublished(*published)
		if err != nil {
			return err
		}
		simulate.WriteComparison(stderr, rows, pub)
	}
	if *plot != "" {
		file, err := os.Create(*plot)
		if err != nil {
			return fmt.Errorf("sim openb: %w", err)
		}
		title := fmt.Sprintf("%s: unallocated GPU, %d seeds", cfg.Workload, len(seedList))
		if err := simulate.WriteSVG(file, title, rows); err != nil {
			file.Close()
			return err
		}
		if err := file.Close(); err != nil {
			return fmt.Errorf("sim openb: %w", err)
		}
	}
	return nil
}

func runSimReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newSimFlagSet("gpud sim replay", simUsage, stderr)
	var f simFlags
	f.register(fs)
	seed := fs.Uint64("seed", 42, "seed for tie-breaking and random policies")
	if err := parseOnlyFlags(fs, args); err != nil {
		return fmt.Errorf("sim replay: %w", err)
	}
	nodes, pods, policies, err := loadSim(&f)
	if err != nil {
		return err
	}
	var res []simulate.ReplayResult
	for _, p := range policies {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("sim replay: %w", err)
		}
		r, err := simulate.Replay(nodes, pods, p, *seed)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "sim replay %s: %s done\n", trace.Workload(f.pods), allocator.PolicyLabel(r.Policy))
		res = append(res, r)
	}
	return simulate.WriteReplayCSV(stdout, trace.Workload(f.pods), res)
}

// maxSeeds bounds the seeds of one `sim openb` run.
const maxSeeds = 10000

// parseSeeds accepts "42-51", "42,43,44" or "42": at most [maxSeeds] seeds.
func parseSeeds(s string) ([]uint64, error) {
	if a, b, ok := strings.Cut(s, "-"); ok {
		lo, err1 := strconv.ParseUint(a, 10, 64)
		hi, err2 := strconv.ParseUint(b, 10, 64)
		if err := errors.Join(err1, err2); err != nil || hi < lo {
			return nil, fmt.Errorf("--seeds %q: want A-B with A <= B", s)
		}
		if hi-lo >= maxSeeds {
			return nil, fmt.Errorf("--seeds %q: %d seeds, more than %d", s, hi-lo+1, maxSeeds)
		}
		var out []uint64
		for v := lo; v <= hi; v++ {
			out = append(out, v)
		}
		return out, nil
	}
	parts := strings.Split(s, ",")
	if len(parts) > maxSeeds {
		return nil, fmt.Errorf("--seeds: %d seeds, more than %d", len(parts), maxSeeds)
	}
	var out []uint64
	for _, part := range parts {
		v, err := strconv.ParseUint(strings.TrimSpace(part), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("--seeds %q: %w", s, err)
		}
		out = append(out, v)
	}
	return out, nil
}

// parsePolicies splits a comma-separated policy list, checking each name
// with canonical, which returns the policy's one spelling; an empty or
// repeated policy is an error naming flag.
func parsePolicies(flag, list string, canonical func(string) (string, error)) ([]string, error) {
	names := strings.Split(list, ",")
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		if strings.TrimSpace(n) == "" {
			return nil, fmt.Errorf("%s %q: empty policy name", flag, list)
		}
		c, err := canonical(n)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", flag, err)
		}
		if seen[c] {
			return nil, fmt.Errorf("%s %q: policy %q given twice", flag, list, n)
		}
		seen[c] = true
	}
	return names, nil
}
