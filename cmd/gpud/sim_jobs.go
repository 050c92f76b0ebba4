package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/gpud/gpud/pkg/allocator"
	"github.com/gpud/gpud/pkg/allocator/jobs"
	"github.com/gpud/gpud/pkg/allocator/objective"
	"github.com/gpud/gpud/pkg/jobsim"
	"github.com/gpud/gpud/pkg/predict"
	"github.com/gpud/gpud/pkg/trace"
)

const simJobsUsage = `usage:
  gpud sim jobs     --nodes FILE --jobs FILE [--queues FILE] [--policies gpud,fifo,no-backfill] [--checkpoint-s 1800]
                    [--estimates user|none,learned,oracle,...] [--learn-quantile 0.8] [--learn-half-life 100] [--learn-min-jobs 3] [--learn-max-keys 2048]
                    [--gpu-failures RATE] [--failure-bursts 0] [--failure-seed 1] [--healing heal,manual] [--detect-s 60] [--manual-s 14400] [--repair-s 86400]
                    [--objectives "default;util=1,wait=1;energy=1"|FILE] [--gpu-models FILE]
  gpud sim jobs-gen --pods FILE --nodes FILE [--seed 42] [--jobs 20000] [--load 0.9] [--gang-fraction 0.05] [-o jobs.csv]

The job-trace format is documented in docs/job-trace.md.`

