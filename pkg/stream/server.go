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
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	telemetryv1 "github.com/gpud/gpud/api/telemetry/v1"
)

// Defaults of [ServerConfig].
const (
	DefaultMaxStreams   = 10000
	DefaultHelloTimeout = 10 * time.Second
	DefaultAuthTimeout  = 10 * time.Second
	// maxHeaderListBytes bounds a stream's request headers (the token
	// is at most MaxTokenBytes of them); gRPC's default is 16 MiB.
	maxHeaderListBytes = MaxTokenBytes + 8<<10
	// idleIntervals is how many of its intervals a stream may stay silent
	// (no sample, no event) before the server ends it.
	idleIntervals = 30
	// leaderCheck is how often the server checks that this replica still
	// leads.
	leaderCheck = 500 * time.Millisecond
	// idleCheck is how often the server looks for idle streams: a stream
	// silent for idleIntervals ends within idleCheck after.
	idleCheck = 5 * time.Second
	// handshakeLogEvery bounds the log lines of handshake refusals to one
	// per reason per interval (a fleet with expired certificates, a port
	// scanner); every refusal is counted all the same.
	handshakeLogEvery = 10 * time.Second
	// bufferBytes is the agent's read and write buffers and the server's
	// write buffer.
	bufferBytes = 4 << 10
)

