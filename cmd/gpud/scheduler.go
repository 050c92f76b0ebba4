package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/gpud/gpud/internal/apiwait"
	"github.com/gpud/gpud/internal/httpserve"
	"github.com/gpud/gpud/internal/loglevel"
	"github.com/gpud/gpud/internal/printable"
	"github.com/gpud/gpud/internal/taskgroup"
	"github.com/gpud/gpud/pkg/allocator"
	"github.com/gpud/gpud/pkg/allocator/jobs"
	"github.com/gpud/gpud/pkg/jobsim"
	"github.com/gpud/gpud/pkg/predict"
	"github.com/gpud/gpud/pkg/scheduler"
	"github.com/gpud/gpud/pkg/scheduler/decide"
	"github.com/gpud/gpud/pkg/scheduler/heal"
	"github.com/gpud/gpud/pkg/scheduler/learn"
	"github.com/gpud/gpud/pkg/scheduler/plan"
	"github.com/gpud/gpud/pkg/scheduler/podgroup/agwatch"
	"github.com/gpud/gpud/pkg/scheduler/podgroup/pgwatch"
	schedqueues "github.com/gpud/gpud/pkg/scheduler/queues"
)

const schedulerUsage = `usage: gpud scheduler [flags]

A secondary Kubernetes scheduler for pods with spec.schedulerName
gpud-scheduler (--scheduler-name): it allocates their ResourceClaims on
gpud's devices (driver gpu.gpud.io) with pkg/allocator's policy and binds
them; gangs (PodGroups), queues (--queues), preemption and backfill.

Flags:`

// defaultLeaseNamespace is the Lease's namespace outside a pod (in a pod,
// POD_NAMESPACE from the downward API wins).
const defaultLeaseNamespace = "kube-system"

// schedulerOptions are the flags of `gpud scheduler`.
type schedulerOptions struct {
	kubeconfig     string
	schedulerName  string
	policy         string
	queues         string
	rackLabel      string
	autoGangs      bool
	metricsAddr    string
	leaderElect    bool
	profiling      bool
	leaseNamespace string
	leaseDuration  time.Duration
	renewDeadline  time.Duration
	retryPeriod    time.Duration
	resync         time.Duration
	qps            float64
	burst          int
	logLevel       string
	logFormat      string
	telemetry      schedulerTelemetryOptions
	heal           bool
	healAction     string
	healBackoff    time.Duration
	healBackoffMax time.Duration
	healHomeTTL    time.Duration
	learn          schedulerLearnOptions
	objectives     schedulerObjectiveOptions
	// podNamespace is POD_NAMESPACE, else defaultLeaseNamespace.
	podNamespace string
	// gangTopologyLabels is --gang-topology-labels, comma-separated.
	gangTopologyLabels string
}

// schedulerLearnOptions are the --learn-runtimes* flags.
type schedulerLearnOptions struct {
	on              bool
	configMap       string
	namespace       string
	persistInterval time.Duration
	quantile        float64
	minSamples      float64
	maxKeys         int
	// usage are the --learn-usage* flags.
	usage struct {
		on         bool
		configMap  string
		quantile   float64
		minSamples float64
		maxKeys    int
	}
}

