package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"

	telemetryv1 "github.com/gpud/gpud/api/telemetry/v1"
	"github.com/gpud/gpud/internal/wait"
)

// Defaults and bounds of [Config].
const (
	DefaultInterval   = time.Second
	MinInterval       = 100 * time.Millisecond
	MaxInterval       = time.Minute
	DefaultMaxSamples = 60
	DefaultMaxEvents  = 1024
	DefaultMinBackoff = 250 * time.Millisecond
	DefaultMaxBackoff = 2 * time.Second
	// sendTimeout bounds one Send: a scheduler that stops reading for this
	// long is given up on and the agent reconnects.
	sendTimeout = 10 * time.Second
)

// Config configures an agent's [Client]. Zero values take the documented
// defaults.
type Config struct {
	// Addr is the scheduler's telemetry address, host:port; required.
	Addr string
	// Node is the node name the agent reports for; required. The server
	// accepts it only with a Token held on that node.
	Node string
	// Token returns the bearer token that proves Node (the pod's
	// projected ServiceAccount token, [TokenFile]); called for every
	// connection, so a rotated token is used from the next one on.
	// Required unless Insecure.
	Token func() (string, error)
	// Certs are the agent's certificate and the CA of the scheduler's;
	// nil means Insecure must be set.
	Certs *Certs
	// ServerName is the name the scheduler's certificate must carry;
	// empty uses Addr's host.
	ServerName string
	// Insecure connects without TLS (tests, and schedulers started with
	// --telemetry-insecure).
	Insecure bool
	// Interval is how often Samples is called and its result queued;
	// default [DefaultInterval], [MinInterval] to [MaxInterval].
	Interval time.Duration
	// Hello returns the node snapshot sent first on every connection;
	// required. It is called on the client's goroutine.
	Hello func() *telemetryv1.Hello
	// Samples returns the newest sweep, or nil when there is none newer
	// than the last it returned; required.
	Samples func() *telemetryv1.Samples
	// MaxSamples and MaxEvents bound the queue (see [Client]); defaults
	// [DefaultMaxSamples] and [DefaultMaxEvents].
	MaxSamples, MaxEvents int
	// MinBackoff and MaxBackoff bound the wait between connection
	// attempts (doubling, with jitter); defaults [DefaultMinBackoff] and
	// [DefaultMaxBackoff].
	MinBackoff, MaxBackoff time.Duration
	// Version is the agent's version, sent in Hello.
	Version string
	// Log receives connection changes; nil discards.
	Log *slog.Logger
	// Dialer, if set, opens the TCP connections (tests).
	Dialer func(ctx context.Context, addr string) (net.Conn, error)
}

func (c Config) withDefaults() Config {
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.MaxSamples == 0 {
		c.MaxSamples = DefaultMaxSamples
	}
	if c.MaxEvents == 0 {
		c.MaxEvents = DefaultMaxEvents
	}
	if c.MinBackoff == 0 {
		c.MinBackoff = DefaultMinBackoff
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
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
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		bad("scheduler address %q: want host:port", c.Addr)
	}
	if err := validNodeName(c.Node); err != nil {
		bad("node name: %v", err)
	}
	if (c.Certs == nil || c.Token == nil) && !c.Insecure {
		bad("certificates and a token are required unless Insecure is set")
	}
	if c.Interval < MinInterval || c.Interval > MaxInterval {
		bad("interval %s: want %s to %s", c.Interval, MinInterval, MaxInterval)
	}
	if c.Hello == nil || c.Samples == nil {
		bad("Hello and Samples are required")
	}
	if c.MaxSamples < 1 || c.MaxSamples > 100000 {
		bad("max samples %d: want 1 to 100000", c.MaxSamples)
	}
	if c.MaxEvents < 16 || c.MaxEvents > 100000 {
		bad("max events %d: want 16 to 100000", c.MaxEvents)
	}
	if c.MinBackoff <= 0 || c.MaxBackoff < c.MinBackoff {
		bad("backoff %s to %s: want 0 < min <= max", c.MinBackoff, c.MaxBackoff)
	}
	return errors.Join(errs...)
}