// runSimJobs implements `gpud sim jobs`: it replays a job trace once per
// policy and prints the reports side by side with ratios of the first
// policy to the others. args exclude "gpud sim jobs".
func runSimJobs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newSimFlagSet("gpud sim jobs", simJobsUsage, stderr)
	nodesPath := fs.String("nodes", "", "node CSV (openb_node_list_gpu_node.csv, optionally with topology columns)")
	jobsPath := fs.String("jobs", "", "job-trace CSV (docs/job-trace.md)")
	policies := fs.String("policies", strings.Join(jobsim.PolicyNames, ","), "policies to run, the first compared to the rest: "+strings.Join(jobsim.PolicyNames, ", "))
	ckpt := fs.Int64("checkpoint-s", 1800, "checkpoint interval of checkpointable jobs, seconds")
	buckets := fs.Int("buckets", 12, "points on the utilization timeline")
	perRack := fs.Int("nodes-per-rack", 16, "nodes per rack when the node file has no rack column")
	perZone := fs.Int("racks-per-zone", 8, "racks per zone when the node file has no zone column")
	queuesPath := fs.String("queues", "", "queue tree and reservations, YAML (docs/job-trace.md); default: the trace's queues with prod 40%, research 30%, dev 20%, batch 10% guaranteed")
	quiet := fs.Bool("q", false, "no progress on stderr")
	estimates := fs.String("estimates", jobsim.EstimateUser, "runtime estimates to compare, each a column: "+strings.Join(jobsim.EstimateNames, ", "))
	lq := fs.Float64("learn-quantile", jobsim.DefaultQuantile, "quantile of the learned runtime distribution used as a job's estimate")
	lhalf := fs.Float64("learn-half-life", predict.DefaultHalfLife, "jobs of a key after which a learned runtime counts half")
	lmin := fs.Float64("learn-min-jobs", predict.DefaultMinWeight, "recent jobs a key needs before it predicts (coarser keys answer until then)")
	lkeys := fs.Int("learn-max-keys", predict.DefaultMaxKeys, "keys the predictor keeps (least recently used evicted)")
	rate := fs.Float64("gpu-failures", 0, "GPU failures per GPU-day to inject (0: none), e.g. 0.001")
	bursts := fs.Float64("failure-bursts", 0, "fraction of failure events that fail every GPU of the node")
	fseed := fs.Uint64("failure-seed", 1, "seed of the failure process")
	healing := fs.String("healing", jobsim.HealingOn+","+jobsim.HealingManual, "with --gpu-failures, modes to compare: heal (restart after --detect-s), manual (hang until --manual-s)")
	detect := fs.Int64("detect-s", jobsim.DefaultDetectSeconds, "heal: seconds from a GPU failure to the restart of the jobs on it")
	manual := fs.Int64("manual-s", jobsim.DefaultManualSeconds, "manual: seconds a job on a failed GPU hangs, holding its GPUs, before a person restarts it")
	repair := fs.Int64("repair-s", jobsim.DefaultRepairSeconds, "seconds a failed GPU stays out")
	objectives := fs.String("objectives", "", "weight settings to sweep, one column each, ';'-separated term=weight lists over "+
		strings.Join(objective.Terms, ", ")+" (or default, today's policy = util=1,fair=1), or a file of them one per line")
	modelsPath := fs.String("gpu-models", "", "CSV of GPU models' busy_w, idle_w, off_w and price_per_gpu_hour overriding the built-in table")
	if err := parseOnlyFlags(fs, args); err != nil {
		return fmt.Errorf("sim jobs: %w", err)
	}
	if *nodesPath == "" || *jobsPath == "" {
		fs.Usage()
		return errors.New("sim jobs: --nodes and --jobs are required")
	}
	names, err := parsePolicies("--policies", *policies, func(n string) (string, error) {
		if _, ok := jobsim.Policies[n]; !ok {
			return "", fmt.Errorf("policy %q: want one of %s", n, strings.Join(append(slices.Clone(jobsim.PolicyNames), jobsim.MorePolicyNames...), ", "))
		}
		return n, nil
	})
	if err != nil {
		return fmt.Errorf("sim jobs: %w", err)
	}
	ests, err := parsePolicies("--estimates", *estimates, func(n string) (string, error) {
		if !slices.Contains(jobsim.EstimateNames, n) {
			return "", fmt.Errorf("estimates %q: want one of %s", n, strings.Join(jobsim.EstimateNames, ", "))
		}
		return n, nil
	})
	if err != nil {
		return fmt.Errorf("sim jobs: %w", err)
	}
	heals, err := parsePolicies("--healing", *healing, func(n string) (string, error) {
		if n != jobsim.HealingOn && n != jobsim.HealingManual {
			return "", fmt.Errorf("healing %q: want heal or manual", n)
		}
		return n, nil
	})
	if err != nil {
		return fmt.Errorf("sim jobs: %w", err)
	}
	if err := errors.Join(
		fractionFlag("--learn-quantile", *lq, 0.999),
		fractionFlag("--learn-half-life", *lhalf, predict.MaxHalfLife),
		fractionFlag("--learn-min-jobs", *lmin, 2*(*lhalf)),
		positiveFlag("--learn-max-keys", int64(*lkeys), predict.MaxMaxKeys),
		rangeFlag("--gpu-failures", *rate, jobsim.MaxFailureRate),
		rangeFlag("--failure-bursts", *bursts, 1),
		positiveFlag("--detect-s", *detect, jobsim.MaxDelaySeconds),
		positiveFlag("--manual-s", *manual, jobsim.MaxDelaySeconds),
		positiveFlag("--repair-s", *repair, jobsim.MaxDelaySeconds),
		positiveFlag("--checkpoint-s", *ckpt, jobsim.MaxCheckpointSeconds),
		positiveFlag("--buckets", int64(*buckets), jobsim.MaxBuckets),
		positiveFlag("--nodes-per-rack", int64(*perRack), trace.MaxRows),
		positiveFlag("--racks-per-zone", int64(*perZone), trace.MaxRows),
	); err != nil {
		return fmt.Errorf("sim jobs: %w", err)
	}
	settings, models, err := readObjectives(*objectives, *modelsPath)
	if err != nil {
		return fmt.Errorf("sim jobs: %w", err)
	}
	in, err := jobsim.LoadInput(*nodesPath, *jobsPath, *queuesPath, jobsim.NodeOptions{NodesPerRack: *perRack, RacksPerZone: *perZone})
	if err != nil {
		return fmt.Errorf("sim jobs: %w", err)
	}
	progress := stderr
	if *quiet {
		progress = nil
	}
	base := jobsim.ReplayOptions{CheckpointSeconds: *ckpt, Buckets: *buckets,
		Learn: jobsim.LearnOptions{Quantile: *lq, Predictor: predict.Options{HalfLife: *lhalf, MinWeight: *lmin, MaxKeys: *lkeys}},
		Failures: jobsim.FailureOptions{RatePerGPUDay: *rate, BurstFraction: *bursts, Seed: *fseed,
			DetectSeconds: *detect, ManualSeconds: *manual, RepairSeconds: *repair}}
	base.Models = models
	base.ObjectiveRows = *modelsPath != "" || slices.ContainsFunc(names, func(n string) bool { return slices.Contains(jobsim.MorePolicyNames, n) })
	variants := jobsim.Variants(base, names, ests, heals)
	if settings != nil {
		variants = jobsim.ObjectiveVariants(variants, settings)
	}
	reports, err := in.ReplayAll(ctx, variants, progress)
	if err != nil {
		return fmt.Errorf("sim jobs: %w", err)
	}
	fmt.Fprintf(stdout, "gpud sim jobs: %d jobs from %s on %d nodes (%d GPUs) from %s\n\n", len(in.Trace), *jobsPath, len(in.Nodes), jobsim.CapacityMilli(in.Nodes)/1000, *nodesPath)
	return jobsim.WriteReports(stdout, reports)
}