func (o *schedulerLearnOptions) register(fs *flag.FlagSet) {
	fs.BoolVar(&o.on, "learn-runtimes", true, "learn the runtimes of this scheduler's succeeded pods (per namespace, queue, owner and request) and give pods without "+plan.RuntimeEstimateAnnotation+" a learned estimate for backfill and reservations; the annotation wins")
	fs.StringVar(&o.configMap, "learn-runtimes-configmap", learn.DefaultConfigMap, "ConfigMap the leader keeps the learned runtimes in (a new leader starts from it)")
	fs.StringVar(&o.namespace, "learn-runtimes-namespace", "", "namespace of --learn-runtimes-configmap; empty: the Lease's (--leader-elect-namespace), else the pod's namespace (POD_NAMESPACE), else "+defaultLeaseNamespace)
	fs.DurationVar(&o.persistInterval, "learn-runtimes-persist-interval", learn.DefaultPersistInterval, "least time between two writes of the learned runtimes (also written when the leader stops); 1s to 1h")
	fs.Float64Var(&o.quantile, "learn-runtimes-quantile", learn.DefaultQuantile, "quantile of a workload's learned runtimes used as its estimate, in (0, 1): high, since backfill trusts a pod to end by it")
	fs.Float64Var(&o.minSamples, "learn-runtimes-min-samples", learn.DefaultMinSamples, "recent succeeded pods a workload key needs before it gives estimates (coarser keys, down to the namespace and queue, answer until then)")
	fs.IntVar(&o.maxKeys, "learn-runtimes-max-keys", predict.DefaultMaxKeys, "workload keys kept (the least recently used dropped); the ConfigMap must stay under 1 MiB")
	fs.BoolVar(&o.usage.on, "learn-usage", true, "with --telemetry-addr: learn the peak GPU memory of this scheduler's pods per workload (the keys of --learn-runtimes, without the queue-only one) from the stream; with --overcommit, a claim then counts at the larger of its measured use and its workload's learned peak (--learn-usage-quantile) once the workload has --learn-usage-min-samples pods")
	fs.StringVar(&o.usage.configMap, "learn-usage-configmap", learn.DefaultUsageConfigMap, "ConfigMap the leader keeps the learned GPU memory peaks in, in --learn-runtimes-namespace's namespace and written as often as --learn-runtimes-persist-interval says")
	fs.Float64Var(&o.usage.quantile, "learn-usage-quantile", learn.DefaultUsageQuantile, "quantile of a workload's learned peak GPU memory that --overcommit counts, in (0, 1): high, since a tenant that runs out of memory fails")
	fs.Float64Var(&o.usage.minSamples, "learn-usage-min-samples", learn.DefaultMinSamples, "recent pods a workload key needs before its learned peak counts (until then, the measured use)")
	fs.IntVar(&o.usage.maxKeys, "learn-usage-max-keys", predict.DefaultMaxKeys, "workload keys of learned usage kept (the least recently used dropped); the ConfigMap must stay under 1 MiB")
}

// learnConfig is the learner's config from the flags (Client and Log set
// by the caller). --learn-runtimes-namespace defaults to the Lease's
// namespace with leader election, else the pod's.
func learnConfig(o *schedulerOptions) learn.Config {
	ns := o.podNamespace
	if o.leaderElect {
		ns = o.leaseNamespace
	}
	l := o.learn
	return learn.Config{Namespace: cmp.Or(l.namespace, ns), Name: l.configMap, SchedulerName: o.schedulerName, PersistInterval: l.persistInterval,
		Quantile: l.quantile, MinSamples: l.minSamples, MaxKeys: l.maxKeys}
}

// usageConfig is the usage learner's config from the flags (Client and
// Log set by the caller): the runtimes' namespace and persist interval.
func usageConfig(o *schedulerOptions) learn.Config {
	c := learnConfig(o)
	u := o.learn.usage
	c.Name, c.Quantile, c.MinSamples, c.MaxKeys = u.configMap, u.quantile, u.minSamples, u.maxKeys
	return c
}

// learnUsage reports whether the usage learner runs: --learn-usage with a
// telemetry stream to learn from.
func learnUsage(o *schedulerOptions) bool { return o.learn.usage.on && o.telemetry.addr != "" }

