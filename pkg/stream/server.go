package stream

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	telemetryv1 "github.com/gpud/gpud/api/telemetry/v1"
)

// Defaults of [ServerConfig].
const (
	DefaultMaxStreams   = 10000
	DefaultHelloTimeout = 10 * time.Second
	// idleIntervals is how many of its intervals a stream may stay silent
	// (no sample, no event) before the server ends it.
	idleIntervals = 30
	// leaderCheck is how often an open stream checks that this replica
	// still leads.
	leaderCheck = 500 * time.Millisecond
)

// ServerConfig configures a [Server]. Zero values take the documented
// defaults.
type ServerConfig struct {
	// Ready reports whether this replica may take streams (it leads);
	// streams are refused while it is false, and open ones end within
	// half a second of it turning false. Nil: always.
	Ready func() bool
	// Insecure trusts the node name of the Hello without a client
	// certificate (--telemetry-insecure). Otherwise every stream must
	// come over mutual TLS with a certificate naming its node.
	Insecure bool
	// MaxDevices bounds the devices of one node; default
	// [DefaultMaxDevices].
	MaxDevices int
	// MaxStreams bounds the open streams; default [DefaultMaxStreams].
	MaxStreams int
	// HelloTimeout is how long a new stream may take to send its Hello;
	// default [DefaultHelloTimeout].
	HelloTimeout time.Duration
	// OnHealthChange is called when a message changes a device's health
	// (the scheduler decides again at once). It must not block.
	OnHealthChange func()
	// Log receives refused streams; nil discards.
	Log *slog.Logger
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

func (c ServerConfig) withDefaults() ServerConfig {
	if c.MaxDevices == 0 {
		c.MaxDevices = DefaultMaxDevices
	}
	if c.MaxStreams == 0 {
		c.MaxStreams = DefaultMaxStreams
	}
	if c.HelloTimeout == 0 {
		c.HelloTimeout = DefaultHelloTimeout
	}
	if c.Ready == nil {
		c.Ready = func() bool { return true }
	}
	if c.OnHealthChange == nil {
		c.OnHealthChange = func() {}
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Server is the scheduler's end of the stream: a gRPC Telemetry service
// that keeps the newest state of each node. Serve it with [Server.Serve]
// (or register it on a gRPC server) and read it with [Server.Telemetry].
// It is safe for concurrent use.
type Server struct {
	telemetryv1.UnimplementedTelemetryServer
	cfg ServerConfig
	m   *serverMetrics

	streams atomic.Int64
	gen     atomic.Uint64

	mu    sync.Mutex
	nodes map[string]*nodeState
}

// NewServer returns a server with no nodes.
func NewServer(cfg ServerConfig) (*Server, error) {
	cfg = cfg.withDefaults()
	if cfg.MaxDevices < 1 || cfg.MaxDevices > 100000 || cfg.MaxStreams < 1 || cfg.HelloTimeout < 0 {
		return nil, fmt.Errorf("stream server: max devices %d, max streams %d, hello timeout %s: %w", cfg.MaxDevices, cfg.MaxStreams, cfg.HelloTimeout, ErrConfig)
	}
	s := &Server{cfg: cfg, nodes: map[string]*nodeState{}}
	s.m = newServerMetrics(s)
	return s, nil
}

// Serve serves the Telemetry service on ln until ctx ends, with mutual
// TLS from certs (nil only with ServerConfig.Insecure). Open streams are
// closed when it returns.
func (s *Server) Serve(ctx context.Context, ln net.Listener, certs *Certs) error {
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxMessageBytes),
		grpc.MaxConcurrentStreams(4),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.ConnectionTimeout(10 * time.Second),
	}
	switch {
	case certs != nil:
		opts = append(opts, grpc.Creds(credentials.NewTLS(certs.ServerConfig())))
	case !s.cfg.Insecure:
		return fmt.Errorf("stream server: no certificates and not insecure: %w", ErrConfig)
	}
	g := grpc.NewServer(opts...)
	telemetryv1.RegisterTelemetryServer(g, s)
	errc := make(chan error, 1)
	go func() { errc <- g.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("stream server: serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	g.Stop() // streams never end by themselves: no graceful wait
	<-errc
	return nil
}

// Streams is the number of open streams that sent a valid Hello.
func (s *Server) Streams() int { return int(s.streams.Load()) }

// refuse counts and logs a refused stream and returns its gRPC error.
func (s *Server) refuse(reason string, code codes.Code, err error, attrs ...any) error {
	s.m.refused.WithLabelValues(reason).Inc()
	s.cfg.Log.Warn("telemetry stream refused", append([]any{"reason", reason, "err", err}, attrs...)...)
	return status.Error(code, err.Error())
}

// Stream implements the Telemetry service: Hello, then samples and events
// until the agent leaves, a message is refused, or this replica stops
// leading.
func (s *Server) Stream(st grpc.BidiStreamingServer[telemetryv1.AgentMessage, telemetryv1.Ack]) error {
	if !s.cfg.Ready() {
		return s.refuse("not-leader", codes.Unavailable, errors.New("this scheduler replica does not lead; reconnect through the Service"))
	}
	cert, err := s.peerCert(st.Context())
	if err != nil {
		return s.refuse("no-client-certificate", codes.Unauthenticated, err)
	}
	msgs := make(chan *telemetryv1.AgentMessage)
	recvErr := make(chan error, 1)
	ctx, cancel := context.WithCancel(st.Context())
	defer cancel()
	go func() {
		for {
			m, err := st.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case msgs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()

	// The Hello.
	var hello *telemetryv1.Hello
	var seq uint64
	select {
	case m := <-msgs:
		hello, seq = m.GetHello(), m.GetSeq()
		if hello == nil {
			return s.refuse("no-hello", codes.InvalidArgument, invalid("first message is not a hello"))
		}
	case err := <-recvErr:
		return err
	case <-time.After(s.cfg.HelloTimeout):
		return s.refuse("no-hello", codes.DeadlineExceeded, fmt.Errorf("no hello within %s", s.cfg.HelloTimeout))
	case <-ctx.Done():
		return ctx.Err()
	}
	known, err := validateHello(hello, s.cfg.MaxDevices)
	if err != nil {
		return s.refuse("invalid", codes.InvalidArgument, err)
	}
	node := hello.GetNodeName()
	if cert != nil && !certAllows(cert, node) {
		return s.refuse("wrong-node", codes.PermissionDenied,
			fmt.Errorf("certificate of %v may not report for node %q", certNames(cert), node), "node", node)
	}
	if s.streams.Add(1) > int64(s.cfg.MaxStreams) {
		s.streams.Add(-1)
		return s.refuse("too-many-streams", codes.ResourceExhausted, fmt.Errorf("%d streams open", s.cfg.MaxStreams), "node", node)
	}
	defer s.streams.Add(-1)
	gen := s.gen.Add(1)
	interval := time.Duration(hello.GetIntervalMillis()) * time.Millisecond
	s.hello(node, gen, cancel, hello)
	defer s.gone(node, gen)
	if err := st.Send(&telemetryv1.Ack{Seq: seq}); err != nil {
		return err
	}

	idle := time.NewTimer(idleIntervals * interval)
	defer idle.Stop()
	leader := time.NewTicker(leaderCheck)
	defer leader.Stop()
	for {
		select {
		case m := <-msgs:
			if err := s.apply(node, gen, m, &known); err != nil {
				return s.refuse("invalid", codes.InvalidArgument, err, "node", node)
			}
			if err := st.Send(&telemetryv1.Ack{Seq: m.GetSeq()}); err != nil {
				return err
			}
			idle.Reset(idleIntervals * interval)
		case err := <-recvErr:
			return err
		case <-idle.C:
			return status.Errorf(codes.DeadlineExceeded, "no message from node %s for %d intervals", node, idleIntervals)
		case <-leader.C:
			if !s.cfg.Ready() {
				return status.Error(codes.Unavailable, "this scheduler replica stopped leading; reconnect through the Service")
			}
		case <-ctx.Done():
			if ctx.Err() != nil && st.Context().Err() == nil {
				return status.Error(codes.Aborted, "a newer stream for this node replaced this one")
			}
			return ctx.Err()
		}
	}
}

// peerCert returns the verified client certificate; nil (and no error)
// without one in insecure mode.
func (s *Server) peerCert(ctx context.Context) (*x509.Certificate, error) {
	p, ok := peer.FromContext(ctx)
	if ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.VerifiedChains) > 0 && len(ti.State.VerifiedChains[0]) > 0 {
			return ti.State.VerifiedChains[0][0], nil
		}
	}
	if s.cfg.Insecure {
		return nil, nil
	}
	return nil, errors.New("no verified client certificate: the scheduler requires mutual TLS")
}
