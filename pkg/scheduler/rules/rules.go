package rules

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
	schedcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultbinder"
	plfeature "k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/interpodaffinity"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/nodeaffinity"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/nodename"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/nodeports"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/noderesources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/nodeunschedulable"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/nodevolumelimits"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/podtopologyspread"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/queuesort"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/tainttoleration"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/volumebinding"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/volumerestrictions"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/volumezone"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	schedmetrics "k8s.io/kubernetes/pkg/scheduler/metrics"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
)

// Filters are the plugins whose PreFilter and Filter decide where a pod
// may go, in kube-scheduler's default order.
var Filters = []string{
	nodeunschedulable.Name, nodename.Name, tainttoleration.Name, nodeaffinity.Name, nodeports.Name,
	noderesources.Name, volumerestrictions.Name, nodevolumelimits.CSIName, volumebinding.Name,
	volumezone.Name, podtopologyspread.Name, interpodaffinity.Name,
}

// Scores are the plugins whose scores rank the allowed nodes by the pod's
// preferences (preferred node and pod affinity, PreferNoSchedule taints,
// ScheduleAnyway spread), with kube-scheduler's default weights. The
// resource scores (NodeResourcesFit, BalancedAllocation) and
// ImageLocality are left out: how pods pack is gpud's policy.
var Scores = map[string]int32{
	tainttoleration.Name:   3,
	nodeaffinity.Name:      2,
	podtopologyspread.Name: 2,
	interpodaffinity.Name:  2,
}

// Config is what [New] needs. The zero value runs every rule that needs
// no lister (volume rules then pass every pod whose volumes need no
// lookup, and fail the others).
type Config struct {
	// Informers is the factory the volume plugins (PersistentVolumeClaims,
	// PersistentVolumes, StorageClasses, CSINodes, CSIDrivers, ...) and
	// InterPodAffinity (Namespaces) take their listers from. [New]
	// registers them: start the factory after New. Nil: a factory over
	// Client (nil Client: an empty fake is not made; New fails).
	Informers informers.SharedInformerFactory
	// Client is the API client the plugins hold (VolumeBinding reads
	// through it when it binds, which gpud does not ask of it).
	Client kubernetes.Interface
	// Logger receives the plugins' own log lines; zero discards them.
	Logger logr.Logger
	// DeviceClasses finds the DeviceClass serving an extended resource
	// (DRAExtendedResource): NodeResourcesFit then leaves such a resource
	// to the pod's claim on nodes that do not advertise it. Nil: every
	// extended resource must be in a node's allocatable.
	DeviceClasses fwk.DeviceClassResolver
}

// classesOnly is the SharedDRAManager NodeResourcesFit reads in Filter:
// only DeviceClassResolver (the claims are gpud's and anydevice's to
// allocate; no plugin gpud runs reads the rest, which is nil).
type classesOnly struct {
	fwk.SharedDRAManager
	classes fwk.DeviceClassResolver
}

func (c classesOnly) DeviceClassResolver() fwk.DeviceClassResolver { return c.classes }

// Rules runs kube-scheduler's plugins, built from the registry and
// profile it holds, over a snapshot of the cluster kept across cycles.
// One [Cycle] runs at a time.
type Rules struct {
	registry frameworkruntime.Registry
	profile  *config.KubeSchedulerProfile
	cfg      Config
	// csi is the CSINode view NodeVolumeLimits counts attachable volumes by.
	csi *nodevolumelimits.DefaultCSIManager
	// vb is the VolumeBinding plugin every framework shares (once).
	mu sync.Mutex
	vb *volumebinding.VolumeBinding
	// live is the snapshot and framework kept across cycles, guarded by
	// liveMu while a cycle starts.
	liveMu sync.Mutex
	live   *live
	// hints are the plugins' cluster events and queueing hints.
	hints hints
}

// New sets the rules up and registers the informers the plugins read on
// cfg.Informers (start the factory afterwards, then wait for its sync).
func New(ctx context.Context, cfg Config) (*Rules, error) {
	if cfg.Informers == nil {
		if cfg.Client == nil {
			return nil, fmt.Errorf("rules: %w", ErrNoInformers)
		}
		cfg.Informers = informers.NewSharedInformerFactory(cfg.Client, 0)
	}
	if cfg.Logger.GetSink() == nil {
		cfg.Logger = logr.Discard()
	}
	// The framework counts into kube-scheduler's metric vectors; made but
	// never registered, they count nothing (gpud exports its own).
	initMetrics.Do(schedmetrics.InitMetrics)
	prof, err := profile()
	if err != nil {
		return nil, err
	}
	r := &Rules{profile: prof, cfg: cfg,
		csi: nodevolumelimits.NewCSIManager(cfg.Informers.Storage().V1().CSINodes().Lister())}
	r.registry = registry(func(pl fwk.Plugin) {
		if vb, ok := pl.(*volumebinding.VolumeBinding); ok {
			r.mu.Lock()
			r.vb = vb
			r.mu.Unlock()
		}
	})
	// Building a framework once registers the plugins' informers; its
	// plugins tell which cluster events may help a pod they refused.
	fw, err := r.framework(ctx, schedcache.NewSnapshot(nil, nil))
	if err != nil {
		return nil, err
	}
	if r.hints, err = buildHints(ctx, fw); err != nil {
		return nil, err
	}
	return r, nil
}

var initMetrics sync.Once

