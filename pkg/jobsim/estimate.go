package jobsim

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/gpud/gpud/pkg/predict"
)

// Runtime-estimate sources a replay submits jobs with (`gpud sim jobs
// --estimates`).
const (
	// EstimateUser is the trace's estimate_s as given (0: unknown).
	EstimateUser = "user"
	// EstimateNone submits every job without an estimate.
	EstimateNone = "none"
	// EstimateLearned ignores estimate_s and submits every job with the
	// predictor's quantile (unknown until its keys have history).
	EstimateLearned = "learned"
	// EstimateUserLearned keeps estimate_s where given and the predictor's
	// quantile elsewhere: what the scheduler does with annotations.
	EstimateUserLearned = "user+learned"
	// EstimateOracle submits every job with its true runtime: the bound.
	EstimateOracle = "oracle"
)

// EstimateNames lists the estimate sources.
var EstimateNames = []string{EstimateUser, EstimateNone, EstimateLearned, EstimateUserLearned, EstimateOracle}

// DefaultQuantile is the predictor quantile learned estimates use: a
// conservative one, since backfill trusts a job to end by its estimate.
const DefaultQuantile = 0.8

// LearnOptions configure learned estimates.
type LearnOptions struct {
	// Quantile of the learned runtime distribution used as the estimate,
	// in (0, 1); 0 means DefaultQuantile.
	Quantile float64
	// Predictor configures pkg/predict (zero: its defaults).
	Predictor predict.Options
}

// learner submits jobs with an estimate from source and learns from the
// ones that finish.
type learner struct {
	source string
	q      float64
	p      *predict.Predictor
	errs   []float64 // |estimate - runtime| / runtime per job submitted (1 without an estimate)
	under  int       // estimates below the runtime
	n      int       // jobs with an estimate
}

func newLearner(source string, o LearnOptions) (*learner, error) {
	if source == "" {
		source = EstimateUser
	}
	if !slices.Contains(EstimateNames, source) {
		return nil, fmt.Errorf("estimates %q: want one of %s", source, strings.Join(EstimateNames, ", "))
	}
	l := &learner{source: source, q: o.Quantile}
	if l.q == 0 {
		l.q = DefaultQuantile
	}
	if !(l.q > 0 && l.q < 1) {
		return nil, fmt.Errorf("learned quantile %v: want a number in (0, 1)", l.q)
	}
	if source == EstimateLearned || source == EstimateUserLearned {
		p, err := predict.New(o.Predictor)
		if err != nil {
			return nil, err
		}
		l.p = p
	}
	return l, nil
}

// estimate is the estimate j is submitted with; it records the error.
func (l *learner) estimate(j *TraceJob) (int64, error) {
	est := j.EstimateSeconds
	switch l.source {
	case EstimateNone:
		est = 0
	case EstimateOracle:
		est = j.RuntimeSeconds
	case EstimateLearned, EstimateUserLearned:
		if l.source == EstimateLearned || est == 0 {
			pr, ok, err := l.p.Predict(predictKeys(j), l.q)
			if err != nil {
				return 0, err
			}
			est = 0
			if ok {
				est = pr.Seconds
			}
		}
	}
	l.errs = append(l.errs, math.Abs(float64(est-j.RuntimeSeconds))/float64(j.RuntimeSeconds))
	if est > 0 {
		l.n++
		if est < j.RuntimeSeconds {
			l.under++
		}
	}
	return est, nil
}

// finished teaches the predictor j's runtime.
func (l *learner) finished(j *TraceJob) error {
	if l.p == nil {
		return nil
	}
	return l.p.Observe(predictKeys(j), j.RuntimeSeconds)
}

// predictKeys describes a job by what a scheduler knows at submit time,
// most specific first: queue, priority and the exact request; queue and GPU
// shape; queue; the cluster.
func predictKeys(j *TraceJob) []string {
	p := j.Pod
	gpu := strconv.Itoa(p.NumGPU) + "x" + strconv.FormatInt(p.GPUMilli, 10)
	if p.MIG != "" {
		gpu = "mig:" + p.MIG
	}
	shape := "q=" + j.Queue + "|pods=" + strconv.Itoa(max(j.Pods, 1)) + "|gpu=" + gpu
	exact := shape + "|prio=" + strconv.Itoa(j.Priority) + "|cpu=" + strconv.FormatInt(p.CPUMilli, 10) +
		"|mem=" + strconv.FormatInt(p.MemoryMiB, 10) + "|gmem=" + strconv.FormatInt(p.GPUMemoryMiB, 10) +
		"|models=" + strings.Join(p.Models, ",") + "|topo=" + j.Topology.String()
	if len(exact) > predict.MaxKeyBytes {
		exact = exact[:predict.MaxKeyBytes]
	}
	if len(shape) > predict.MaxKeyBytes {
		shape = shape[:predict.MaxKeyBytes]
	}
	queue := "q=" + j.Queue
	if len(queue) > predict.MaxKeyBytes {
		queue = queue[:predict.MaxKeyBytes]
	}
	return []string{exact, shape, queue, "*"}
}

// EstimateStats is how good the estimates a replay submitted jobs with
// were.
type EstimateStats struct {
	Source string
	// Coverage is the fraction of submitted jobs that had an estimate.
	Coverage float64
	// MedianError and P90Error are quantiles of |estimate − runtime| /
	// runtime over the submitted jobs; a job without an estimate counts as
	// an estimate of 0 (error 1).
	MedianError, P90Error float64
	// Under is the fraction of the estimates given that were below the
	// runtime (such a job overruns what backfill counted on).
	Under float64
}

func (l *learner) stats() EstimateStats {
	st := EstimateStats{Source: l.source}
	if len(l.errs) > 0 {
		st.Coverage = float64(l.n) / float64(len(l.errs))
		st.MedianError, st.P90Error = quantile(l.errs, 0.5), quantile(l.errs, 0.9)
	}
	if l.n > 0 {
		st.Under = float64(l.under) / float64(l.n)
	}
	return st
}

// quantile is the nearest-rank q-quantile of xs.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(len(s)-1, max(0, int(math.Ceil(q*float64(len(s))))-1))]
}

// Healing modes `gpud sim jobs --healing` accepts: heal restarts the jobs on
// a failed GPU after FailureOptions.DetectSeconds, manual after
// ManualSeconds.
const (
	HealingOn     = "heal"
	HealingManual = "manual"
)

// Variants expands base into one replay per policy, estimate source and
// (with failures) healing mode, in that nesting order; each Policy field is
// the column label: the policy, then "/estimates" when more than one source
// is compared, then "/heal" or "/manual" when failures are injected.
func Variants(base ReplayOptions, policies, estimates, healing []string) []ReplayOptions {
	if len(estimates) == 0 {
		estimates = []string{base.Estimates}
	}
	if base.Failures.RatePerGPUDay == 0 || len(healing) == 0 {
		healing = []string{""}
	}
	var out []ReplayOptions
	for _, p := range policies {
		for _, e := range estimates {
			for _, h := range healing {
				o := base
				o.Policy, o.Options, o.Estimates = p, Policies[p], e
				if len(estimates) > 1 {
					o.Policy += "/" + e
				}
				if h != "" {
					o.Failures.Heal = h == HealingOn
					o.Policy += "/" + h
				}
				out = append(out, o)
			}
		}
	}
	return out
}