func (o *schedulerOptions) register(fs *flag.FlagSet, podNamespace string) {
	ns := defaultLeaseNamespace
	if podNamespace != "" {
		ns = podNamespace
	}
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the scheduler's identity; empty uses the in-cluster config (the pod's service account)")
	fs.StringVar(&o.schedulerName, "scheduler-name", scheduler.DefaultSchedulerName, "the spec.schedulerName of the pods this scheduler places (and the Events' reporting controller)")
	fs.StringVar(&o.policy, "policy", allocator.PolicyGpud, "allocator policy choosing node and GPUs: "+strings.Join(allocator.PolicyNames, ", "))
	fs.StringVar(&o.queues, "queues", "", "queue tree and reservations, YAML (the format of gpud sim jobs --queues, docs/job-trace.md); a pod names its leaf queue with the label "+plan.QueueLabel+"; empty: one queue, no limits")
	fs.StringVar(&o.rackLabel, "rack-label", decide.DefaultRackLabel, "node label naming a node's rack, for gang topology (after the NVLink domain, before topology.kubernetes.io/zone)")
	fs.StringVar(&o.gangTopologyLabels, "gang-topology-labels", "", "comma-separated node labels a gang may name as its topology level (annotation gpud.io/gang-topology), besides nvlink, node, rack and zone; empty: only those")
	fs.BoolVar(&o.autoGangs, "auto-gangs", true, "group the pods of Indexed Jobs, JobSets, LeaderWorkerSets, Kubeflow training jobs and RayClusters into gangs by their owners when no PodGroup names them (README: Gangs without PodGroups); false: only PodGroups make gangs")
	fs.StringVar(&o.metricsAddr, "metrics-addr", ":9402", "address of the HTTP server: Prometheus /metrics, /healthz, /readyz (ready when the informers synced and this replica leads)")
	fs.BoolVar(&o.profiling, "profiling", false, "also serve Go's profiles (/debug/pprof/: CPU, heap, goroutines) on --metrics-addr, as kube-scheduler's --profiling does; off by default: the port has no authentication")
	fs.BoolVar(&o.leaderElect, "leader-elect", true, "elect a leader through a coordination.k8s.io Lease, so that of several replicas only one decides")
	fs.StringVar(&o.leaseNamespace, "leader-elect-namespace", ns, "namespace of the Lease (named after --scheduler-name); default: the pod's namespace (POD_NAMESPACE), else "+defaultLeaseNamespace)
	fs.DurationVar(&o.leaseDuration, "leader-elect-lease-duration", scheduler.DefaultLeaseDuration, "how long a lease holds without renewal: a replica waits this long before taking over from a leader that stopped")
	fs.DurationVar(&o.renewDeadline, "leader-elect-renew-deadline", scheduler.DefaultRenewDeadline, "how long the leader keeps trying to renew before it gives up leading (and exits); less than the lease duration")
	fs.DurationVar(&o.retryPeriod, "leader-elect-retry-period", scheduler.DefaultRetryPeriod, "how often replicas try to acquire or renew the lease")
	fs.DurationVar(&o.resync, "resync-period", scheduler.DefaultResync, "period of decision cycles without API events (pending pods are also decided on every relevant change)")
	fs.Float64Var(&o.qps, "kube-api-qps", 200, "API requests per second the scheduler may send (claim writes and Bindings come in bursts; client-go's default 5 would throttle a cycle of a few hundred pods for a minute); Events and the leader lease have a budget of this size each, as kube-scheduler's clients do")
	fs.IntVar(&o.burst, "kube-api-burst", 400, "API requests the scheduler may send at once above --kube-api-qps")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	fs.BoolVar(&o.heal, "heal", true, "self-healing: evict the running pods whose GPU failed (reported unhealthy on the telemetry stream, or under an untolerated NoExecute device taint), a gang's members all together, checkpointable pods first; pods annotated "+heal.Annotation+"=keep are left alone")
	fs.StringVar(&o.healAction, "heal-action", string(heal.Evict), "what healing does to a pod without the "+heal.Annotation+" annotation: evict (Eviction API: PodDisruptionBudgets hold) or delete")
	fs.DurationVar(&o.healBackoff, "heal-backoff", heal.DefaultBackoffBase, "least time between two healings of one workload (gang, controller or pod), doubled for each further healing, so that a workload failing on every GPU is not evicted in a loop")
	fs.DurationVar(&o.healBackoffMax, "heal-backoff-max", heal.DefaultBackoffMax, "most time --heal-backoff doubles to (at most 24h); a workload quiet for twice this starts over")
	fs.DurationVar(&o.healHomeTTL, "heal-home-ttl", heal.DefaultHomeTTL, "how long a healed gang's nodes are remembered, so that its new pods go back to their NVLink domain or rack first (0: the default; at most 1h)")
	o.telemetry.register(fs)
	o.learn.register(fs)
	o.objectives.register(fs)
	o.podNamespace = ns
}