// Client is the agent's end of the stream. Producers call [Client.Event]
// (never blocks) and Config.Samples is polled every Interval; both feed a
// bounded queue: samples drop oldest first when the scheduler is slow or
// absent, events are never dropped but merged per (kind, device) when
// MaxEvents are queued. [Client.Run] keeps one stream open to the
// scheduler, reconnecting with backoff and sending Hello first each time;
// events sent but not acknowledged when a stream breaks are sent again.
type Client struct {
	cfg       Config
	q         *queue
	m         *clientMetrics
	mu        sync.Mutex // guards connected: a stream is open
	connected bool
}

// NewClient checks cfg and returns a client; it starts nothing.
func NewClient(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Client{cfg: cfg, q: newQueue(cfg.MaxSamples, cfg.MaxEvents), m: newClientMetrics()}, nil
}

// Collectors are the client's metrics, for the agent's registry.
func (c *Client) Collectors() []prometheus.Collector { return c.m.collectors(c.q) }

// Event queues ev to be sent at once. It never blocks.
func (c *Client) Event(ev *telemetryv1.Event) {
	if n := c.q.pushEvent(ev); n > 0 {
		c.m.eventsMerged.Add(float64(n))
	}
}

// Connected reports whether a stream is open.
func (c *Client) Connected() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.connected
}

func (c *Client) setConnected(on bool) {
	c.mu.Lock()
	c.connected = on
	c.mu.Unlock()
	if on {
		c.m.connected.Set(1)
	} else {
		c.m.connected.Set(0)
	}
}

// Run polls samples and keeps the stream open until ctx ends; it returns
// nil then. Connection failures are logged and retried, never returned.
func (c *Client) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() { c.poll(ctx) })
	defer wg.Wait()
	backoff := c.cfg.MinBackoff
	for ctx.Err() == nil {
		start := time.Now()
		err := c.connect(ctx)
		if ctx.Err() != nil {
			break
		}
		if time.Since(start) > 4*c.cfg.Interval {
			backoff = c.cfg.MinBackoff // the stream had been up: retry soon
		}
		c.m.reconnects.Inc()
		d := backoff/2 + rand.N(backoff/2+1)
		c.cfg.Log.Warn("telemetry stream down, reconnecting", "addr", c.cfg.Addr, "retry_in", d, "err", err)
		if !wait.Sleep(ctx, d) {
			break
		}
		backoff = min(2*backoff, c.cfg.MaxBackoff)
	}
	return nil
}

// poll queues Config.Samples every Interval.
func (c *Client) poll(ctx context.Context) {
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if s := c.cfg.Samples(); s != nil {
			if n := c.q.pushSamples(s); n > 0 {
				c.m.samplesDropped.Add(float64(n))
			}
		}
	}
}

func (c *Client) dialOptions() ([]grpc.DialOption, error) {
	opts := []grpc.DialOption{
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1 << 10)),
		grpc.WithReadBufferSize(bufferBytes), grpc.WithWriteBufferSize(bufferBytes),
	}
	if c.cfg.Dialer != nil {
		opts = append(opts, grpc.WithContextDialer(c.cfg.Dialer))
	}
	if c.cfg.Insecure {
		return append(opts, grpc.WithTransportCredentials(insecure.NewCredentials())), nil
	}
	name := c.cfg.ServerName
	if name == "" {
		host, _, _ := net.SplitHostPort(c.cfg.Addr) // validated
		name = host
	}
	// A new connection per stream takes the current files: a rotated
	// certificate is used from the next reconnect on.
	return append(opts, grpc.WithTransportCredentials(credentials.NewTLS(c.cfg.Certs.ClientConfig(name)))), nil
}

