package scheduler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	resourceinformers "k8s.io/client-go/informers/resource/v1"
	"k8s.io/client-go/kubernetes/scheme"
	corelisters "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/dynamic-resource-allocation/deviceclass/extendedresourcecache"
	resourceslicetracker "k8s.io/dynamic-resource-allocation/resourceslice/tracker"

	"github.com/gpud/gpud/pkg/allocator/jobs"
	"github.com/gpud/gpud/pkg/scheduler/plan"
	"github.com/gpud/gpud/pkg/scheduler/rules"
)

// Scheduler is gpud's scheduler runtime. Make one with [New] and call
// [Scheduler.Run] once; [Scheduler.Handler] serves its metrics and probes
// and may be used before and during Run.
type Scheduler struct {
	cfg Config
	log *slog.Logger
	m   *metrics

	factory informers.SharedInformerFactory
	// rules are kube-scheduler's plugins. Their informers (volumes,
	// namespaces, workloads for default spread) live on factory, sharing
	// its pods and nodes; readiness does not wait for them, so that a
	// role without them (an older deploy/scheduler RBAC) still
	// schedules, pods with volumes then waiting with the plugins' reason.
	rules   *rules.Rules
	backoff *backoff
	pods    corelisters.PodLister
	// podsByClaim finds pods by the claims they name (podClaimIndex).
	podsByClaim cache.Indexer
	nodes       corelisters.NodeLister
	claims      resourcelisters.ResourceClaimLister
	// sliceInf is every driver's ResourceSlices; the scheduler reads
	// them through sliceTracker, which Run starts on it.
	sliceInf resourceinformers.TypedResourceSliceInformer
	taintInf resourceinformers.TypedDeviceTaintRuleInformer
	// sliceTracker lists the slices with the taints of DeviceTaintRules
	// applied, as kube-scheduler sees them (set by Run before the loop).
	sliceTracker *resourceslicetracker.Tracker
	classes      resourcelisters.DeviceClassLister
	pdbs         policylisters.PodDisruptionBudgetLister
	hasSynced    []cache.InformerSynced
	// flush is the handler for events that can make room.
	flush cache.ResourceEventHandlerFuncs

	broadcaster events.EventBroadcaster
	recorder    events.EventRecorder
	elector     *leaderelection.LeaderElector
	watchdog    *leaderelection.HealthzAdaptor

	assumed *assumeCache
	// binds runs the binds of each cycle's plan in workers, apart from
	// the cycles (see bindQueue).
	binds *bindQueue
	// statusBudget rations pending-status writes (see writeStatuses);
	// statusDeferred counts the writes left to a later cycle by it.
	statusBudget   flowcontrol.PassiveRateLimiter
	statusDeferred prometheus.Counter
	snap           *snapshotter
	// healing evicts pods whose GPUs failed (nil: off).
	healing *healing
	trigger chan struct{}
	// reportMissingAt is the last cycle's snapshot.reportMissingAt (only
	// the loop's goroutine uses it).
	reportMissingAt time.Time
	// urgent is poked with trigger for the events a user waits on
	// (pokeNow): their cycle skips the Debounce gap.
	urgent chan struct{}

	started, synced, leading atomic.Bool
	// lastCycle is when the last cycle ended (unix nanoseconds); /healthz
	// fails when a leader's loop stops cycling.
	lastCycle atomic.Int64

	// terms tracks the loop of the term as leader; termsOver, under
	// termMu, stops a term from starting once Run is returning.
	terms     sync.WaitGroup
	termMu    sync.Mutex
	termsOver bool

	mu sync.Mutex
	// written is the pending status this process last wrote per pod
	// (message and nominated node).
	written map[types.UID]writtenStatus
	// warned are the pods told about malformed annotations, with what
	// they were told (one Event per pod and problem).
	warned map[types.UID]string
}