// healConfig is the healer's config from the flags.
func healConfig(o *schedulerOptions) heal.Config {
	return heal.Config{Default: heal.Action(o.healAction), BackoffBase: o.healBackoff, BackoffMax: o.healBackoffMax, HomeTTL: o.healHomeTTL}
}

// validate checks every flag without contacting the API server; it returns
// the parsed queue file.
func (o *schedulerOptions) validate() ([]jobs.Queue, []jobs.Reservation, []error) {
	var errs []error
	if msgs := validation.IsDNS1123Subdomain(o.schedulerName); len(msgs) > 0 {
		errs = append(errs, flagErr("scheduler-name", "%s: %s", printable.Quote(o.schedulerName), strings.Join(msgs, "; ")))
	}
	if !slices.Contains(allocator.PolicyNames, o.policy) {
		errs = append(errs, flagErr("policy", "%s: want one of %s", printable.Quote(o.policy), strings.Join(allocator.PolicyNames, ", ")))
	}
	var queues []jobs.Queue
	var res []jobs.Reservation
	if o.queues != "" {
		var err error
		if queues, res, err = jobsim.ReadQueueFile(o.queues); err != nil {
			errs = append(errs, flagErr("queues", "%w", err))
		}
	}
	if msgs := validation.IsQualifiedName(o.rackLabel); len(msgs) > 0 {
		errs = append(errs, flagErr("rack-label", "%s: not a label key: %s", printable.Quote(o.rackLabel), strings.Join(msgs, "; ")))
	}
	if _, err := splitLabels(o.gangTopologyLabels); err != nil {
		errs = append(errs, flagErr("gang-topology-labels", "%w", err))
	}
	if o.metricsAddr == "" {
		errs = append(errs, flagErr("metrics-addr", "empty: the probes need it; want host:port (:9402)"))
	} else if err := validateAddr("metrics-addr", o.metricsAddr); err != nil {
		errs = append(errs, err)
	}
	if o.leaderElect {
		if msgs := validation.IsDNS1123Label(o.leaseNamespace); len(msgs) > 0 {
			errs = append(errs, flagErr("leader-elect-namespace", "%s: not a namespace name: %s", printable.Quote(o.leaseNamespace), strings.Join(msgs, "; ")))
		}
		switch {
		case o.leaseDuration <= 0 || o.renewDeadline <= 0 || o.retryPeriod <= 0:
			errs = append(errs, flagErr("leader-elect-lease-duration", "%s, renew deadline %s, retry period %s: all must be positive", o.leaseDuration, o.renewDeadline, o.retryPeriod))
		case o.leaseDuration <= o.renewDeadline:
			errs = append(errs, flagErr("leader-elect-renew-deadline", "%s: must be less than --leader-elect-lease-duration %s", o.renewDeadline, o.leaseDuration))
		case float64(o.renewDeadline) <= 1.2*float64(o.retryPeriod):
			errs = append(errs, flagErr("leader-elect-retry-period", "%s: --leader-elect-renew-deadline %s must be more than 1.2 times it", o.retryPeriod, o.renewDeadline))
		case o.leaseDuration > time.Hour:
			errs = append(errs, flagErr("leader-elect-lease-duration", "%s: at most 1h", o.leaseDuration))
		}
	}
	if o.resync < 100*time.Millisecond || o.resync > time.Hour {
		errs = append(errs, flagErr("resync-period", "%s: want 100ms to 1h", o.resync))
	}
	if !(o.qps >= 1 && o.qps <= 100000) { // NaN fails too
		errs = append(errs, flagErr("kube-api-qps", "%g: want 1 to 100000", o.qps))
	}
	if o.burst < 1 || o.burst > 100000 {
		errs = append(errs, flagErr("kube-api-burst", "%d: want 1 to 100000", o.burst))
	}
	if _, err := newLogger(io.Discard, o.logFormat, o.logLevel); err != nil {
		errs = append(errs, err)
	}
	if o.kubeconfig != "" {
		if _, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig); err != nil {
			errs = append(errs, flagErr("kubeconfig", "%w", err))
		}
	}
	if o.heal {
		if err := heal.Action(o.healAction).Validate(); err != nil {
			errs = append(errs, flagErr("heal-action", "%w", err))
		} else if o.healHomeTTL < 0 || o.healHomeTTL > time.Hour {
			errs = append(errs, flagErr("heal-home-ttl", "%s: want 0 (the default, %s) to 1h", o.healHomeTTL, heal.DefaultHomeTTL))
		} else if err := healConfig(o).Validate(); err != nil {
			errs = append(errs, flagErr("heal-backoff", "%s, --heal-backoff-max %s: %w", o.healBackoff, o.healBackoffMax, err))
		}
	}
	errs = append(errs, o.telemetry.validate()...)
	errs = append(errs, o.objectives.validate()...)
	if o.learn.on {
		if err := learnConfig(o).Validate(); err != nil {
			errs = append(errs, flagErr("learn-runtimes", "%w", err))
		}
	}
	if learnUsage(o) {
		if err := usageConfig(o).ForUsage().Validate(); err != nil {
			errs = append(errs, flagErr("learn-usage", "%w", err))
		}
	}
	return queues, res, errs
}

