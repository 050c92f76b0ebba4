package main

import (
	"context"
	"flag"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	telemetryv1 "github.com/gpud/gpud/api/telemetry/v1"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/stream"
	"github.com/gpud/gpud/pkg/telemetry"
	"github.com/gpud/gpud/pkg/timeslice"
)

// streamOptions are the telemetry stream's flags of `gpud agent`.
type streamOptions struct {
	addr      string
	tls       stream.CertFiles
	tokenFile string
	insecure  bool
	interval  time.Duration
}

func (o *streamOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.addr, "scheduler-addr", "", "HOST:PORT of the gpud scheduler's telemetry stream (its --telemetry-addr, through the Service); empty: no stream")
	fs.StringVar(&o.tls.Cert, "tls-cert", "", "PEM client certificate of the agents for the telemetry stream, signed by the scheduler's --tls-ca (it proves a gpud agent; --stream-token-file proves the node); read again at each reconnect")
	fs.StringVar(&o.tokenFile, "stream-token-file", "", "projected ServiceAccount token of this agent's pod (audience: the scheduler's --telemetry-token-audience), which proves the node to the scheduler; read again at each reconnect (the kubelet rotates it)")
	fs.StringVar(&o.tls.Key, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&o.tls.CA, "tls-ca", "", "PEM CA bundle that signs the scheduler's certificate")
	fs.BoolVar(&o.insecure, "stream-insecure", false, "stream without TLS (only to a scheduler started with --telemetry-insecure, for tests)")
	fs.DurationVar(&o.interval, "stream-interval", stream.DefaultInterval, "how often the agent streams device samples to the scheduler (events go at once); the sampler then sweeps at least this often")
}

func (o *streamOptions) validate() []error {
	anyTLS := o.tls.Cert != "" || o.tls.Key != "" || o.tls.CA != "" || o.tokenFile != ""
	var errs []error
	if o.interval < stream.MinInterval || o.interval > stream.MaxInterval {
		errs = append(errs, flagErr("stream-interval", "%s: want %s to %s", o.interval, stream.MinInterval, stream.MaxInterval))
	}
	if o.addr == "" {
		if anyTLS || o.insecure {
			errs = append(errs, flagErr("scheduler-addr", "empty, but --tls-*, --stream-token-file or --stream-insecure given: set the scheduler's HOST:PORT"))
		}
		return errs
	}
	if err := validateAddr("scheduler-addr", o.addr); err != nil {
		errs = append(errs, err)
	}
	switch {
	case o.insecure && anyTLS:
		errs = append(errs, flagErr("stream-insecure", "given with --tls-cert/--tls-key/--tls-ca/--stream-token-file: choose mutual TLS and a token, or neither"))
	case !o.insecure:
		if err := o.tls.Validate(); err != nil {
			errs = append(errs, flagErr("scheduler-addr", "%s needs mutual TLS: %w", o.addr, err))
		}
		if o.tokenFile == "" {
			errs = append(errs, flagErr("stream-token-file", "empty: the scheduler at %s needs this pod's ServiceAccount token to prove the node", o.addr))
		}
	}
	return errs
}

// streamDeps are what the stream reads on the agent.
type streamDeps struct {
	node      string
	inventory func() gpu.Inventory
	changed   func() <-chan struct{} // the inventory store's change channel
	sharing   *timeslice.Runtime     // nil: no sharing
	snapshot  func() *telemetry.Snapshot
	metrics   prometheus.Registerer
	log       *slog.Logger
}

// agentStream is the agent's stream: the client, fed by the sampler's
// snapshots, the health monitor's Xids and the inventory's changes.
type agentStream struct {
	client    *stream.Client
	deps      streamDeps
	lastSweep uint64
}