// New checks cfg and sets the scheduler up: informers, event recorder,
// metrics, leader elector. It starts nothing and touches no API.
func New(cfg Config) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Scheduler{cfg: cfg, log: cfg.Log.With("component", "scheduler"), m: newMetrics(), assumed: newAssumeCache(),
		trigger: make(chan struct{}, 1), urgent: make(chan struct{}, 1), written: map[types.UID]writtenStatus{}}
	s.backoff = newBackoff()
	s.binds = newBindQueue(cfg.Workers, s.runBind, s.m.reg)
	s.statusBudget = newStatusBudget(cfg.Client, cfg.Now)
	s.statusDeferred = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "gpud_scheduler_status_writes_deferred_total",
		Help: "Pending-status writes left to a later cycle to keep within their share of the API client's rate (the rest is the binds').",
	})
	s.m.reg.MustRegister(s.statusDeferred)
	s.snap = newSnapshotter(cfg, s.assumed)
	s.snap.backoff = s.backoff
	s.snap.runtimes = cfg.Runtimes
	s.m.setQuotas(cfg.Queues)
	h, err := newHealing(cfg, s.m.reg)
	if err != nil {
		return nil, err
	}
	s.healing = h

	strip := informers.WithTransform(stripManagedFields)
	s.factory = informers.NewSharedInformerFactoryWithOptions(cmp.Or(cfg.InformerClient, cfg.Client), 0, strip)
	classInf := s.factory.Resource().V1().DeviceClasses()
	// Which DeviceClass serves an extended resource (nvidia.com/gpu
	// through gpu.gpud.io): kube-scheduler's own cache of the mapping.
	classes := extendedresourcecache.NewExtendedResourceCache(logr.FromSlogHandler(s.log.Handler()))
	if _, err := classInf.Informer().AddEventHandler(classes); err != nil {
		return nil, fmt.Errorf("scheduler: device class handler: %w", err)
	}
	s.snap.classes = classes
	r, err := rules.New(context.Background(), rules.Config{Informers: s.factory, Client: cfg.Client, DeviceClasses: classes})
	if err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	s.rules = r
	podInf := s.factory.Core().V1().Pods()
	nodeInf := s.factory.Core().V1().Nodes()
	claimInf := s.factory.Resource().V1().ResourceClaims()
	pdbInf := s.factory.Policy().V1().PodDisruptionBudgets()
	// Every driver's slices: claims gpud does not model may take other
	// drivers' devices (pkg/scheduler/anydevice).
	// An admin's DeviceTaintRules taint devices in them (maintenance,
	// a bad GPU); the tracker applies them (Run).
	s.sliceInf = s.factory.Resource().V1().ResourceSlices()
	s.taintInf = s.factory.Resource().V1().DeviceTaintRules()
	s.pods, s.nodes, s.claims = podInf.Lister(), nodeInf.Lister(), claimInf.Lister()
	if err := podInf.Informer().AddIndexers(cache.Indexers{podClaimIndex: podClaimNames}); err != nil {
		return nil, fmt.Errorf("scheduler: pod index: %w", err)
	}
	s.podsByClaim = podInf.Informer().GetIndexer()
	s.classes, s.pdbs = classInf.Lister(), pdbInf.Lister()

	poke := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { s.poke() },
		UpdateFunc: func(any, any) { s.poke() },
		DeleteFunc: func(any) { s.poke() },
	}
	// Events that can make room let backed-off pods back at once.
	flush := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { s.backoff.flush(); s.poke() },
		UpdateFunc: func(any, any) { s.backoff.flush(); s.poke() },
		DeleteFunc: func(any) { s.backoff.flush(); s.poke() },
	}
	s.flush = flush
	if _, err := nodeInf.Informer().AddEventHandler(s.nodeEvents()); err != nil {
		return nil, fmt.Errorf("scheduler: informer handler: %w", err)
	}
	s.hasSynced = append(s.hasSynced, nodeInf.Informer().HasSynced)
	for _, inf := range []cache.SharedIndexInformer{classInf.Informer()} {
		if _, err := inf.AddEventHandler(flush); err != nil {
			return nil, fmt.Errorf("scheduler: informer handler: %w", err)
		}
		s.hasSynced = append(s.hasSynced, inf.HasSynced)
	}
	if _, err := claimInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    s.claimAdded,
		UpdateFunc: func(any, any) { s.poke() },
		DeleteFunc: func(any) { s.backoff.flush(); s.poke() },
	}); err != nil {
		return nil, fmt.Errorf("scheduler: claim informer handler: %w", err)
	}
	s.hasSynced = append(s.hasSynced, claimInf.Informer().HasSynced)
	for _, inf := range []cache.SharedIndexInformer{pdbInf.Informer()} {
		if _, err := inf.AddEventHandler(poke); err != nil {
			return nil, fmt.Errorf("scheduler: informer handler: %w", err)
		}
		s.hasSynced = append(s.hasSynced, inf.HasSynced)
	}
	if _, err := podInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    s.podAdded,
		UpdateFunc: func(o, n any) { s.podUpdated(o, n) },
		DeleteFunc: s.podDeleted,
	}); err != nil {
		return nil, fmt.Errorf("scheduler: pod informer handler: %w", err)
	}
	if r := cfg.Runtimes; r != nil {
		if _, err := podInf.Informer().AddEventHandler(r.Handler()); err != nil {
			return nil, fmt.Errorf("scheduler: runtimes pod handler: %w", err)
		}
	}
	if u := cfg.Usage; u != nil {
		if _, err := podInf.Informer().AddEventHandler(u.Handler()); err != nil {
			return nil, fmt.Errorf("scheduler: usage pod handler: %w", err)
		}
	}
	s.hasSynced = append(s.hasSynced, podInf.Informer().HasSynced)
	if err := s.watchStorage(); err != nil {
		return nil, err
	}

	s.broadcaster = events.NewBroadcaster(&events.EventSinkImpl{Interface: cmp.Or(cfg.EventClient, cfg.Client).EventsV1()})
	s.recorder = s.broadcaster.NewRecorder(scheme.Scheme, cfg.SchedulerName)

	if le := cfg.LeaderElection; le != nil {
		s.watchdog = leaderelection.NewLeaderHealthzAdaptor(le.LeaseDuration)
		el, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: &resourcelock.LeaseLock{
				LeaseMeta:  metav1.ObjectMeta{Namespace: le.Namespace, Name: le.Name},
				Client:     cmp.Or(cfg.LeaseClient, cfg.Client).CoordinationV1(),
				LockConfig: resourcelock.ResourceLockConfig{Identity: le.Identity},
			},
			LeaseDuration:   le.LeaseDuration,
			RenewDeadline:   le.RenewDeadline,
			RetryPeriod:     le.RetryPeriod,
			ReleaseOnCancel: true,
			WatchDog:        s.watchdog,
			Name:            le.Name,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: s.term,
				OnStoppedLeading: func() {
					s.setLeading(false)
					s.log.Info("stopped leading", "identity", le.Identity)
				},
				OnNewLeader: func(id string) { s.log.Info("leader observed", "leader", id) },
			},
		})
		if err != nil {
			return nil, fmt.Errorf("%w: leader election: %v", ErrConfig, err)
		}
		s.elector = el
	}
	return s, nil
}

