package queues

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/gpud/gpud/internal/informers"
	"github.com/gpud/gpud/pkg/allocator/jobs"
)

// DefaultStatusInterval is the least time between two rounds of status
// writes.
const DefaultStatusInterval = 2 * time.Second

// DefaultRecheckInterval is how often a [Source] whose Queue CRD is not
// installed asks discovery again.
const DefaultRecheckInterval = 10 * time.Second

// maxStatusWrites bounds the status writes of one round; the rest follow
// in the next rounds.
const maxStatusWrites = 200

// Config is what [NewSource] needs.
type Config struct {
	// Dynamic reads the Queue objects and writes their status; Client
	// reads the Namespaces (their label gpud.io/queue). Both required.
	Dynamic dynamic.Interface
	Client  kubernetes.Interface
	// File and FileReservations are the --queues file's tree (may be
	// empty): Queue objects of the same name win over its queues.
	File             []jobs.Queue
	FileReservations []jobs.Reservation
	// StatusInterval is the least time between two rounds of status
	// writes; default [DefaultStatusInterval].
	StatusInterval time.Duration
	// Discovery, if set, tells whether the API server serves Queue
	// objects: until it does, the Source serves the --queues file alone
	// (each pod's queue its label, as without a Source) and asks again
	// every RecheckInterval, starting its informers once the CRD is
	// installed, without a restart. Nil: the CRD is taken as installed.
	Discovery discovery.DiscoveryInterface
	// RecheckInterval is how often to ask Discovery whether the CRD is
	// served: while it is missing (to start on it once installed), and
	// while it is served (to fall back to the --queues file if it is
	// deleted); default [DefaultRecheckInterval], at most 1h.
	RecheckInterval time.Duration
	// Log hears of refused queues and failed status writes; nil discards.
	Log *slog.Logger
}

// Installed reports whether the API server serves Queue objects
// (scheduling.gpud.io/v1alpha1 queues); false with a nil error: the CRD is
// not installed, and the scheduler runs on the --queues file alone.
func Installed(disco discovery.DiscoveryInterface) (bool, error) {
	ok, err := informers.Served(disco, GroupVersion.String(), Resource)
	if err != nil {
		return false, fmt.Errorf("queues: %w", err)
	}
	return ok, nil
}

// Source watches Queue objects and Namespaces and serves the scheduler
// the queue tree of each cycle ([Source.Set]); fed each decision's usage
// ([Source.Observe], which only the leader calls), it writes the Queues'
// status. Its methods are safe for concurrent use.
type Source struct {
	cfg    Config
	queues cache.SharedIndexInformer
	nsInf  cache.SharedIndexInformer
	// served: the API server serves Queue objects (the informers run
	// once it does).
	served atomic.Bool

	gen      atomic.Uint64 // bumped by every Queue event
	mu       sync.Mutex
	cached   *Set
	cacheGen uint64

	onChange atomic.Pointer[func()]
	poke     chan struct{}

	obsMu   sync.Mutex
	leading bool
	usage   map[string]jobs.Resources
	pending map[string]int

	// servedGauge and removed are the Source's metrics (Collectors).
	servedGauge prometheus.GaugeFunc
	removed     prometheus.Counter
}

