package dra

import (
	"context"
	"errors"
	"fmt"
	"github.com/gpud/gpud/pkg/devnodes"
	"log/slog"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/go-logr/logr"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpud/gpud/pkg/gpu"
)

// InventorySource is the node's inventory and its change notifications
// (a *discovery.Store).
type InventorySource interface {
	// Inventory returns the latest inventory and whether one was read yet.
	Inventory() (gpu.Inventory, bool)
	// InventoryChanged returns a channel closed at the next change.
	InventoryChanged() <-chan struct{}
}

// Options configures a [Driver]. Directories are the caller's: the package
// has no defaults for them.
type Options struct {
	// NodeName is the node and the pool name. Required.
	NodeName string
	// KubeClient publishes ResourceSlices and reads ResourceClaims.
	// Required.
	KubeClient kubernetes.Interface
	// PluginDir holds dra.sock and the claim checkpoint, usually
	// /var/lib/kubelet/plugins/gpu.gpud.io. Required; created if missing.
	PluginDir string
	// RegistryDir is where the kubelet looks for registration sockets,
	// usually /var/lib/kubelet/plugins_registry. Required; must exist.
	RegistryDir string
	// CDIDir receives the CDI specs of prepared claims, usually
	// /var/run/cdi. Required.
	CDIDir string
	// Inventory is the node's inventory. Required.
	Inventory InventorySource
	// NodeState completes an inventory into the slice builder's input
	// (MIG catalogs, exclusive-only and busy GPUs, PCIe roots); nil means
	// the inventory alone (no dynamic MIG devices).
	NodeState func(gpu.Inventory) NodeState
	// Changed returns a channel closed at the next change the inventory
	// does not show (the sharing config, a MIG catalog), which NodeState
	// reads; nil means none. Like InventoryChanged, it is called before
	// the state it guards is read, so no change is missed.
	Changed func() <-chan struct{}
	// MIG creates and destroys dynamic MIG devices; nil: they cannot be
	// prepared. It should make the inventory source rediscover after a
	// change so the slices follow.
	MIG MIGManager
	// MPSRoot is [PreparerConfig.MPSRoot].
	MPSRoot string
	// DeviceFiles is [PreparerConfig.DeviceFiles].
	DeviceFiles devnodes.Files
	// DriverEdits is [PreparerConfig.DriverEdits].
	DriverEdits cdispec.ContainerEdits
	// HealthResend is how often device health is resent to the kubelet,
	// which forgets it after HealthTimeout; zero means 10s.
	HealthResend time.Duration
	// PublishCheck is how often the driver checks that the API server
	// holds the ResourceSlices it built (see [Driver.Published]); zero
	// means 10s.
	PublishCheck time.Duration
	// Logger may be nil.
	Logger *slog.Logger
}

// healthTimeout is how long the kubelet keeps a device's reported health.
const healthTimeout = 30 * time.Second

// Validate reports every missing required option.
func (o Options) Validate() error {
	var errs []error
	if o.NodeName == "" {
		errs = append(errs, errors.New("dra: NodeName is required"))
	}
	if o.KubeClient == nil {
		errs = append(errs, errors.New("dra: KubeClient is required"))
	}
	if o.PluginDir == "" || o.RegistryDir == "" || o.CDIDir == "" {
		errs = append(errs, errors.New("dra: PluginDir, RegistryDir and CDIDir are required"))
	}
	if o.Inventory == nil {
		errs = append(errs, errors.New("dra: Inventory is required"))
	}
	if o.PublishCheck < 0 {
		errs = append(errs, fmt.Errorf("dra: PublishCheck %v must not be negative", o.PublishCheck))
	}
	if o.HealthResend < 0 || o.HealthResend >= healthTimeout {
		errs = append(errs, fmt.Errorf("dra: HealthResend %v must be under %v", o.HealthResend, healthTimeout))
	}
	return errors.Join(errs...)
}

// Driver is the gpu.gpud.io DRA kubelet plugin: it registers with the
// kubelet, serves the DRA gRPC API through [Preparer], publishes the
// node's ResourceSlices and reports device health. Use it through
// [Driver.Run]; a Driver runs once.
type Driver struct {
	opts Options
	log  *slog.Logger
	prep *Preparer

	mu      sync.Mutex
	pub     Published
	changed chan struct{} // closed and replaced when pub changes

	ready chan struct{}
	fatal chan error

	published publishState // the publish checks' outcome (published.go)
}