// stripManagedFields drops managedFields from informer objects: the
// scheduler never reads them and they are most of a pod's size.
func stripManagedFields(obj any) (any, error) {
	if m, ok := obj.(metav1.ObjectMetaAccessor); ok {
		if meta := m.GetObjectMeta(); meta != nil && meta.GetManagedFields() != nil {
			meta.SetManagedFields(nil)
		}
	}
	return obj, nil
}

// Registry is the scheduler's Prometheus registry, which Handler serves;
// callers may register their own collectors (a PodGroup informer's).
func (s *Scheduler) Registry() *prometheus.Registry { return s.m.reg }

// Ready reports whether the informers have synced and, with leader
// election, this replica leads.
func (s *Scheduler) Ready() bool { return s.synced.Load() && s.leading.Load() }

// Handler serves /metrics, /healthz (fails when a leader could not renew
// its lease in time) and /readyz ([Scheduler.Ready]).
func (s *Scheduler) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(s.m.reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelError)}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if last := s.lastCycle.Load(); s.leading.Load() && last != 0 && time.Since(time.Unix(0, last)) > s.stuckAfter() {
			http.Error(w, fmt.Sprintf("no decision cycle for %s", time.Since(time.Unix(0, last)).Round(time.Second)), http.StatusInternalServerError)
			return
		}
		if s.watchdog != nil {
			if err := s.watchdog.Check(r); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		switch {
		case !s.synced.Load():
			http.Error(w, "informers not synced", http.StatusServiceUnavailable)
		case !s.leading.Load():
			http.Error(w, "not the leader", http.StatusServiceUnavailable)
		default:
			_, _ = w.Write([]byte("ok\n"))
		}
	})
	return mux
}

