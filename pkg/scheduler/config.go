package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/gpud/gpud/pkg/allocator"
	"github.com/gpud/gpud/pkg/allocator/jobs"
	"github.com/gpud/gpud/pkg/scheduler/heal"
	"github.com/gpud/gpud/pkg/scheduler/plan"
)

// Defaults of [Config] fields left zero.
const (
	DefaultSchedulerName = "gpud-scheduler"
	DefaultDebounce      = 50 * time.Millisecond
	DefaultResync        = 30 * time.Second
	DefaultMaxPending    = 5000
	DefaultWorkers       = 8
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// Upper bounds of [Config] fields.
const (
	MaxPendingLimit = 100000
	MaxWorkers      = 256
	// maxStatusWrites bounds the PodScheduled condition writes of one
	// cycle; the rest follow in the next cycles.
	maxStatusWrites = 500
)

// Config is what [New] needs. Zero values take the documented defaults.
type Config struct {
	// Client is the API client; required.
	Client kubernetes.Interface
	// InformerClient, if set, is the client the informers list and watch
	// through (cmd/gpud gives one whose reads wait out API-server outages:
	// internal/apiwait); default Client.
	InformerClient kubernetes.Interface
	// EventClient and LeaseClient, if set, write Events and renew the
	// leader lease under rate limits of their own, as kube-scheduler's
	// event and leader-election clients do: binds that use all of
	// Client's QPS then neither queue a lease renewal behind them nor
	// share their budget with one Event per placement. Default Client.
	EventClient kubernetes.Interface
	LeaseClient kubernetes.Interface
	// SchedulerName selects the pods (spec.schedulerName) this scheduler
	// places and is the events' reporting controller; default
	// [DefaultSchedulerName].
	SchedulerName string
	// Policy is the allocator policy (one of allocator.PolicyNames),
	// passed as Snapshot.Policy; default allocator.PolicyGpud.
	Policy string
	// Queues and Reservations are the queue tree (--queues), passed as is.
	Queues       []jobs.Queue
	Reservations []jobs.Reservation
	// QueueSet, if set, is called once per cycle for that cycle's queue
	// tree and reservations (instead of Queues and Reservations) and each
	// pod's queue: its leaf queue ("" for none), or why it may not use
	// the queue it names or its namespace is bound to (the pod then waits
	// with that reason, code CodeQueueRefused). Nil: a pod's queue is its
	// label plan.QueueLabel. pkg/scheduler/queues serves it from Queue
	// objects.
	QueueSet func() ([]jobs.Queue, []jobs.Reservation, func(*corev1.Pod) (string, error))
	// QueueStatus, if set, hears after each decision (the leader's) what
	// each queue holds (plan.QueueUsage) and how many pods wait in each.
	QueueStatus func(usage map[string]jobs.Resources, pending map[string]int)
	// Decider turns snapshots into plans; required.
	Decider plan.Decider
	// Groups, if set, returns the PodGroups by "namespace/name" (a copy
	// the scheduler may keep for a cycle); GroupsSynced, if set, reports
	// whether their informer has synced (cycles and readiness wait for
	// it). Nil: no PodGroups (pods of a group are then decided alone).
	Groups       func() map[string]*plan.Group
	GroupsSynced func() bool
	// AutoGroups, if set, is called once per cycle for that cycle's
	// grouping of the pods that name no PodGroup (workloads grouped by
	// their owners: podgroup/agwatch): a pod's gang key and group, "" and
	// nil for none. A PodGroup the pod names always wins. Nil: no
	// automatic gangs.
	AutoGroups func() func(*corev1.Pod) (string, *plan.Group)
	// Evict evicts a preemption victim; nil uses the policy/v1 Eviction
	// API through Client (the API server enforces PodDisruptionBudgets).
	Evict func(ctx context.Context, pod *corev1.Pod) error
	// LeaderElection, if set, makes only the holder of a Lease decide.
	LeaderElection *LeaderElection
	// Log receives decisions and errors; nil discards.
	Log *slog.Logger
	// Debounce is how long a cycle on informer events waits after the
	// event, so that a burst of events is decided together and an event
	// nobody waits on (a claim created ahead of its pod, a bind's own
	// updates) does not start a cycle the next pod would wait out. A new
	// pod of this scheduler, or a claim such a pod waits for, starts a
	// cycle at once (one pod arriving alone is not delayed). Default
	// [DefaultDebounce].
	Debounce time.Duration
	// Resync is the period of cycles without events; default
	// [DefaultResync].
	Resync time.Duration
	// MaxPending caps the pending pods passed to one decision (oldest
	// first); default [DefaultMaxPending], at most [MaxPendingLimit].
	MaxPending int
	// Workers is how many binds (a gang counts as one) and status writes
	// run at once; default [DefaultWorkers], at most [MaxWorkers].
	Workers int
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// Telemetry, if set, is the telemetry stream's server: each cycle
	// passes its nodes as Snapshot.Telemetry. Nil: decisions use the
	// ResourceSlices and claims alone.
	Telemetry TelemetrySource
	// TelemetryStaleIntervals is how many stream intervals old a node's
	// newest message may be before its telemetry is left out; default
	// [DefaultTelemetryStaleIntervals], 1 to 100.
	TelemetryStaleIntervals int
	// HealOff turns self-healing off: pods whose GPUs failed are then
	// left running. On (the default), each cycle evicts (or deletes)
	// the bound pods holding a device the telemetry reports unhealthy or
	// an untolerated NoExecute taint covers, gangs whole, as Heal tunes
	// it (pkg/scheduler/heal).
	HealOff bool
	Heal    heal.Config
	// Runtimes, if set, learns pods' runtimes (pkg/scheduler/learn): it
	// runs while this replica leads, hears every pod event, and gives the
	// pods without plan.RuntimeEstimateAnnotation their estimate (the
	// annotation wins). Nil: only the annotation estimates.
	Runtimes Runtimes
	// Usage, if set, learns the peak GPU memory of pods' workloads from
	// the telemetry (pkg/scheduler/learn): it runs while this replica
	// leads, hears every pod event and each cycle's memory attributed to
	// a pod's claim. With OvercommitLearned, the telemetry each cycle
	// decides on counts an attributed claim at the larger of its measured
	// use and its workload's learned peak, so that overcommit leaves room
	// for what the workload reaches rather than what it uses this
	// minute; claims of workloads without enough samples count as
	// measured.
	Usage             Usage
	OvercommitLearned bool
}

// Usage learns and predicts pods' peak GPU memory; see Config.Usage.
type Usage interface {
	// Run learns until ctx ends (the term as leader).
	Run(ctx context.Context) error
	// Handler hears the pod informer's events.
	Handler() cache.ResourceEventHandler
	// Record is one sample of the memory pod's claim uses on a device,
	// as of at (a sample seen again in a later cycle has the same at).
	Record(pod *corev1.Pod, bytes uint64, at time.Time)
	// PeakBytes is pod's learned peak, false when unknown.
	PeakBytes(pod *corev1.Pod) (uint64, bool)
}

// Runtimes learns and estimates pods' runtimes; see Config.Runtimes.
type Runtimes interface {
	// Run learns until ctx ends (the term as leader).
	Run(ctx context.Context) error
	// Handler hears the pod informer's events.
	Handler() cache.ResourceEventHandler
	// Estimate is pod's learned runtime, 0 when unknown.
	Estimate(pod *corev1.Pod) time.Duration
}

// LeaderElection configures the Lease. Zero durations take the client-go
// defaults ([DefaultLeaseDuration], [DefaultRenewDeadline],
// [DefaultRetryPeriod]).
type LeaderElection struct {
	// Namespace and Name locate the Lease; Name defaults to the
	// scheduler name. Namespace is required.
	Namespace, Name string
	// Identity names this replica in the Lease (hostname plus a UUID);
	// required.
	Identity                                  string
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// withDefaults returns c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.SchedulerName == "" {
		c.SchedulerName = DefaultSchedulerName
	}
	if c.Policy == "" {
		c.Policy = allocator.PolicyGpud
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Debounce == 0 {
		c.Debounce = DefaultDebounce
	}
	if c.Resync == 0 {
		c.Resync = DefaultResync
	}
	if c.MaxPending == 0 {
		c.MaxPending = DefaultMaxPending
	}
	if c.Workers == 0 {
		c.Workers = DefaultWorkers
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.TelemetryStaleIntervals == 0 {
		c.TelemetryStaleIntervals = DefaultTelemetryStaleIntervals
	}
	if le := c.LeaderElection; le != nil {
		cp := *le
		if cp.Name == "" {
			cp.Name = c.SchedulerName
		}
		if cp.LeaseDuration == 0 {
			cp.LeaseDuration = DefaultLeaseDuration
		}
		if cp.RenewDeadline == 0 {
			cp.RenewDeadline = DefaultRenewDeadline
		}
		if cp.RetryPeriod == 0 {
			cp.RetryPeriod = DefaultRetryPeriod
		}
		c.LeaderElection = &cp
	}
	return c
}

// Validate checks the config after defaults; every problem is reported,
// each matching [ErrConfig].
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrConfig))
	}
	if c.Client == nil {
		bad("Client is required")
	}
	if c.Decider == nil {
		bad("Decider is required")
	}
	if msgs := validation.IsDNS1123Subdomain(c.SchedulerName); len(msgs) > 0 {
		bad("scheduler name %q: %s", c.SchedulerName, strings.Join(msgs, "; "))
	}
	if !slices.Contains(allocator.PolicyNames, c.Policy) {
		bad("policy %q: want one of %s", c.Policy, strings.Join(allocator.PolicyNames, ", "))
	}
	if c.Debounce < 0 || c.Debounce > time.Minute {
		bad("debounce %s: want 0 to 1m", c.Debounce)
	}
	if c.Resync < 100*time.Millisecond || c.Resync > time.Hour {
		bad("resync %s: want 100ms to 1h", c.Resync)
	}
	if c.MaxPending < 1 || c.MaxPending > MaxPendingLimit {
		bad("max pending %d: want 1 to %d", c.MaxPending, MaxPendingLimit)
	}
	if c.Workers < 1 || c.Workers > MaxWorkers {
		bad("workers %d: want 1 to %d", c.Workers, MaxWorkers)
	}
	if c.TelemetryStaleIntervals < 1 || c.TelemetryStaleIntervals > 100 {
		bad("telemetry stale intervals %d: want 1 to 100", c.TelemetryStaleIntervals)
	}
	if !c.HealOff {
		if err := c.Heal.Validate(); err != nil {
			bad("%v", err)
		}
	}
	if le := c.LeaderElection; le != nil {
		if msgs := validation.IsDNS1123Label(le.Namespace); len(msgs) > 0 {
			bad("leader election namespace %q: %s", le.Namespace, strings.Join(msgs, "; "))
		}
		if msgs := validation.IsDNS1123Subdomain(le.Name); len(msgs) > 0 {
			bad("leader election lease name %q: %s", le.Name, strings.Join(msgs, "; "))
		}
		if le.Identity == "" {
			bad("leader election identity is required")
		}
		// client-go's own checks, reported here before anything starts.
		switch {
		case le.RetryPeriod <= 0 || le.RenewDeadline <= 0 || le.LeaseDuration <= 0:
			bad("lease durations must be positive")
		case le.LeaseDuration <= le.RenewDeadline:
			bad("lease duration %s must be greater than the renew deadline %s", le.LeaseDuration, le.RenewDeadline)
		case float64(le.RenewDeadline) <= 1.2*float64(le.RetryPeriod):
			bad("renew deadline %s must be greater than 1.2 times the retry period %s", le.RenewDeadline, le.RetryPeriod)
		}
	}
	return errors.Join(errs...)
}