// readObjectives reads --objectives (a sweep, or a file of one when it
// has no '=' and is not "default") and --gpu-models (a CSV over the
// built-in table); nil settings when --objectives is empty.
func readObjectives(sweep, modelsPath string) ([]objective.Setting, map[string]jobs.ModelPower, error) {
	models := objective.DefaultModels()
	if modelsPath != "" {
		data, err := readSmallFile(modelsPath, objective.MaxInput)
		if err != nil {
			return nil, nil, fmt.Errorf("--gpu-models: %w", err)
		}
		if models, err = objective.ParseModels(data, modelsPath, models); err != nil {
			return nil, nil, fmt.Errorf("--gpu-models: %w", err)
		}
	}
	if sweep == "" {
		return nil, models, nil
	}
	src := sweep
	if !strings.Contains(sweep, "=") && strings.TrimSpace(sweep) != objective.Default {
		data, err := readSmallFile(sweep, objective.MaxInput)
		if err != nil {
			return nil, nil, fmt.Errorf("--objectives %q: not term=weight settings, and as a file: %w", sweep, err)
		}
		src = string(data)
	}
	settings, err := objective.ParseSweep(src)
	if err != nil {
		return nil, nil, fmt.Errorf("--objectives: %w", err)
	}
	return settings, models, nil
}

// readSmallFile reads path, refusing files over limit bytes.
func readSmallFile(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, limit)
	}
	return data, nil
}

// runSimJobsGen implements `gpud sim jobs-gen`: a seeded synthetic job
// trace derived from an openb pod list. args exclude "gpud sim jobs-gen".
func runSimJobsGen(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newSimFlagSet("gpud sim jobs-gen", simJobsUsage, stderr)
	podsPath := fs.String("pods", "", "openb pod list CSV the sizes and durations come from")
	nodesPath := fs.String("nodes", "", "node CSV whose GPU count the load is relative to")
	seed := fs.Uint64("seed", 42, "random seed")
	n := fs.Int("jobs", 20000, "number of jobs")
	load := fs.Float64("load", 0.9, "offered GPU load as a fraction of capacity")
	gang := fs.Float64("gang-fraction", 0.05, "fraction of jobs that are multi-pod gangs")
	out := fs.String("o", "-", "output file, - for stdout")
	if err := parseOnlyFlags(fs, args); err != nil {
		return fmt.Errorf("sim jobs-gen: %w", err)
	}
	if *podsPath == "" || *nodesPath == "" {
		fs.Usage()
		return errors.New("sim jobs-gen: --pods and --nodes are required")
	}
	if err := errors.Join(
		positiveFlag("--jobs", int64(*n), jobsim.MaxGenJobs),
		fractionFlag("--load", *load, jobsim.MaxLoad),
		fractionFlag("--gang-fraction", *gang, 1),
	); err != nil {
		return fmt.Errorf("sim jobs-gen: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sim jobs-gen: %w", err)
	}
	pods, err := trace.ReadPodsFile(*podsPath)
	if err != nil {
		return fmt.Errorf("sim jobs-gen: %w", err)
	}
	nodes, err := jobsim.ReadNodesFile(*nodesPath, jobsim.NodeOptions{})
	if err != nil {
		return fmt.Errorf("sim jobs-gen: %w", err)
	}
	js, err := jobsim.Generate(pods, jobsim.GenOptions{Seed: *seed, Jobs: *n, Load: *load, GangFraction: *gang,
		CapacityGPUs: int(jobsim.CapacityMilli(nodes) / allocator.MilliPerGPU)})
	if err != nil {
		return fmt.Errorf("sim jobs-gen: %w", err)
	}
	w := stdout
	if *out != "-" {
		f, err := os.Create(*out)
		if err != nil {
			return fmt.Errorf("sim jobs-gen: %w", err)
		}
		defer f.Close()
		w = f
	}
	if err := jobsim.WriteJobs(w, js); err != nil {
		return fmt.Errorf("sim jobs-gen: %w", err)
	}
	if f, ok := w.(*os.File); ok && f != os.Stdout {
		if err := f.Close(); err != nil {
			return fmt.Errorf("sim jobs-gen: %w", err)
		}
	}
	fmt.Fprintf(stderr, "sim jobs-gen: wrote %d jobs (seed %d, load %.2f)\n", len(js), *seed, *load)
	return nil
}

// newSimFlagSet is a `gpud sim` subcommand's flag set: errors and usage go
// to stderr.
func newSimFlagSet(name, usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, usage) }
	return fs
}

// positiveFlag checks 1 <= v <= hi.
func positiveFlag(name string, v, hi int64) error {
	if v < 1 || v > hi {
		return fmt.Errorf("%s %d: want 1..%d", name, v, hi)
	}
	return nil
}

// rangeFlag checks 0 <= v <= hi (NaN and infinities fail).
func rangeFlag(name string, v, hi float64) error {
	if !(v >= 0 && v <= hi) {
		return fmt.Errorf("%s %v: want a number in [0, %v]", name, v, hi)
	}
	return nil
}

// fractionFlag checks 0 < v <= hi (NaN and infinities fail).
func fractionFlag(name string, v, hi float64) error {
	if !(v > 0 && v <= hi) {
		return fmt.Errorf("%s %v: want a number in (0, %v]", name, v, hi)
	}
	return nil
}