// stuckAfter is how long a leader may go without finishing a cycle before
// /healthz fails: ten resync periods and a minute.
func (s *Scheduler) stuckAfter() time.Duration { return 10*s.cfg.Resync + time.Minute }

// Run starts the informers and the event recorder, waits for the caches,
// and then decides: at once without leader election, else while it holds
// the lease. It returns nil when ctx ends, [ErrLostLease] when the lease is
// lost (the process should exit), or an error if it cannot start. Run may
// be called once.
func (s *Scheduler) Run(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("scheduler: Run called twice")
	}
	ctx, cancel := context.WithCancel(ctx)
	if err := s.broadcaster.StartRecordingToSinkWithContext(ctx); err != nil {
		cancel()
		return fmt.Errorf("scheduler: event recorder: %w", err)
	}
	tracker, err := s.startSliceTracker(ctx)
	if err != nil {
		cancel()
		s.broadcaster.Shutdown()
		return err
	}
	s.factory.Start(ctx.Done())
	defer func() {
		cancel()
		tracker.Stop()
		s.factory.Shutdown()
		s.broadcaster.Shutdown()
	}()
	if !cache.WaitForCacheSync(ctx.Done(), append(s.hasSynced, tracker.HasSynced)...) || !s.waitGroupsSynced(ctx) {
		if ctx.Err() != nil {
			return nil
		}
		return ErrNotSynced
	}
	s.synced.Store(true)
	s.log.Info("informers synced", "scheduler_name", s.cfg.SchedulerName, "policy", s.cfg.Policy)

	if s.elector == nil {
		s.setLeading(true)
		s.loop(ctx)
		return nil
	}
	le := s.cfg.LeaderElection
	s.log.Info("waiting for the lease", "lease", le.Namespace+"/"+le.Name, "identity", le.Identity)
	s.elector.Run(ctx)
	s.termMu.Lock()
	s.termsOver = true // a term whose callback starts late does not run
	s.termMu.Unlock()
	s.terms.Wait() // the loop has stopped: no decision after this
	s.setLeading(false)
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("%w %s/%s (identity %s): exiting so that a new replica can take over", ErrLostLease, le.Namespace, le.Name, le.Identity)
}

// startSliceTracker starts kube-scheduler's ResourceSlice tracker on the
// slice and DeviceTaintRule informers (before the factory starts them):
// a device a DeviceTaintRule taints is then tainted in every slice the
// scheduler reads, and a change of either makes room as a slice change does.
func (s *Scheduler) startSliceTracker(ctx context.Context) (*resourceslicetracker.Tracker, error) {
	t, err := resourceslicetracker.StartTracker(ctx, resourceslicetracker.Options{
		EnableDeviceTaintRules:   true,
		EnableConsumableCapacity: true,
		SliceInformer:            s.sliceInf,
		TaintInformer:            s.taintInf,
		KubeClient:               s.cfg.Client,
	})
	if err != nil {
		return nil, fmt.Errorf("scheduler: resource slice tracker: %w", err)
	}
	if _, err := t.AddEventHandler(s.flush); err != nil {
		t.Stop()
		return nil, fmt.Errorf("scheduler: resource slice tracker handler: %w", err)
	}
	s.sliceTracker = t
	return t, nil
}