// NewSource makes the informers (not yet running) and checks cfg.
func NewSource(cfg Config) (*Source, error) {
	if cfg.Dynamic == nil || cfg.Client == nil {
		return nil, errors.New("queues: a dynamic client and a client are required")
	}
	if cfg.StatusInterval == 0 {
		cfg.StatusInterval = DefaultStatusInterval
	}
	if cfg.StatusInterval < 0 || cfg.StatusInterval > time.Hour {
		return nil, fmt.Errorf("queues: status interval %s: want 0 to 1h", cfg.StatusInterval)
	}
	if cfg.RecheckInterval == 0 {
		cfg.RecheckInterval = DefaultRecheckInterval
	}
	if cfg.RecheckInterval < 0 || cfg.RecheckInterval > time.Hour {
		return nil, fmt.Errorf("queues: discovery recheck interval %s: want 0 to 1h", cfg.RecheckInterval)
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	s := &Source{cfg: cfg, poke: make(chan struct{}, 1)}
	s.servedGauge = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "gpud_scheduler_queue_crd_served",
		Help: "1 while the API server serves Queue objects (the tree is theirs over the --queues file), 0 while the --queues file alone serves (the Queue CRD not installed, or deleted).",
	}, func() float64 {
		if s.served.Load() {
			return 1
		}
		return 0
	})
	s.removed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "gpud_scheduler_queue_crd_removed_total",
		Help: "Times the Queue CRD was found deleted while the scheduler ran, each time falling back to the --queues file.",
	})
	if cfg.Discovery == nil {
		s.served.Store(true)
	} else if ok, err := Installed(cfg.Discovery); err != nil {
		return nil, err
	} else {
		s.served.Store(ok)
	}
	s.queues = dynamicinformer.NewFilteredDynamicInformer(cfg.Dynamic, GVR, metav1.NamespaceAll, 0, cache.Indexers{}, nil).Informer()
	// SetTransform fails only on a started informer; this one is new.
	_ = s.queues.SetTransform(transform)
	s.nsInf = coreinformers.NewNamespaceInformer(cfg.Client, 0, cache.Indexers{})
	changed := func() {
		s.gen.Add(1)
		if f := s.onChange.Load(); f != nil {
			(*f)()
		}
		s.wake()
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { changed() },
		UpdateFunc: func(any, any) { changed() },
		DeleteFunc: func(any) { changed() },
	}
	if _, err := s.queues.AddEventHandler(handler); err != nil {
		return nil, fmt.Errorf("queues: %w", err)
	}
	nsChanged := func(old, obj any) {
		o, _ := old.(*corev1.Namespace)
		n, _ := obj.(*corev1.Namespace)
		if o != nil && n != nil && o.Labels[NamespaceLabel] == n.Labels[NamespaceLabel] {
			return
		}
		if f := s.onChange.Load(); f != nil {
			(*f)()
		}
	}
	if _, err := s.nsInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: nsChanged,
	}); err != nil {
		return nil, fmt.Errorf("queues: %w", err)
	}
	return s, nil
}

// transform keeps the typed Queue in the store, or the unstructured
// object when it does not decode (Set refuses it, saying why).
func transform(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	q, err := FromUnstructured(u)
	if err != nil {
		return obj, nil
	}
	return q, nil
}

// OnChange sets f to be called on every change of a Queue or of a
// namespace's label gpud.io/queue (the scheduler's Wake, so that the next
// cycle starts at once).
func (s *Source) OnChange(f func()) { s.onChange.Store(&f) }

// Collectors are the Source's metrics, for the scheduler's registry:
// gpud_scheduler_queue_crd_served and
// gpud_scheduler_queue_crd_removed_total.
func (s *Source) Collectors() []prometheus.Collector {
	return []prometheus.Collector{s.servedGauge, s.removed}
}

// Run runs the informers and the status writer until ctx ends. While the
// Queue CRD is not served it asks discovery every RecheckInterval and
// starts the informers once it is (an error of discovery is logged and
// asked again). Once it is served, discovery is asked as often whether it
// still is: a CRD deleted while the scheduler runs sends it back to the
// --queues file (logged, counted), until the CRD is installed again.
func (s *Source) Run(ctx context.Context) error {
	if !s.served.Load() {
		t := time.NewTicker(s.cfg.RecheckInterval)
		defer t.Stop()
		for !s.served.Load() {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
			ok, err := Installed(s.cfg.Discovery)
			if err != nil {
				s.cfg.Log.Warn("queue CRD not checked", "err", err)
				continue
			}
			if ok {
				s.cfg.Log.Info("queue CRD installed: watching Queue objects", "crd", Resource+"."+GroupVersion.Group)
				s.served.Store(true)
			}
		}
		t.Stop()
	}
	go s.writeStatus(ctx)
	if s.cfg.Discovery != nil {
		go s.recheck(ctx)
	}
	go func() {
		// The tree changes when the informers have synced (Set serves the
		// file's until then): the next cycle should not wait for a resync.
		if cache.WaitForCacheSync(ctx.Done(), s.queues.HasSynced, s.nsInf.HasSynced) {
			if f := s.onChange.Load(); f != nil {
				(*f)()
			}
		}
	}()
	return informers.Run(ctx, s.queues, s.nsInf)
}