// ServerConfig configures a [Server]. Zero values take the documented
// defaults.
type ServerConfig struct {
	// Insecure trusts the node name of the Hello without a client
	// certificate or token (--telemetry-insecure). Otherwise every stream
	// must come over mutual TLS (a client certificate the CA signed: a
	// gpud agent) and carry a bearer token that Authenticate proves is
	// held by a pod on the Hello's node.
	Insecure bool
	// Authenticate proves each stream's node; required unless Insecure.
	Authenticate Authenticator
	// AuthTimeout bounds one Authenticate; default [DefaultAuthTimeout].
	AuthTimeout time.Duration
	// MaxDevices bounds the devices of one node; default
	// [DefaultMaxDevices].
	MaxDevices int
	// MaxStreams bounds the open streams; default [DefaultMaxStreams].
	MaxStreams int
	// HelloTimeout is how long a new stream may take to send its Hello;
	// default [DefaultHelloTimeout].
	HelloTimeout time.Duration
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
	if c.AuthTimeout == 0 {
		c.AuthTimeout = DefaultAuthTimeout
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Leader is the scheduler replica a [Server] serves, given to
// [Server.Serve]: the server is built first, the scheduler reads it as its
// telemetry source, then the server runs for the scheduler.
type Leader interface {
	// Ready reports whether this replica may take streams (it leads);
	// streams are refused while it is false, and open ones end within
	// half a second of it turning false.
	Ready() bool
	// Wake is called when a message changes a device's health (the
	// scheduler decides again at once). It must not block.
	Wake()
}

// alwaysLeader is the Leader of a server served without one.
type alwaysLeader struct{}

func (alwaysLeader) Ready() bool { return true }
func (alwaysLeader) Wake()       {}

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
	leader  atomic.Pointer[Leader] // set by Serve; alwaysLeader before

	mu    sync.Mutex
	nodes map[string]*nodeState

	handshakeLog logLimiter
}

// NewServer returns a server with no nodes.
func NewServer(cfg ServerConfig) (*Server, error) {
	cfg = cfg.withDefaults()
	if cfg.MaxDevices < 1 || cfg.MaxDevices > 100000 || cfg.MaxStreams < 1 || cfg.HelloTimeout < 0 || cfg.AuthTimeout < 0 {
		return nil, fmt.Errorf("stream server: max devices %d, max streams %d, hello timeout %s, auth timeout %s: %w", cfg.MaxDevices, cfg.MaxStreams, cfg.HelloTimeout, cfg.AuthTimeout, ErrConfig)
	}
	if !cfg.Insecure && cfg.Authenticate == nil {
		return nil, fmt.Errorf("stream server: no Authenticate and not insecure: nothing proves a node: %w", ErrConfig)
	}
	s := &Server{cfg: cfg, nodes: map[string]*nodeState{}, handshakeLog: logLimiter{every: handshakeLogEvery}}
	var l Leader = alwaysLeader{}
	s.leader.Store(&l)
	s.m = newServerMetrics(s)
	return s, nil
}

// Serve serves the Telemetry service on ln until ctx ends, with mutual
// TLS from certs (nil only with ServerConfig.Insecure), for leader (nil:
// always ready, nobody to wake). Open streams are closed when it returns.
func (s *Server) Serve(ctx context.Context, ln net.Listener, certs *Certs, leader Leader) error {
	if leader != nil {
		s.leader.Store(&leader)
	}
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxMessageBytes),
		grpc.ForceServerCodecV2(serverCodec{}),
		// One stream per connection: ending a stream closes its
		// connection (see Stream).
		grpc.MaxConcurrentStreams(1),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.ConnectionTimeout(10 * time.Second),
		// No read buffer: the framer reads the TLS connection, which holds
		// a whole decrypted record anyway. The small write buffer is
		// shared (gRPC's default): held only while a write is flushed.
		grpc.ReadBufferSize(0), grpc.WriteBufferSize(bufferBytes),
		grpc.InitialWindowSize(64 << 10), grpc.InitialConnWindowSize(64 << 10),
		grpc.MaxHeaderListSize(maxHeaderListBytes),
		// One stream per connection: an HPACK dynamic table compresses
		// nothing, and would keep each stream's headers (its token among
		// them) for the connection's life. Size 0 tells the agent's
		// encoder to index none.
		grpc.HeaderTableSize(0),
	}
	switch {
	case certs != nil:
		opts = append(opts, grpc.Creds(connCreds{TransportCredentials: credentials.NewTLS(certs.ServerConfig()), s: s}))
	case s.cfg.Insecure:
		opts = append(opts, grpc.Creds(connCreds{TransportCredentials: insecure.NewCredentials(), s: s}))
	default:
		return fmt.Errorf("stream server: no certificates and not insecure: %w", ErrConfig)
	}
	g := grpc.NewServer(opts...)
	telemetryv1.RegisterTelemetryServer(g, s)
	errc := make(chan error, 1)
	go func() { errc <- g.Serve(ln) }()
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go s.watch(wctx)
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
// leading. The Hello and each event are acknowledged; samples are not (a
// newer one supersedes a lost one), which halves the writes at scale.
//
// Each stream is one goroutine, the one gRPC runs the handler on: it
// receives and applies. A stream that must end while it waits in Recv
// (replaced by a newer stream of its node, idle, no Hello in time, this
// replica no longer leading) is ended by closing its connection, which
// [Server.Serve] lets it do (one stream per connection); the agent sees
// Unavailable and reconnects. Registered on another gRPC server it
// refuses every stream.
func (s *Server) Stream(st grpc.BidiStreamingServer[telemetryv1.AgentMessage, telemetryv1.Ack]) error {
	if !s.ready() {
		return s.refuse("not-leader", codes.Unavailable, errors.New("this scheduler replica does not lead; reconnect through the Service"))
	}
	info, ok := connOf(st.Context())
	if !ok {
		return status.Error(codes.Internal, "telemetry stream not served by stream.Server.Serve")
	}
	// The certificate proves a gpud agent (the CA signed it), not its
	// node: the token does, after the Hello names the node.
	if _, err := s.peerCert(info); err != nil {
		return s.refuse("no-client-certificate", codes.Unauthenticated, err)
	}
	e := &streamEnd{raw: info.raw}
	helloTimer := time.AfterFunc(s.cfg.HelloTimeout, func() { e.end(errNoHello) })
	m, err := st.Recv()
	helloTimer.Stop()
	if err != nil {
		if errors.Is(e.cause(), errNoHello) {
			return s.refuse("no-hello", codes.DeadlineExceeded, fmt.Errorf("no hello within %s", s.cfg.HelloTimeout))
		}
		return err
	}
	h := m.GetHello()
	if h == nil {
		return s.refuse("no-hello", codes.InvalidArgument, invalid("first message is not a hello"))
	}
	known, err := validateHello(h, s.cfg.MaxDevices)
	if err != nil {
		return s.refuse("invalid", codes.InvalidArgument, err)
	}
	node := h.GetNodeName()
	if !s.cfg.Insecure {
		if err := s.authenticate(st.Context(), node); err != nil {
			return err
		}
	}
	if s.streams.Add(1) > int64(s.cfg.MaxStreams) {
		s.streams.Add(-1)
		return s.refuse("too-many-streams", codes.ResourceExhausted, fmt.Errorf("%d streams open", s.cfg.MaxStreams), "node", node)
	}
	defer s.streams.Add(-1)
	gen := s.gen.Add(1)
	s.hello(node, gen, e.end, h)
	defer s.gone(node, gen)
	if err := st.Send(&telemetryv1.Ack{Seq: m.GetSeq()}); err != nil {
		return err
	}
	t := &recvTarget{s: s, node: node, gen: gen, known: &known}
	for {
		if err := st.RecvMsg(t); err != nil {
			return endStatus(e.cause(), node, err)
		}
		m := t.msg
		if m == nil {
			continue // a sweep of samples, applied (see recv.go)
		}
		if err := s.apply(node, gen, m, &known); err != nil {
			return s.refuse("invalid", codes.InvalidArgument, err, "node", node)
		}
		if m.GetEvent() != nil {
			if err := st.Send(&telemetryv1.Ack{Seq: m.GetSeq()}); err != nil {
				return err
			}
		}
	}
}