// term runs the loop while this replica leads; ctx ends with the term.
func (s *Scheduler) term(ctx context.Context) {
	s.termMu.Lock()
	if s.termsOver {
		s.termMu.Unlock()
		return
	}
	s.terms.Add(1)
	s.termMu.Unlock()
	defer s.terms.Done()
	s.log.Info("started leading", "identity", s.cfg.LeaderElection.Identity)
	s.setLeading(true)
	s.loop(ctx)
}

func (s *Scheduler) setLeading(on bool) {
	s.leading.Store(on)
	if on {
		s.m.leader.Set(1)
	} else {
		s.m.leader.Set(0)
	}
}

func (s *Scheduler) waitGroupsSynced(ctx context.Context) bool {
	if s.cfg.GroupsSynced == nil {
		return true
	}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for !s.cfg.GroupsSynced() {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}

// poke asks for a cycle.
func (s *Scheduler) poke() {
	select {
	case s.trigger <- struct{}{}:
	default:
	}
}

// pokeNow starts a cycle without waiting out Debounce (see loop), for the
// events a user waits on: a new pod of this scheduler, a claim created (a
// pod may be waiting for it), a pending pod's spec or claims changed.
func (s *Scheduler) pokeNow() {
	select {
	case s.urgent <- struct{}{}:
	default:
	}
	s.poke()
}

// claimAdded pokes for a new claim: at once when a pod of this scheduler
// waits for it (a claim made from the pod's template, or one the pod
// names), else after Debounce. A claim created before its pod (as users
// and Jobs create standalone claims) would otherwise start a cycle with
// nothing to place that the pod, created a moment later, waits out.
func (s *Scheduler) claimAdded(obj any) {
	c, ok := obj.(*resourceapi.ResourceClaim)
	if !ok || s.podWaitsFor(c) {
		s.pokeNow()
		return
	}
	s.poke()
}

// podWaitsFor reports whether a pending pod of this scheduler uses claim
// c: the pod that owns it (made from its template), or a pod naming it.
func (s *Scheduler) podWaitsFor(c *resourceapi.ResourceClaim) bool {
	for _, ref := range c.OwnerReferences {
		if ref.Kind == "Pod" && ref.APIVersion == "v1" {
			p, err := s.pods.Pods(c.Namespace).Get(ref.Name)
			if err != nil || p.UID != ref.UID {
				return true // not seen yet: the pod is on its way
			}
			return s.waitingOurs(p)
		}
	}
	objs, err := s.podsByClaim.ByIndex(podClaimIndex, c.Namespace+"/"+c.Name)
	if err != nil {
		return true
	}
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok && s.waitingOurs(p) {
			return true
		}
	}
	return false
}

// waitingOurs reports whether p is one of this scheduler's pods waiting
// for a node.
func (s *Scheduler) waitingOurs(p *corev1.Pod) bool {
	return p.Spec.NodeName == "" && p.Spec.SchedulerName == s.cfg.SchedulerName
}

// podClaimIndex indexes pods by the claims they name
// (spec.resourceClaims[].resourceClaimName), as "namespace/name".
const podClaimIndex = "gpud.io/claim-name"

func podClaimNames(obj any) ([]string, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil
	}
	var out []string
	for _, rc := range p.Spec.ResourceClaims {
		if rc.ResourceClaimName != nil {
			out = append(out, p.Namespace+"/"+*rc.ResourceClaimName)
		}
	}
	return out, nil
}