var _ kubeletplugin.DRAPlugin = (*Driver)(nil)

// New checks opts and loads the claim checkpoint from PluginDir.
func New(opts Options) (*Driver, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.HealthResend == 0 {
		opts.HealthResend = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	d := &Driver{opts: opts, log: opts.Logger.With("component", "dra"), changed: make(chan struct{}),
		ready: make(chan struct{}), fatal: make(chan error, 1)}
	if err := mkdir(opts.PluginDir); err != nil {
		return nil, err
	}
	prep, err := NewPreparer(PreparerConfig{NodeName: opts.NodeName, StateDir: opts.PluginDir, CDIDir: opts.CDIDir,
		Devices: d.Devices, MIG: opts.MIG, MPSRoot: opts.MPSRoot, DeviceFiles: opts.DeviceFiles, DriverEdits: opts.DriverEdits, Log: d.log})
	if err != nil {
		return nil, err
	}
	d.prep = prep
	return d, nil
}

// Ready is closed once the driver published its first slices and serves
// the kubelet.
func (d *Driver) Ready() <-chan struct{} { return d.ready }

// Devices returns the device table of the last publish.
func (d *Driver) Devices() map[string]DeviceRef {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pub.Devices
}

// Preparer returns the driver's preparer (for status pages and tests).
func (d *Driver) Preparer() *Preparer { return d.prep }

// Run waits for the first inventory, starts the kubelet plugin, publishes
// the slices and republishes them at every change until ctx ends; then it
// stops the plugin (sockets removed, publishing stopped) and returns nil.
// A fatal error of the plugin helper ends it with that error.
func (d *Driver) Run(ctx context.Context) error {
	ctx = klog.NewContext(ctx, logr.FromSlogHandler(d.log.Handler()))
	// The publish check runs from the start: the first publish waits,
	// silently, until the API server answers, and /readyz says why.
	checkCtx, stopCheck := context.WithCancel(ctx)
	var checking sync.WaitGroup
	checking.Go(func() { d.checkPublished(checkCtx) })
	defer checking.Wait()
	defer stopCheck()
	// wake is taken before each read of the state, so a change after the
	// read (while the slices are built or published, or the plugin
	// starts) closes it and is republished.
	wake, st, err := d.firstState(ctx)
	if err != nil || st == nil {
		return err
	}
	if err := d.update(*st); err != nil {
		return err
	}
	helper, err := kubeletplugin.Start(ctx, d,
		kubeletplugin.DriverName(DriverName),
		kubeletplugin.NodeName(d.opts.NodeName),
		kubeletplugin.KubeClient(d.opts.KubeClient),
		kubeletplugin.PluginDataDirectoryPath(d.opts.PluginDir),
		kubeletplugin.RegistrarDirectoryPath(d.opts.RegistryDir),
		kubeletplugin.CDIDirectory(d.opts.CDIDir),
		// The preparer serializes the calls of one claim itself, so
		// unrelated claims (a slow MIG create among them) run in parallel.
		kubeletplugin.Serialize(false),
	)
	if err != nil {
		return fmt.Errorf("dra: start kubelet plugin: %w", err)
	}
	defer helper.Stop()
	if err := d.publish(ctx, helper); err != nil {
		return err
	}
	d.log.Info("dra driver started", "node", d.opts.NodeName, "devices", len(d.Devices()))
	close(d.ready)
	for {
		select {
		case <-ctx.Done():
			d.log.Info("dra driver stopping")
			return nil
		case err := <-d.fatal:
			return fmt.Errorf("dra: kubelet plugin: %w", err)
		case <-wake.inventory:
		case <-wake.other:
		}
		wake = d.wakeups()
		if st, ok := d.state(); ok {
			if err := d.update(st); err != nil {
				d.log.Warn("slices not rebuilt", "err", err)
				continue
			}
			if err := d.publish(ctx, helper); err != nil {
				return err
			}
		}
	}
}

// wakeups are the channels closed at the next change of the driver's
// sources.
type wakeups struct {
	inventory, other <-chan struct{}
}

// wakeups takes the sources' next-change channels; call it before reading
// the state they guard.
func (d *Driver) wakeups() wakeups {
	w := wakeups{inventory: d.opts.Inventory.InventoryChanged()}
	if d.opts.Changed != nil {
		w.other = d.opts.Changed()
	}
	return w
}

// firstState waits for the first inventory and returns it with the
// wake-ups taken before it was read; a nil state when ctx ended first.
func (d *Driver) firstState(ctx context.Context) (wakeups, *NodeState, error) {
	for {
		w := d.wakeups()
		if st, ok := d.state(); ok {
			return w, &st, nil
		}
		select {
		case <-ctx.Done():
			return w, nil, nil
		case <-w.inventory:
		}
	}
}

func (d *Driver) state() (NodeState, bool) {
	inv, ok := d.opts.Inventory.Inventory()
	if !ok {
		return NodeState{}, false
	}
	if d.opts.NodeState == nil {
		return NodeState{Inventory: inv}, true
	}
	st := d.opts.NodeState(inv)
	st.Inventory = inv
	return st, true
}

// update rebuilds the slices and wakes health watchers.
func (d *Driver) update(st NodeState) error {
	pub, err := Build(d.opts.NodeName, st)
	if err != nil {
		return err
	}
	for _, n := range pub.Notes {
		d.log.Warn("device not published", "reason", n)
	}
	d.mu.Lock()
	d.pub = pub
	close(d.changed)
	d.changed = make(chan struct{})
	d.mu.Unlock()
	return nil
}

func (d *Driver) publish(ctx context.Context, helper *kubeletplugin.Helper) error {
	d.mu.Lock()
	res := d.pub.Resources
	n := len(d.pub.Devices)
	d.mu.Unlock()
	if err := helper.PublishResources(ctx, res); err != nil {
		return fmt.Errorf("dra: publish resource slices: %w", err)
	}
	d.log.Debug("resource slices published", "devices", n)
	return nil
}

// PrepareResourceClaims implements [kubeletplugin.DRAPlugin].
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	return d.prep.Prepare(ctx, claims)
}