// endStatus is the status of a stream whose Recv failed with err after
// it was ended for cause (nil: it was not).
func endStatus(cause error, node string, err error) error {
	switch {
	case errors.Is(cause, errReplaced):
		return status.Error(codes.Aborted, "a newer stream for this node replaced this one")
	case errors.Is(cause, errNotLeader):
		return status.Error(codes.Unavailable, "this scheduler replica stopped leading; reconnect through the Service")
	case errors.Is(cause, errIdle):
		return status.Errorf(codes.DeadlineExceeded, "no message from node %s for %d intervals", node, idleIntervals)
	}
	return err
}

var (
	errReplaced  = errors.New("replaced by a newer stream")
	errNotLeader = errors.New("stopped leading")
	errIdle      = errors.New("idle")
	errNoHello   = errors.New("no hello in time")
)

// streamEnd ends one stream by closing its connection (one stream per
// connection: agents open one), keeping the first cause.
type streamEnd struct {
	raw net.Conn
	why atomic.Pointer[error]
}

func (e *streamEnd) end(cause error) {
	if e.why.CompareAndSwap(nil, &cause) {
		_ = e.raw.Close()
	}
}

func (e *streamEnd) cause() error {
	if p := e.why.Load(); p != nil {
		return *p
	}
	return nil
}

func (s *Server) ready() bool { return (*s.leader.Load()).Ready() }

// wake tells the leader a device's health changed.
func (s *Server) wake() { (*s.leader.Load()).Wake() }

// watch ends every open stream within leaderCheck of Ready turning false,
// and each stream silent for idleIntervals of its intervals (checked every
// idleCheck), until ctx ends. One goroutine serves all streams.
func (s *Server) watch(ctx context.Context) {
	t := time.NewTicker(leaderCheck)
	defer t.Stop()
	lastIdleCheck := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		leads := s.ready()
		now := time.Now()
		if leads && now.Sub(lastIdleCheck) < idleCheck {
			continue
		}
		lastIdleCheck = now
		s.mu.Lock()
		for _, n := range s.nodes {
			switch {
			case !leads:
				n.end(errNotLeader)
			case now.Sub(n.last) > idleIntervals*n.interval:
				n.end(errIdle)
			}
		}
		s.mu.Unlock()
	}
}

// connOf returns the stream's connection, if [Server.Serve] accepted it.
func connOf(ctx context.Context) (connInfo, bool) {
	p, _ := peer.FromContext(ctx)
	if p == nil {
		return connInfo{}, false
	}
	info, ok := p.AuthInfo.(connInfo)
	return info, ok
}

// peerCert returns the verified client certificate; nil (and no error)
// without one in insecure mode.
func (s *Server) peerCert(info connInfo) (*x509.Certificate, error) {
	if ti, ok := info.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.VerifiedChains) > 0 && len(ti.State.VerifiedChains[0]) > 0 {
		return ti.State.VerifiedChains[0][0], nil
	}
	if s.cfg.Insecure {
		return nil, nil
	}
	return nil, errors.New("no verified client certificate: the scheduler requires mutual TLS")
}

// connCreds wraps the server's transport credentials to hand each stream
// its raw connection (in [connInfo]), which ends the stream when closed,
// and to count and log the connections refused in the TLS handshake.
type connCreds struct {
	credentials.TransportCredentials
	s *Server
}

func (c connCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, ai, err := c.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		reason := handshakeReason(err)
		c.s.m.refused.WithLabelValues(reason).Inc()
		if ok, suppressed := c.s.handshakeLog.allow(reason, c.s.cfg.Now()); ok {
			c.s.cfg.Log.Warn("telemetry connection refused in the TLS handshake", "reason", reason, "remote", raw.RemoteAddr().String(),
				"err", err, "not_logged_since", suppressed)
		}
		return nil, nil, err
	}
	return conn, connInfo{AuthInfo: ai, raw: raw}, nil
}

func (c connCreds) Clone() credentials.TransportCredentials {
	return connCreds{TransportCredentials: c.TransportCredentials.Clone(), s: c.s}
}

// connInfo is the AuthInfo of a connection [Server.Serve] accepted.
type connInfo struct {
	credentials.AuthInfo
	raw net.Conn
}