// podAdded pokes for a new pod, at once for one of this scheduler's pods
// waiting for a node.
func (s *Scheduler) podAdded(obj any) {
	if pod, ok := obj.(*corev1.Pod); ok && s.waitingOurs(pod) {
		s.pokeNow()
		return
	}
	s.poke()
}

// podUpdated pokes for pod changes that can change a decision: one of
// this scheduler's pods pending, a pod bound, finished or being deleted.
func (s *Scheduler) podUpdated(o, n any) {
	old, ok1 := o.(*corev1.Pod)
	pod, ok2 := n.(*corev1.Pod)
	if !ok1 || !ok2 {
		s.poke()
		return
	}
	if pod.Spec.NodeName == "" && (!equality.Semantic.DeepEqual(old.Spec, pod.Spec) || !maps.Equal(old.Labels, pod.Labels)) {
		s.backoff.forget(pod.UID) // changed: new again
		if pod.Spec.SchedulerName == s.cfg.SchedulerName {
			s.pokeNow()
		}
	}
	if s.waitingOurs(pod) &&
		!equality.Semantic.DeepEqual(old.Status.ResourceClaimStatuses, pod.Status.ResourceClaimStatuses) {
		s.pokeNow() // its template's claim was created
	}
	if old.Status.Phase != pod.Status.Phase || (old.DeletionTimestamp == nil) != (pod.DeletionTimestamp == nil) {
		s.backoff.flush() // a pod finishing or leaving frees room
	}
	if s.waitingOurs(pod) || old.Spec.NodeName != pod.Spec.NodeName ||
		old.Status.Phase != pod.Status.Phase || (old.DeletionTimestamp == nil) != (pod.DeletionTimestamp == nil) {
		s.poke()
	}
}

// learnRuntimes runs Config.Runtimes and Config.Usage until ctx ends
// (the term); the function it returns stops them and waits for their
// last writes.
func (s *Scheduler) learnRuntimes(ctx context.Context) func() {
	var runs []func(context.Context) error
	if r := s.cfg.Runtimes; r != nil {
		runs = append(runs, r.Run)
	}
	if u := s.cfg.Usage; u != nil {
		runs = append(runs, u.Run)
	}
	if len(runs) == 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, run := range runs {
		wg.Go(func() {
			if err := run(ctx); err != nil {
				s.log.Error("learning stopped", "err", err)
			}
		})
	}
	return func() { cancel(); wg.Wait() }
}

// loop runs cycles until ctx ends: one at once, then one per burst of
// informer events and one per Resync. A cycle on events starts Debounce
// after the event, so that the events of a burst are decided together and
// events nobody waits on (a claim created ahead of its pod, a bind's own
// pod and claim updates) do not start a cycle that the pod arriving a
// moment later would wait out; a new pod of this scheduler (an urgent
// event) starts one at once (kube-scheduler has no such delay either;
// pods that arrive while a cycle runs are decided together by the next).
//
// Binds run in workers apart from the cycles (bindQueue); loop returns
// once the binds under way have stopped (ctx ended: they roll back what
// they wrote) and no worker is left.
func (s *Scheduler) loop(ctx context.Context) {
	defer s.binds.wait()
	defer s.learnRuntimes(ctx)()
	s.assumed.forget()
	s.catchUp(ctx)
	tick := time.NewTicker(s.cfg.Resync)
	defer tick.Stop()
	for ctx.Err() == nil {
		s.cycle(ctx)
		// A cycle also runs when the first backed-off pod may retry.
		var wake <-chan time.Time
		var timer *time.Timer
		now := s.cfg.Now()
		at, ok := s.backoff.next(now)
		if m := s.reportMissingAt; !m.IsZero() && (!ok || m.Before(at)) {
			at, ok = m, true
		}
		if ok {
			timer = time.NewTimer(at.Sub(now))
			wake = timer.C
		}
		urgent := false
		select {
		case <-ctx.Done():
			return
		case <-s.urgent:
			urgent = true
		case <-s.trigger:
		case <-tick.C:
		case <-wake:
			urgent = true // its time was set by an earlier cycle
		}
		if timer != nil {
			timer.Stop()
		}
		if !urgent {
			t := time.NewTimer(s.cfg.Debounce)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-s.urgent:
			case <-t.C:
			}
			t.Stop()
		}
		for _, ch := range []chan struct{}{s.trigger, s.urgent} {
			select {
			case <-ch:
			default:
			}
		}
	}
}

