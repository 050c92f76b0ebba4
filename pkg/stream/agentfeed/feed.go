package agentfeed

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	telemetryv1 "github.com/gpud/gpud/api/telemetry/v1"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/stream"
	"github.com/gpud/gpud/pkg/telemetry"
	"github.com/gpud/gpud/pkg/timeslice"
)

// Config is what the feed reads on the agent.
type Config struct {
	// Inventory returns the current inventory; Changed, the inventory
	// store's channel closed at its next change. Both are required.
	Inventory func() gpu.Inventory
	Changed   func() <-chan struct{}
	// Sharing is the time-slicing runtime; nil: no sharing.
	Sharing *timeslice.Runtime
	// Snapshot returns the sampler's newest sweep, nil before the first.
	Snapshot func() *telemetry.Snapshot
}

// Validate reports the missing functions.
func (c Config) Validate() error {
	var errs []error
	if c.Inventory == nil || c.Changed == nil {
		errs = append(errs, errors.New("missing Inventory or Changed"))
	}
	if c.Snapshot == nil {
		errs = append(errs, errors.New("missing Snapshot"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("agentfeed: %w", err)
	}
	return nil
}

// Feed is the agent's stream: a [stream.Client] fed by the sampler's
// snapshots, the health monitor's Xids and the inventory's changes.
type Feed struct {
	cfg       Config
	client    *stream.Client
	lastSweep uint64 // read and written by the client's poll only
}

// New builds the feed and its client; client's Hello and Samples are set
// here, the rest (address, node, credentials, interval) is the caller's.
// The client's own errors are returned unwrapped.
func New(cfg Config, client stream.Config) (*Feed, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	f := &Feed{cfg: cfg}
	client.Hello, client.Samples = f.hello, f.samples
	c, err := stream.NewClient(client)
	if err != nil {
		return nil, err
	}
	f.client = c
	return f, nil
}

// Collectors are the client's metrics, for the caller to register.
func (f *Feed) Collectors() []prometheus.Collector { return f.client.Collectors() }

// OnXid is the health monitor's Xid subscriber: every Xid goes out at
// once; an ignored one (an application fault) carries no health.
func (f *Feed) OnXid(gpuUUID string, xid uint64) {
	f.client.Event(&telemetryv1.Event{Kind: telemetryv1.Event_KIND_XID, DeviceUuid: gpuUUID, Xid: xid, AtUnixNanos: time.Now().UnixNano()})
}

// Run streams until ctx ends: the client, and the watcher of inventory
// changes that turns them into health and layout events.
func (f *Feed) Run(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.watch(ctx)
	}()
	err := f.client.Run(ctx)
	<-done
	return err
}

// hello is the node snapshot: every GPU, then its MIG devices.
func (f *Feed) hello() *telemetryv1.Hello {
	return &telemetryv1.Hello{Devices: f.devices(f.cfg.Inventory())}
}

func (f *Feed) devices(inv gpu.Inventory) []*telemetryv1.Device {
	var cfg timeslice.Config
	if f.cfg.Sharing != nil {
		cfg = f.cfg.Sharing.Sharing()
	}
	return devices(inv, cfg)
}

// samples converts the sampler's newest sweep; nil when there is none
// newer than the last one sent.
func (f *Feed) samples() *telemetryv1.Samples {
	snap := f.cfg.Snapshot()
	if snap == nil || snap.Sweeps == f.lastSweep {
		return nil
	}
	f.lastSweep = snap.Sweeps
	return convertSnapshot(snap)
}

// watch turns inventory changes into events: a device's health change
// (GPU lost, ECC, other), and a new device set (MIG layout) or sharing.
func (f *Feed) watch(ctx context.Context) {
	prev := f.cfg.Inventory()
	var sharingChanged <-chan struct{}
	if f.cfg.Sharing != nil {
		sharingChanged = f.cfg.Sharing.SharingChanged()
	}
	for {
		changed := f.cfg.Changed()
		select {
		case <-ctx.Done():
			return
		case <-changed:
			cur := f.cfg.Inventory()
			for _, ev := range inventoryEvents(f.devices(prev), f.devices(cur)) {
				f.client.Event(ev)
			}
			prev = cur
		case <-sharingChanged:
			sharingChanged = f.cfg.Sharing.SharingChanged()
			f.client.Event(&telemetryv1.Event{Kind: telemetryv1.Event_KIND_SHARING, AtUnixNanos: time.Now().UnixNano(), Devices: f.devices(f.cfg.Inventory())})
		}
	}
}