// UnprepareResourceClaims implements [kubeletplugin.DRAPlugin].
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	return d.prep.Unprepare(ctx, claims)
}

// HandleError implements [kubeletplugin.DRAPlugin]: recoverable errors
// (publishing) are logged; others end [Driver.Run].
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	if ctx.Err() != nil || errors.Is(err, context.Canceled) {
		d.log.Debug("kubelet plugin error while stopping", "msg", msg, "err", err)
		return
	}
	if errors.Is(err, kubeletplugin.ErrRecoverable) {
		// Publishing errors are the library's only recoverable ones;
		// Published names the latest until a check finds the slices.
		d.notePublishError(msg, err)
		d.log.Warn("kubelet plugin error", "msg", msg, "err", err)
		return
	}
	select {
	case d.fatal <- fmt.Errorf("%s: %w", msg, err):
	default:
	}
}

// WatchHealthStatus implements [kubeletplugin.DRAPlugin]: it sends every
// published device's health now, at each change, and every HealthResend.
func (d *Driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	t := time.NewTicker(d.opts.HealthResend)
	defer t.Stop()
	for {
		d.mu.Lock()
		report, changed := d.healthReport(), d.changed
		d.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case reports <- report:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-t.C:
		}
	}
}

func (d *Driver) healthReport() kubeletplugin.DeviceHealthReport {
	names := make([]string, 0, len(d.pub.Health))
	for n := range d.pub.Health {
		names = append(names, n)
	}
	sort.Strings(names)
	now := time.Now()
	r := kubeletplugin.DeviceHealthReport{Devices: make([]kubeletplugin.DeviceHealth, 0, len(names))}
	for _, n := range names {
		h := d.pub.Health[n]
		status := kubeletplugin.HealthStatusHealthy
		if h != gpu.Healthy {
			status = kubeletplugin.HealthStatusUnhealthy
		}
		r.Devices = append(r.Devices, kubeletplugin.DeviceHealth{PoolName: d.opts.NodeName, DeviceName: n, Health: status,
			LastUpdated: now, HealthCheckTimeout: healthTimeout, Message: string(h)})
	}
	return r
}

func mkdir(dir string) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("dra: create %s: %w", dir, err)
	}
	return nil
}