// newStream builds the stream task; nil without --scheduler-addr. The
// certificate files are read here, before anything starts.
func (o *streamOptions) newStream(deps streamDeps) (*agentStream, error) {
	if o.addr == "" {
		return nil, nil
	}
	var certs *stream.Certs
	var token func() (string, error)
	if !o.insecure {
		var err error
		if certs, err = stream.LoadCerts(o.tls, deps.log); err != nil {
			return nil, flagErr("tls-cert", "%w", err)
		}
		token = stream.TokenFile(o.tokenFile)
		if _, err := token(); err != nil {
			return nil, flagErr("stream-token-file", "%w", err)
		}
	}
	a := &agentStream{deps: deps}
	c, err := stream.NewClient(stream.Config{Addr: o.addr, Node: deps.node, Certs: certs, Token: token, Insecure: o.insecure, Interval: o.interval,
		Hello: a.hello, Samples: a.samples, Version: version, Log: deps.log})
	if err != nil {
		return nil, flagErr("scheduler-addr", "%w", err)
	}
	a.client = c
	for _, col := range c.Collectors() {
		if err := deps.metrics.Register(col); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// OnXid is the health monitor's Xid subscriber: every Xid goes out at
// once; an ignored one (an application fault) carries no health.
func (a *agentStream) OnXid(gpuUUID string, xid uint64) {
	ev := &telemetryv1.Event{Kind: telemetryv1.Event_KIND_XID, DeviceUuid: gpuUUID, Xid: xid, AtUnixNanos: time.Now().UnixNano()}
	a.client.Event(ev)
}

// Run streams until ctx ends: the client, and the watcher of inventory
// changes that turns them into health and layout events.
func (a *agentStream) Run(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.watch(ctx)
	}()
	err := a.client.Run(ctx)
	<-done
	return err
}

// hello is the node snapshot: every GPU, then its MIG devices.
func (a *agentStream) hello() *telemetryv1.Hello {
	return &telemetryv1.Hello{Devices: a.devices(a.deps.inventory())}
}

func protoHealth(h gpu.Health) telemetryv1.Health {
	switch h {
	case gpu.Healthy:
		return telemetryv1.Health_HEALTH_HEALTHY
	case gpu.Unhealthy:
		return telemetryv1.Health_HEALTH_UNHEALTHY
	case gpu.Lost:
		return telemetryv1.Health_HEALTH_LOST
	}
	return telemetryv1.Health_HEALTH_UNSPECIFIED
}

func (a *agentStream) devices(inv gpu.Inventory) []*telemetryv1.Device {
	var cfg timeslice.Config
	if a.deps.sharing != nil {
		cfg = a.deps.sharing.Sharing()
	}
	var out []*telemetryv1.Device
	for _, g := range inv.GPUs {
		d := &telemetryv1.Device{Uuid: g.UUID, Model: g.Name, MemoryTotalBytes: g.MemoryBytes, MigEnabled: g.MIGEnabled,
			Health: protoHealth(g.Health), HealthReason: g.HealthReason}
		if sh, ok := cfg.For(g.UUID, g.Index); ok && !sh.Exclusive {
			d.Sharing, d.Replicas = "timeslice", uint32(sh.Count())
		}
		out = append(out, d)
		for _, m := range g.MIGDevices {
			h := m.Health
			if h == "" {
				h = g.Health // a slice without its own error shares its GPU's
			}
			out = append(out, &telemetryv1.Device{Uuid: m.UUID, ParentUuid: g.UUID, Model: g.Name, MemoryTotalBytes: m.MemoryBytes,
				MigProfile: m.Profile, Health: protoHealth(h), HealthReason: m.HealthReason})
		}
	}
	return out
}

// Field indexes of the values the stream carries.
var (
	fieldGPUUtil  = fieldIndex("DCGM_FI_DEV_GPU_UTIL")
	fieldSMActive = fieldIndex("DCGM_FI_PROF_SM_ACTIVE")
	fieldFBUsed   = fieldIndex("DCGM_FI_DEV_FB_USED")
	fieldPower    = fieldIndex("DCGM_FI_DEV_POWER_USAGE")
	fieldTemp     = fieldIndex("DCGM_FI_DEV_GPU_TEMP")
)

func fieldIndex(name string) int {
	for i := 0; telemetry.FieldName(i) != ""; i++ {
		if telemetry.FieldName(i) == name {
			return i
		}
	}
	return -1
}

// value returns a device's field when it was read and is finite.
func value(d *telemetry.DeviceSnapshot, i int) (float64, bool) {
	if i < 0 || d.Unsupported[i] || d.At[i].IsZero() {
		return 0, false
	}
	v := d.Values[i]
	return v, v == v && v-v == 0 // not NaN, not ±Inf
}

// samples converts the sampler's newest sweep; nil when there is none
// newer than the last one sent.
func (a *agentStream) samples() *telemetryv1.Samples {
	snap := a.deps.snapshot()
	if snap == nil || snap.Sweeps == a.lastSweep {
		return nil
	}
	a.lastSweep = snap.Sweeps
	return convertSnapshot(snap)
}

func convertSnapshot(snap *telemetry.Snapshot) *telemetryv1.Samples {
	out := &telemetryv1.Samples{TakenUnixNanos: snap.Taken.UnixNano(), Devices: make([]*telemetryv1.DeviceSample, 0, len(snap.Devices))}
	byUUID := make(map[string]*telemetryv1.DeviceSample, len(snap.Devices))
	for i := range snap.Devices {
		d := &snap.Devices[i]
		s := &telemetryv1.DeviceSample{Uuid: d.UUID}
		if v, ok := value(d, fieldSMActive); ok && d.GPM {
			s.SmUtilPercent = ptrTo(min(max(v*100, 0), 100))
		} else if v, ok := value(d, fieldGPUUtil); ok {
			s.SmUtilPercent = ptrTo(min(max(v, 0), 100))
		}
		if v, ok := value(d, fieldFBUsed); ok && v >= 0 {
			s.MemoryUsedBytes = ptrTo(uint64(v * (1 << 20))) // DCGM's MiB
		}
		if v, ok := value(d, fieldPower); ok && v >= 0 {
			s.PowerWatts = ptrTo(v)
		}
		if v, ok := value(d, fieldTemp); ok {
			s.TemperatureCelsius = ptrTo(v)
		}
		out.Devices = append(out.Devices, s)
		byUUID[d.UUID] = s
	}
	for _, p := range snap.Processes {
		s := byUUID[p.DeviceUUID]
		if s == nil {
			continue
		}
		s.Processes = append(s.Processes, &telemetryv1.ProcessMemory{Pid: p.PID, UsedBytes: p.UsedBytes, PodUid: p.PodUID,
			Namespace: p.Namespace, Pod: p.Pod, Container: p.Container})
	}
	return out
}

func ptrTo[T any](v T) *T { return &v }

// watch turns inventory changes into events: a device's health change
// (GPU lost, ECC, other), and a new device set (MIG layout) or sharing.
func (a *agentStream) watch(ctx context.Context) {
	prev := a.deps.inventory()
	var sharingChanged <-chan struct{}
	if a.deps.sharing != nil {
		sharingChanged = a.deps.sharing.SharingChanged()
	}
	for {
		changed := a.deps.changed()
		select {
		case <-ctx.Done():
			return
		case <-changed:
			cur := a.deps.inventory()
			for _, ev := range inventoryEvents(a.devices(prev), a.devices(cur)) {
				a.client.Event(ev)
			}
			prev = cur
		case <-sharingChanged:
			sharingChanged = a.deps.sharing.SharingChanged()
			a.client.Event(&telemetryv1.Event{Kind: telemetryv1.Event_KIND_SHARING, AtUnixNanos: time.Now().UnixNano(), Devices: a.devices(a.deps.inventory())})
		}
	}
}

// inventoryEvents are the events from one device list to the next: a
// MIG_LAYOUT event with the new list when devices came or went, then one
// health event per device whose health or its reason changed.
func inventoryEvents(prev, cur []*telemetryv1.Device) []*telemetryv1.Event {
	now := time.Now().UnixNano()
	old := make(map[string]*telemetryv1.Device, len(prev))
	for _, d := range prev {
		old[d.GetUuid()] = d
	}
	var out []*telemetryv1.Event
	layout := len(prev) != len(cur)
	for _, d := range cur {
		o, ok := old[d.GetUuid()]
		if !ok {
			layout = true
			continue
		}
		if o.GetMigEnabled() != d.GetMigEnabled() {
			layout = true
		}
		if o.GetHealth() == d.GetHealth() && o.GetHealthReason() == d.GetHealthReason() {
			continue
		}
		kind := telemetryv1.Event_KIND_HEALTH
		switch {
		case d.GetHealth() == telemetryv1.Health_HEALTH_LOST:
			kind = telemetryv1.Event_KIND_GPU_LOST
		case strings.Contains(strings.ToLower(d.GetHealthReason()), "ecc"):
			kind = telemetryv1.Event_KIND_ECC
		}
		out = append(out, &telemetryv1.Event{Kind: kind, DeviceUuid: d.GetUuid(), AtUnixNanos: now, Health: d.GetHealth(), Reason: d.GetHealthReason()})
	}
	if layout {
		out = append([]*telemetryv1.Event{{Kind: telemetryv1.Event_KIND_MIG_LAYOUT, AtUnixNanos: now, Devices: cur}}, out...)
	}
	return out
}