// connect runs one stream until it fails or ctx ends.
func (c *Client) connect(ctx context.Context) error {
	opts, err := c.dialOptions()
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient("passthrough:///"+c.cfg.Addr, opts...)
	if err != nil {
		return fmt.Errorf("stream: dial %s: %w", c.cfg.Addr, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if c.cfg.Token != nil {
		tok, err := c.cfg.Token()
		if err != nil {
			return err
		}
		ctx = metadata.AppendToOutgoingContext(ctx, authorizationKey, "Bearer "+tok)
	}
	st, err := telemetryv1.NewTelemetryClient(conn).Stream(ctx, grpc.WaitForReady(false))
	if err != nil {
		return fmt.Errorf("stream: open to %s: %w", c.cfg.Addr, err)
	}
	s := &session{c: c, st: st, cancel: cancel, firstAck: make(chan struct{})}
	defer func() { c.q.requeueEvents(s.unacked()) }()
	hello := c.cfg.Hello()
	hello.NodeName = c.cfg.Node
	hello.AgentVersion = c.cfg.Version
	hello.IntervalMillis = uint32(c.cfg.Interval / time.Millisecond)
	if err := s.send(ctx, &telemetryv1.AgentMessage{Kind: &telemetryv1.AgentMessage_Hello{Hello: hello}}, nil); err != nil {
		return err
	}
	recvErr := make(chan error, 1)
	go func() { recvErr <- s.recvAcks() }()
	// The first ack says the server accepted the Hello.
	select {
	case err := <-recvErr:
		return err
	case <-s.firstAck:
	case <-ctx.Done():
		return ctx.Err()
	}
	c.setConnected(true)
	defer c.setConnected(false)
	c.cfg.Log.Info("telemetry stream connected", "addr", c.cfg.Addr, "node", c.cfg.Node)
	for {
		for {
			ev, smp, ok := c.q.pop()
			if !ok {
				break
			}
			msg := &telemetryv1.AgentMessage{}
			if ev != nil {
				msg.Kind = &telemetryv1.AgentMessage_Event{Event: ev}
			} else {
				msg.Kind = &telemetryv1.AgentMessage_Samples{Samples: smp}
			}
			if err := s.send(ctx, msg, ev); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			_ = st.CloseSend()
			if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
				return err
			}
			select {
			case err := <-recvErr:
				return err
			default:
				return ctx.Err()
			}
		case err := <-recvErr:
			return err
		case <-c.q.wake:
		}
	}
}

// session is one open stream: sequence numbers, and the events sent and
// not yet acknowledged.
type session struct {
	c        *Client
	st       grpc.BidiStreamingClient[telemetryv1.AgentMessage, telemetryv1.Ack]
	cancel   context.CancelFunc
	seq      uint64
	firstAck chan struct{}
	once     sync.Once

	mu       sync.Mutex
	inflight []inflightEvent
}

type inflightEvent struct {
	seq uint64
	ev  *telemetryv1.Event
}

// send sends msg with the next sequence number, within sendTimeout.
func (s *session) send(ctx context.Context, msg *telemetryv1.AgentMessage, ev *telemetryv1.Event) error {
	s.seq++
	msg.Seq = s.seq
	if ev != nil {
		s.mu.Lock()
		s.inflight = append(s.inflight, inflightEvent{s.seq, ev})
		s.mu.Unlock()
	}
	t := time.AfterFunc(sendTimeout, s.cancel)
	err := s.st.Send(msg)
	t.Stop()
	if err != nil {
		return fmt.Errorf("stream: send to %s: %w", s.c.cfg.Addr, err)
	}
	s.c.m.sent.WithLabelValues(kindName(msg)).Inc()
	return nil
}

// recvAcks reads acks until the stream ends, releasing acknowledged
// events.
func (s *session) recvAcks() error {
	for {
		ack, err := s.st.Recv()
		if err != nil {
			s.cancel()
			return fmt.Errorf("stream: receive from %s: %w", s.c.cfg.Addr, err)
		}
		s.once.Do(func() { close(s.firstAck) })
		s.mu.Lock()
		i := 0
		for i < len(s.inflight) && s.inflight[i].seq <= ack.GetSeq() {
			i++
		}
		s.inflight = s.inflight[i:]
		s.mu.Unlock()
	}
}

// unacked returns the events sent and not acknowledged.
func (s *session) unacked() []*telemetryv1.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*telemetryv1.Event, len(s.inflight))
	for i, f := range s.inflight {
		out[i] = f.ev
	}
	return out
}

func kindName(m *telemetryv1.AgentMessage) string {
	switch m.GetKind().(type) {
	case *telemetryv1.AgentMessage_Hello:
		return "hello"
	case *telemetryv1.AgentMessage_Samples:
		return "samples"
	default:
		return "event"
	}
}