// catchUp reads claims and this scheduler's bound pods from the API
// server (not the informers) when a term as leader starts, so that what
// the previous leader wrote just before it stopped counts even if the
// informers lag. Failures are logged: the claims' resourceVersions still
// prevent a double allocation.
func (s *Scheduler) catchUp(ctx context.Context) {
	now := s.cfg.Now()
	claims, err := s.cfg.Client.ResourceV1().ResourceClaims(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		s.log.Warn("claims not read at the start of the term", "err", err)
	} else {
		for i := range claims.Items {
			s.assumed.claim(&claims.Items[i], now)
		}
	}
	sel := fields.AndSelectors(fields.OneTermEqualSelector("spec.schedulerName", s.cfg.SchedulerName),
		fields.OneTermNotEqualSelector("spec.nodeName", "")).String()
	pods, err := s.cfg.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		s.log.Warn("bound pods not read at the start of the term", "err", err)
		return
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if cur, err := s.pods.Pods(p.Namespace).Get(p.Name); err == nil && cur.UID == p.UID && cur.Spec.NodeName == "" {
			s.assumed.bound(p.UID, p.Spec.NodeName)
		}
	}
}

// cycle decides once and carries the plan out.
func (s *Scheduler) cycle(ctx context.Context) {
	now := s.cfg.Now()
	in, err := s.inputs(now)
	if err != nil {
		s.log.Error("informer contents not listed", "err", err)
		return
	}
	s.cycleOn(ctx, in, now)
}

// cycleOn decides on in at now and carries the plan out.
func (s *Scheduler) cycleOn(ctx context.Context, in inputs, now time.Time) {
	start := time.Now()
	sn, rc, err := s.prepare(ctx, in, now)
	if err != nil {
		s.log.Error("placement rules not built: no decision this cycle", "err", err)
		return
	}
	s.reportMissingAt = sn.reportMissingAt
	s.warnAnnotations(sn.badAnnotations)
	sn.Telemetry = s.telemetry(now, in.claims)
	s.heal(ctx, sn, in.slices, now)
	s.m.observeView(sn.View, sn.claims, sn.skips)
	for _, sk := range sn.skips {
		s.log.Debug("object left out of the view", "kind", sk.Kind, "name", sk.Name, "reason", sk.Reason)
	}
	var p plan.Plan
	// With queues the decider also runs without pending pods, so that
	// the queues' usage stays current.
	if len(sn.Pending) > 0 || len(sn.Queues) > 0 {
		s.streamBinds(ctx, sn)
		p, err = s.decide(sn.Snapshot)
		if err != nil {
			s.log.Error("decider failed: no decision this cycle", "pending", len(sn.Pending), "err", err)
			return
		}
	}
	s.execute(ctx, sn, p)
	s.queueOutcome(p, now, rc)
	s.m.setQueueUsage(p.QueueUsage)
	s.reportQueues(sn, p)
	boundByUID := make(map[types.UID]*corev1.Pod, len(sn.Bound)+len(p.Binds))
	for _, b := range sn.Bound {
		boundByUID[b.Pod.UID] = b.Pod
	}
	for _, b := range p.Binds { // bound by this cycle: pending in its snapshot
		boundByUID[b.Pod.Pod.UID] = b.Pod.Pod
	}
	// An assumed pod stays until the informer shows it bound or gone.
	s.assumed.prunePods(func(uid types.UID) bool {
		p, ok := boundByUID[uid]
		return ok && !s.informerBound(p)
	})
	s.backoff.prune(func(uid types.UID) bool { _, ok := sn.unbound[uid]; return ok }, now)
	d := time.Since(start)
	s.m.cycle.Observe(d.Seconds())
	s.lastCycle.Store(time.Now().UnixNano())
	if len(sn.Pending) > 0 || len(sn.missing) > 0 {
		s.log.Debug("cycle done", "pending", len(sn.Pending), "claims_missing", len(sn.missing), "deferred", sn.deferred,
			"binds", len(p.Binds), "evictions", len(p.Evictions), "left_pending", len(p.Pending), "duration", d)
	}
}