// recheck asks discovery every RecheckInterval whether the Queue CRD is
// still served, and switches the Source between the Queue objects and the
// --queues file alone when that changes. The informers keep running: once
// the CRD is back, their reflectors list the objects again.
func (s *Source) recheck(ctx context.Context) {
	t := time.NewTicker(s.cfg.RecheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ok, err := Installed(s.cfg.Discovery)
		if err != nil {
			s.cfg.Log.Warn("queue CRD not checked", "err", err)
			continue
		}
		if ok == s.served.Load() {
			continue
		}
		s.served.Store(ok)
		s.gen.Add(1)
		if ok {
			s.cfg.Log.Info("queue CRD installed again: watching Queue objects", "crd", Resource+"."+GroupVersion.Group)
		} else {
			s.removed.Inc()
			s.cfg.Log.Warn("queue CRD deleted: back to the --queues file, each pod's queue its label", "crd", Resource+"."+GroupVersion.Group,
				"file_queues", len(s.cfg.File))
		}
		if f := s.onChange.Load(); f != nil {
			(*f)()
		}
	}
}

// Served reports whether the API server serves Queue objects (as
// Discovery last said; true without Discovery).
func (s *Source) Served() bool { return s.served.Load() }

// Synced reports whether both informers have synced; true while the
// Queue CRD is not served (there is nothing to wait for).
func (s *Source) Synced() bool { return !s.served.Load() || informers.Synced(s.queues, s.nsInf) }

// live: the Queue objects are served and their informers synced.
func (s *Source) live() bool { return s.served.Load() && informers.Synced(s.queues, s.nsInf) }

// Current is the queue tree now, rebuilt only when a Queue changed.
func (s *Source) Current() *Set {
	gen := s.gen.Load()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cached != nil && s.cacheGen == gen {
		return s.cached
	}
	objs, bad := s.objects()
	prev := s.cached
	s.cached, s.cacheGen = resolve(objs, bad, s.cfg.File, s.cfg.FileReservations), gen
	for _, name := range sortedNames(s.cached.Refused) {
		if prev == nil || fmt.Sprint(prev.Refused[name]) != fmt.Sprint(s.cached.Refused[name]) {
			s.cfg.Log.Warn("queue refused", "queue", name, "err", s.cached.Refused[name])
		}
	}
	return s.cached
}

func (s *Source) objects() ([]*Queue, map[string]error) {
	var objs []*Queue
	bad := map[string]error{}
	for _, o := range s.queues.GetStore().List() {
		switch q := o.(type) {
		case *Queue:
			objs = append(objs, q)
		case *unstructured.Unstructured:
			_, err := FromUnstructured(q)
			bad[q.GetName()] = err
		}
	}
	return objs, bad
}

// Set is the scheduler's Config.QueueSet: this cycle's queues,
// reservations and each pod's queue (Set.QueueOf with its namespace's
// label).
//
// Until the Queue objects are served and read, it is the --queues file's
// tree, and each pod's queue its label.
func (s *Source) Set() ([]jobs.Queue, []jobs.Reservation, func(*corev1.Pod) (string, error)) {
	if !s.live() {
		return s.cfg.File, s.cfg.FileReservations, nil
	}
	set := s.Current()
	store := s.nsInf.GetStore()
	return set.Queues, set.Reservations, func(pod *corev1.Pod) (string, error) {
		var label string
		if obj, ok, _ := store.GetByKey(pod.Namespace); ok {
			if ns, ok := obj.(*corev1.Namespace); ok {
				label = ns.Labels[NamespaceLabel]
			}
		}
		return set.QueueOf(pod, label)
	}
}

// Observe is the scheduler's Config.QueueStatus: what each queue holds
// after a decision and how many pods wait in each leaf. Only the leader
// decides, so only the leader writes the Queues' status.
func (s *Source) Observe(usage map[string]jobs.Resources, pending map[string]int) {
	s.obsMu.Lock()
	s.leading, s.usage, s.pending = true, usage, pending
	s.obsMu.Unlock()
	s.wake()
}

func (s *Source) wake() {
	select {
	case s.poke <- struct{}{}:
	default:
	}
}