// parseSchedulerFlags parses and validates `gpud scheduler` flags;
// podNamespace is POD_NAMESPACE.
func parseSchedulerFlags(args []string, podNamespace string, stderr io.Writer) (*schedulerOptions, []jobs.Queue, []jobs.Reservation, error) {
	fs := flag.NewFlagSet("gpud scheduler", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &schedulerOptions{}
	o.register(fs, podNamespace)
	fs.Usage = func() {
		fmt.Fprintln(stderr, schedulerUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, nil, nil, err
	}
	if fs.NArg() > 0 {
		return nil, nil, nil, fmt.Errorf("scheduler: unexpected argument %s (flags only)", printable.Quote(fs.Arg(0)))
	}
	queues, res, errs := o.validate()
	if err := errors.Join(errs...); err != nil {
		return nil, nil, nil, fmt.Errorf("scheduler: %w", err)
	}
	return o, queues, res, nil
}

// runScheduler is `gpud scheduler`: validate every flag, connect, and run
// the scheduler and its HTTP server until ctx ends or the lease is lost
// (an error: the process exits non-zero and its Deployment restarts it).
func runScheduler(ctx context.Context, args []string, _, stderr io.Writer) error {
	o, queues, res, err := parseSchedulerFlags(args, os.Getenv("POD_NAMESPACE"), stderr)
	if err != nil {
		return err
	}
	log, _ := newLogger(stderr, o.logFormat, o.logLevel) // validated
	// client-go (leader election, informers) logs through klog, at Info
	// and above: its verbose levels would drown --log-level debug.
	klog.SetSlogLogger(slog.New(loglevel.AtLeast(log.Handler(), slog.LevelInfo)).With("component", "client-go"))
	restCfg, err := kubeRESTConfig(o.kubeconfig)
	if err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	restCfg.UserAgent = "gpud-scheduler/" + version
	// In order: the telemetry server, the scheduler that reads it, then
	// the server runs for the scheduler (Serve's stream.Leader).
	tel, certs, err := newTelemetryServer(&o.telemetry, restCfg, log)
	if err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	restCfg.QPS, restCfg.Burst = float32(o.qps), o.burst
	// Three clientsets, three rate limiters, as kube-scheduler has: binds
	// and claim writes, Events, the leader lease.
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("scheduler: API client: %w", err)
	}
	eventClient, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("scheduler: API client for events: %w", err)
	}
	leaseClient, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("scheduler: API client for the leader lease: %w", err)
	}
	// Informers read through a client that waits out API-server outages,
	// so they resume within a second of its return (client-go's own
	// backoff took up to 30 s); writes and leader election fail fast.
	informerCfg := apiwait.Config(restCfg, log.With("component", "informers"))
	informerClient, err := kubernetes.NewForConfig(informerCfg)
	if err != nil {
		return fmt.Errorf("scheduler: API client: %w", err)
	}
	groups, err := pgwatch.NewSource(client.Discovery(), func() (dynamic.Interface, error) { return dynamic.NewForConfig(informerCfg) }, informerClient, log)
	if err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	gangLabels, _ := splitLabels(o.gangTopologyLabels) // checked by validate
	cfg := scheduler.Config{
		Client: client, InformerClient: informerClient, EventClient: eventClient, LeaseClient: leaseClient, SchedulerName: o.schedulerName, Policy: o.policy, Queues: queues, Reservations: res,
		Decider: decide.New(withObjectives(&o.objectives, withOvercommit(&o.telemetry, decide.Config{RackLabel: o.rackLabel, GangTopologyLabels: gangLabels}))),
		Groups:  groups.Groups, GroupsSynced: groups.Synced,
		Log: log, Resync: o.resync, HealOff: !o.heal, Heal: healConfig(o),
	}
	autoGangs := "off"
	var workloads *agwatch.Source
	if o.autoGangs {
		if workloads, err = agwatch.NewSource(client.Discovery(), func() (dynamic.Interface, error) { return dynamic.NewForConfig(informerCfg) }, log); err != nil {
			return fmt.Errorf("scheduler: %w", err)
		}
		cfg.AutoGroups = workloads.Grouper
		cfg.GroupsSynced = func() bool { return groups.Synced() && workloads.Synced() }
		autoGangs = workloads.Served()
	}
	// Queue objects (deploy/scheduler/queue-crd.yaml): the live queue
	// tree over --queues, namespace bindings, their status; the --queues
	// file alone until the CRD is served (discovery asked again until it
	// is).
	dyn, err := dynamic.NewForConfig(informerCfg)
	if err != nil {
		return fmt.Errorf("scheduler: dynamic client for Queues: %w", err)
	}
	queueObjs, err := schedqueues.NewSource(schedqueues.Config{Dynamic: dyn, Client: informerClient, File: queues, FileReservations: res,
		Discovery: client.Discovery(), Log: log.With("component", "queues")})
	if err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	cfg.QueueSet, cfg.QueueStatus = queueObjs.Set, queueObjs.Observe
	synced := cfg.GroupsSynced
	cfg.GroupsSynced = func() bool { return synced() && queueObjs.Synced() }
	if o.leaderElect {
		host, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("scheduler: hostname for the lease identity: %w", err)
		}
		cfg.LeaderElection = &scheduler.LeaderElection{Namespace: o.leaseNamespace, Identity: host + "_" + uuid.NewString(),
			LeaseDuration: o.leaseDuration, RenewDeadline: o.renewDeadline, RetryPeriod: o.retryPeriod}
	}
	if tel != nil {
		cfg.Telemetry = tel
	}
	var learner *learn.Learner
	if o.learn.on {
		lc := learnConfig(o)
		lc.Client, lc.Log = client, log
		if learner, err = learn.New(lc); err != nil {
			return fmt.Errorf("scheduler: %w", err)
		}
		cfg.Runtimes = learner
	}
	var usage *learn.Usage
	if learnUsage(o) {
		uc := usageConfig(o)
		uc.Client, uc.Log = client, log
		if usage, err = learn.NewUsage(uc); err != nil {
			return fmt.Errorf("scheduler: %w", err)
		}
		cfg.Usage, cfg.OvercommitLearned = usage, o.telemetry.overcommit
	}
	s, err := scheduler.New(cfg)
	if err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	queueObjs.OnChange(s.Wake)
	ln, err := net.Listen("tcp", o.metricsAddr)
	if err != nil {
		return fmt.Errorf("scheduler: listen on --metrics-addr %s: %w", o.metricsAddr, err)
	}
	s.Registry().MustRegister(queueObjs.Collectors()...)
	if learner != nil {
		s.Registry().MustRegister(learner.Collectors()...)
	}
	if usage != nil {
		s.Registry().MustRegister(usage.Collectors()...)
	}
	var telLn net.Listener
	if tel != nil {
		s.Registry().MustRegister(tel.Collectors()...)
		if telLn, err = net.Listen("tcp", o.telemetry.addr); err != nil {
			_ = ln.Close()
			return fmt.Errorf("scheduler: listen on --telemetry-addr %s: %w", o.telemetry.addr, err)
		}
		log.Info("telemetry stream listening", "addr", telLn.Addr().String(), "mtls", certs != nil)
	}
	log.Info("scheduler starting", "version", version, "scheduler_name", o.schedulerName, "policy", o.policy,
		"queues", len(queues), "leader_elect", o.leaderElect, "metrics_addr", ln.Addr().String(), "podgroups", groups.APIs(),
		"auto_gangs", autoGangs, "queue_objects", queueObjs.Served(), "learn_runtimes", o.learn.on, "learn_usage", usage != nil)
	handler := s.Handler()
	if o.profiling {
		handler = httpserve.WithProfiling(handler)
	}
	tasks := []taskgroup.Task{
		{Run: func(ctx context.Context) error { return httpserve.Serve(ctx, ln, handler, "--metrics-addr", log) }},
		{Run: groups.Run},
	}
	if workloads != nil {
		tasks = append(tasks, taskgroup.Task{Run: workloads.Run})
	}
	tasks = append(tasks, taskgroup.Task{Run: queueObjs.Run})
	if tel != nil {
		tasks = append(tasks, taskgroup.Task{Run: func(ctx context.Context) error { return tel.Serve(ctx, telLn, certs, s) }})
		if certs != nil {
			tasks = append(tasks, taskgroup.Task{Run: func(ctx context.Context) error { return certs.Run(ctx) }})
		}
	}
	tasks = append(tasks, taskgroup.Task{Run: func(ctx context.Context) error {
		err := s.Run(ctx)
		if err == nil {
			err = context.Canceled // stop the HTTP server too
		}
		return err
	}})
	// The first error stops the others; the scheduler's errors go out as
	// they are (the tasks are unnamed).
	if err := taskgroup.Run(ctx, tasks); err != nil {
		log.Error("scheduler stopped", "err", err)
		return err
	}
	log.Info("scheduler stopped")
	return nil
}

// maxGangTopologyLabels bounds --gang-topology-labels.
const maxGangTopologyLabels = 32

// splitLabels reads a comma-separated list of node label keys (blanks
// around the commas ignored, duplicates dropped).
func splitLabels(list string) ([]string, error) {
	var out []string
	for _, l := range strings.Split(list, ",") {
		l = strings.TrimSpace(l)
		if l == "" || slices.Contains(out, l) {
			continue
		}
		if msgs := validation.IsQualifiedName(l); len(msgs) > 0 {
			return nil, fmt.Errorf("%s: not a label key: %s", printable.Quote(l), strings.Join(msgs, "; "))
		}
		out = append(out, l)
	}
	if len(out) > maxGangTopologyLabels {
		return nil, fmt.Errorf("%d labels: at most %d", len(out), maxGangTopologyLabels)
	}
	return out, nil
}