// prepare builds a cycle's snapshot and its rules (kube-scheduler's
// NodeInfos of the bound pods) side by side: neither reads the other, and
// together they are most of a one-pod cycle's time on large clusters.
func (s *Scheduler) prepare(ctx context.Context, in inputs, now time.Time) (*snapshot, *rules.Cycle, error) {
	bound := s.snap.boundPods(in.pods)
	var rc *rules.Cycle
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		rc, err = s.rules.Cycle(ctx, in.nodes, bound)
	}()
	sn := s.snap.build(in, now)
	<-done
	if err != nil {
		return nil, nil, err
	}
	sn.Rules, sn.volumes = rc, rc
	return sn, rc, nil
}

// queueOutcome backs off the pods the plan left pending (the bind
// workers forget the ones they bind, and back off the ones they fail to).
// Pods not reached this cycle, or waiting on nominated room, were not
// tried and do not back off.
// A pod that kube-scheduler's plugins alone refused on every node backs
// off with their names (rc.Rejected), for their queueing hints.
func (s *Scheduler) queueOutcome(p plan.Plan, now time.Time, rc *rules.Cycle) {
	for _, pd := range p.Pending {
		if pd.Pod != nil && pd.NominatedNode == "" && pd.Code != jobs.CodeBlocked {
			if by, ok := rc.Rejected(pd.Pod.Pod); ok {
				s.backoff.failedBy(pd.Pod.Pod.UID, now, pd.Pod.Pod, by)
				continue
			}
			s.backoff.failed(pd.Pod.Pod.UID, now)
		}
	}
}

// informerBound reports whether the informer shows the pod bound.
func (s *Scheduler) informerBound(pod *corev1.Pod) bool {
	cur, err := s.pods.Pods(pod.Namespace).Get(pod.Name)
	return err == nil && cur.UID == pod.UID && cur.Spec.NodeName != ""
}

// decide calls the decider, turning a panic into an error: a bad object
// must not crash the scheduler.
func (s *Scheduler) decide(snap *plan.Snapshot) (p plan.Plan, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("decider panic: %v\n%s", r, debug.Stack())
		}
	}()
	return s.cfg.Decider.Decide(snap), nil
}

// inputs lists the informers' contents, with the assume cache merged in.
func (s *Scheduler) inputs(now time.Time) (inputs, error) {
	var in inputs
	var err error
	all := labels.Everything()
	if in.pods, err = s.pods.List(all); err != nil {
		return in, fmt.Errorf("list pods: %w", err)
	}
	if in.nodes, err = s.nodes.List(all); err != nil {
		return in, fmt.Errorf("list nodes: %w", err)
	}
	claims, err := s.claims.List(all)
	if err != nil {
		return in, fmt.Errorf("list resource claims: %w", err)
	}
	in.claims = s.assumed.mergeClaims(claims, now)
	if in.slices, err = s.sliceTracker.ListPatchedResourceSlices(); err != nil {
		return in, fmt.Errorf("list resource slices: %w", err)
	}
	if in.classes, err = s.classes.List(all); err != nil {
		return in, fmt.Errorf("list device classes: %w", err)
	}
	if in.pdbs, err = s.pdbs.List(all); err != nil {
		return in, fmt.Errorf("list pod disruption budgets: %w", err)
	}
	if s.cfg.Groups != nil {
		in.groups = s.cfg.Groups()
	}
	return in, nil
}