// registry is the in-tree plugins this package runs.
func registry(built func(fwk.Plugin)) frameworkruntime.Registry {
	fts := plfeature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate)
	return frameworkruntime.Registry{
		nodeunschedulable.Name:   frameworkruntime.FactoryAdapter(fts, nodeunschedulable.New),
		nodename.Name:            frameworkruntime.FactoryAdapter(fts, nodename.New),
		tainttoleration.Name:     frameworkruntime.FactoryAdapter(fts, tainttoleration.New),
		nodeaffinity.Name:        frameworkruntime.FactoryAdapter(fts, nodeaffinity.New),
		nodeports.Name:           frameworkruntime.FactoryAdapter(fts, nodeports.New),
		noderesources.Name:       frameworkruntime.FactoryAdapter(fts, noderesources.NewFit),
		volumerestrictions.Name:  frameworkruntime.FactoryAdapter(fts, volumerestrictions.New),
		nodevolumelimits.CSIName: frameworkruntime.FactoryAdapter(fts, nodevolumelimits.NewCSI),
		volumebinding.Name:       once(frameworkruntime.FactoryAdapter(fts, volumebinding.New), built),
		volumezone.Name:          frameworkruntime.FactoryAdapter(fts, volumezone.New),
		podtopologyspread.Name:   frameworkruntime.FactoryAdapter(fts, podtopologyspread.New),
		interpodaffinity.Name:    frameworkruntime.FactoryAdapter(fts, interpodaffinity.New),
		// The framework insists on a queue sort and a bind plugin; gpud
		// runs neither.
		queuesort.Name:     queuesort.New,
		defaultbinder.Name: defaultbinder.New,
	}
}

// once makes factory build its plugin once and hand the same one to every
// later framework. VolumeBinding needs it: its volume binder adds event
// handlers (each a goroutine pair holding every PersistentVolume and claim)
// to the shared PV and PVC informers, and a plugin per cycle would add them
// without end. The plugin keeps no reference to the framework that built
// it, and kube-scheduler calls it from parallel goroutines too.
//
// built is told the plugin once it is built.
func once(factory frameworkruntime.PluginFactory, built func(fwk.Plugin)) frameworkruntime.PluginFactory {
	var mu sync.Mutex
	var plugin fwk.Plugin
	return func(ctx context.Context, args runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
		mu.Lock()
		defer mu.Unlock()
		if plugin != nil {
			return plugin, nil
		}
		pl, err := factory(ctx, args, h)
		if err == nil {
			plugin = pl
			built(pl)
		}
		return pl, err
	}
}

// profile is kube-scheduler's default profile (its plugin arguments:
// default spread constraints, hard pod affinity weight, the resources Fit
// scores and ignores) restricted to [Filters] and [Scores].
func profile() (*config.KubeSchedulerProfile, error) {
	def, err := latest.Default()
	if err != nil {
		return nil, fmt.Errorf("rules: kube-scheduler defaults: %w", err)
	}
	if len(def.Profiles) == 0 {
		return nil, fmt.Errorf("rules: kube-scheduler defaults have no profile")
	}
	p := def.Profiles[0].DeepCopy()
	set := func(names ...string) config.PluginSet {
		var s config.PluginSet
		for _, n := range names {
			s.Enabled = append(s.Enabled, config.Plugin{Name: n})
		}
		return s
	}
	scores := slices.Sorted(func(yield func(string) bool) {
		for n := range Scores {
			if !yield(n) {
				return
			}
		}
	})
	score := config.PluginSet{}
	for _, n := range scores {
		score.Enabled = append(score.Enabled, config.Plugin{Name: n, Weight: Scores[n]})
	}
	p.Plugins = &config.Plugins{
		QueueSort: set(queuesort.Name),
		PreFilter: set(Filters...),
		Filter:    set(Filters...),
		PreScore:  set(scores...),
		Score:     score,
		Bind:      set(defaultbinder.Name),
	}
	keep := map[string]bool{}
	for _, n := range append(slices.Clone(Filters), scores...) {
		keep[n] = true
	}
	p.PluginConfig = slices.DeleteFunc(p.PluginConfig, func(c config.PluginConfig) bool { return !keep[c.Name] })
	return p, nil
}

// framework builds the upstream framework over snap.
func (r *Rules) framework(ctx context.Context, snap frameworkSnapshot) (framework.Framework, error) {
	// NewFramework starts a metrics goroutine that lives until its
	// context ends (kube-scheduler builds one framework for its life;
	// gpud one per cycle): end it once the framework is built. Nothing
	// else of the plugins gpud runs holds on to this context, and the
	// recorder drops what it cannot send (gpud exports its own metrics).
	ctx, stop := context.WithCancel(klog.NewContext(ctx, r.cfg.Logger))
	defer stop()
	opts := []frameworkruntime.Option{
		frameworkruntime.WithInformerFactory(r.cfg.Informers),
		frameworkruntime.WithClientSet(r.cfg.Client),
		frameworkruntime.WithSnapshotSharedLister(snap),
		frameworkruntime.WithSharedCSIManager(r.csi),
		frameworkruntime.WithLogger(r.cfg.Logger),
		frameworkruntime.WithParallelism(1)}
	if r.cfg.DeviceClasses != nil {
		opts = append(opts, frameworkruntime.WithSharedDRAManager(classesOnly{classes: r.cfg.DeviceClasses}))
	}
	fw, err := frameworkruntime.NewFramework(ctx, r.registry, r.profile, opts...)
	if err != nil {
		return nil, fmt.Errorf("rules: scheduler framework: %w", err)
	}
	return fw, nil
}
