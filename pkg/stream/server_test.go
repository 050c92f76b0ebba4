package stream

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	telemetryv1 "github.com/gpud/gpud/api/telemetry/v1"
	"github.com/gpud/gpud/internal/testkit/testwait"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// rawStream opens a stream with files' certificate and token (no Client:
// the tests see each refusal as the agent would).
func rawStream(t *testing.T, addr string, files CertFiles, token string) grpc.BidiStreamingClient[telemetryv1.AgentMessage, telemetryv1.Ack] {
	t.Helper()
	st, err := openStream(t, addr, files, token)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// openStream opens a stream, with token as its bearer token unless
// empty; a refused handshake fails here or later.
func openStream(t *testing.T, addr string, files CertFiles, token string) (grpc.BidiStreamingClient[telemetryv1.AgentMessage, telemetryv1.Ack], error) {
	t.Helper()
	certs := loadCerts(t, files)
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(credentials.NewTLS(certs.ClientConfig("localhost"))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx := t.Context()
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, authorizationKey, "Bearer "+token)
	}
	return telemetryv1.NewTelemetryClient(conn).Stream(ctx)
}

func sendHello(t *testing.T, st grpc.BidiStreamingClient[telemetryv1.AgentMessage, telemetryv1.Ack], node string) {
	t.Helper()
	h := testHello()
	h.NodeName, h.IntervalMillis = node, 1000
	if err := st.Send(&telemetryv1.AgentMessage{Seq: 1, Kind: &telemetryv1.AgentMessage_Hello{Hello: h}}); err != nil && !errors.Is(err, context.Canceled) {
		t.Logf("send hello: %v", err) // a refused handshake fails here or at Recv
	}
}

// TestStreamAuthentication: the certificate proves a gpud agent, the
// token its node. Node node-a's agent holds the shared agent certificate
// and its own token; with them it cannot report for node-b, and every
// refusal (the TLS handshake's too) is counted by reason.
func TestStreamAuthentication(t *testing.T) {
	p := newPKI(t)
	srv := newTestServer(t, ServerConfig{})
	addr := startServer(t, srv, loadCerts(t, p.serverFiles()))
	agent := p.agentFiles()
	// A CA the scheduler does not trust, of the same name as its own: a
	// Go client sends a certificate only when the server asks for its
	// issuer's name (else none: tls-no-client-certificate), another
	// client may send any.
	other := newPKI(t)
	untrusted := other.agentFiles()
	untrusted.CA = agent.CA // the client trusts the scheduler
	expired := p.files("expired", Leaf{CommonName: AgentCommonName, Client: true, Validity: -time.Hour})

	tests := []struct {
		name       string
		files      CertFiles
		token      string
		node       string
		wantCode   codes.Code
		wantReason string
	}{
		{name: "node reports for itself", files: agent, token: tokenFor("node-a"), node: "node-a", wantCode: codes.OK},
		{name: "node-a's pod reports for node-b", files: agent, token: tokenFor("node-a"), node: "node-b", wantCode: codes.PermissionDenied, wantReason: ReasonTokenNodeMismatch},
		{name: "certificate naming node-b, token of node-a", files: p.files("named", Leaf{CommonName: "system:node:node-b", DNSNames: []string{"node-b"}, Client: true}),
			token: tokenFor("node-a"), node: "node-b", wantCode: codes.PermissionDenied, wantReason: ReasonTokenNodeMismatch},
		{name: "no token", files: agent, node: "node-a", wantCode: codes.Unauthenticated, wantReason: ReasonTokenMissing},
		{name: "malformed token", files: agent, token: "not a jwt", node: "node-a", wantCode: codes.Unauthenticated, wantReason: ReasonTokenMissing},
		{name: "expired token", files: agent, token: "expired", node: "node-a", wantCode: codes.Unauthenticated, wantReason: ReasonTokenInvalid},
		{name: "API server unreachable", files: agent, token: "unreachable", node: "node-a", wantCode: codes.Unavailable, wantReason: ReasonTokenReviewFailed},
		{name: "untrusted CA", files: untrusted, token: tokenFor("node-a"), node: "node-a", wantCode: codes.Unavailable, wantReason: "tls-unknown-ca"},
		{name: "expired certificate", files: expired, token: tokenFor("node-a"), node: "node-a", wantCode: codes.Unavailable, wantReason: "tls-certificate-expired"},
		{name: "server certificate as a client", files: p.serverFiles(), token: tokenFor("localhost"), node: "localhost", wantCode: codes.Unavailable, wantReason: "tls-certificate-invalid"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := testutil.ToFloat64(srv.m.refused.WithLabelValues(tc.wantReason))
			var ack *telemetryv1.Ack
			st, err := openStream(t, addr, tc.files, tc.token)
			if err == nil {
				sendHello(t, st, tc.node)
				ack, err = st.Recv()
			}
			if got := status.Code(err); got != tc.wantCode {
				t.Fatalf("Recv() = %v, %v; want code %s", ack, err, tc.wantCode)
			}
			if tc.wantCode != codes.OK {
				if _, ok := srv.Telemetry(time.Now(), 3)[tc.node]; ok {
					t.Errorf("node %s has telemetry after a refused stream", tc.node)
				}
				// The handshake's refusal is counted as the server's
				// handshake returns, which may be after the client saw it.
				testwait.For(t, 5*time.Second, "refused_total{reason="+tc.wantReason+"} to count it", func() bool {
					return testutil.ToFloat64(srv.m.refused.WithLabelValues(tc.wantReason)) > before
				})
				return
			}
			if ack.GetSeq() != 1 {
				t.Errorf("ack %d, want 1", ack.GetSeq())
			}
			if _, ok := srv.Telemetry(time.Now(), 3)[tc.node]; !ok {
				t.Errorf("no telemetry of %s after its hello", tc.node)
			}
		})
	}
}

func TestHandshakeWithoutClientCertificateCounted(t *testing.T) {
	p := newPKI(t)
	srv := newTestServer(t, ServerConfig{})
	addr := startServer(t, srv, loadCerts(t, p.serverFiles()))
	pool := x509.NewCertPool()
	pool.AddCert(p.ca.Cert)
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS13})
	if err == nil {
		// TLS 1.3: the client learns of the refusal at its first read.
		_, err = conn.Read(make([]byte, 1))
		_ = conn.Close()
	}
	if err == nil {
		t.Fatal("a connection without a client certificate was accepted")
	}
	testwait.For(t, 5*time.Second, "refused_total{reason=tls-no-client-certificate}", func() bool {
		return testutil.ToFloat64(srv.m.refused.WithLabelValues("tls-no-client-certificate")) == 1
	})
}

func TestServerCertRotationKeepsStreams(t *testing.T) {
	p := newPKI(t)
	files := p.serverFiles()
	certs := loadCerts(t, files)
	testwait.Run(t, "cert reloader", certs.Run)
	srv := newTestServer(t, ServerConfig{})
	addr := startServer(t, srv, certs)

	st := rawStream(t, addr, p.agentFiles(), tokenFor("node-a"))
	sendHello(t, st, "node-a")
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	before := servedSerial(t, addr, p)

	p.serverFiles() // rotate: a new key and certificate in the same files
	testwait.For(t, 10*time.Second, "the scheduler to serve the rotated certificate", func() bool {
		return servedSerial(t, addr, p) != before
	})
	// The stream accepted before the rotation still carries samples (not
	// acknowledged) and events (acknowledged).
	if err := st.Send(&telemetryv1.AgentMessage{Seq: 2, Kind: &telemetryv1.AgentMessage_Samples{Samples: testSamples(3 << 30)}}); err != nil {
		t.Fatalf("send on the old stream: %v", err)
	}
	if err := st.Send(&telemetryv1.AgentMessage{Seq: 3, Kind: &telemetryv1.AgentMessage_Event{Event: &telemetryv1.Event{Kind: telemetryv1.Event_KIND_XID, DeviceUuid: testGPU, Xid: 13}}}); err != nil {
		t.Fatalf("send on the old stream: %v", err)
	}
	if ack, err := st.Recv(); err != nil || ack.GetSeq() != 3 {
		t.Fatalf("ack on the old stream = %v, %v; want 3", ack, err)
	}
	if got := srv.Telemetry(time.Now(), 3)["node-a"].Devices[testGPU].MemoryUsedBytes; got != 3<<30 {
		t.Errorf("memory used %d after the rotation, want %d", got, 3<<30)
	}
	if srv.Streams() != 1 {
		t.Errorf("Streams() = %d, want 1", srv.Streams())
	}
}

// servedSerial handshakes with the scheduler and returns its leaf's serial.
func servedSerial(t *testing.T, addr string, p *pki) string {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(p.ca.Cert)
	client := loadCerts(t, p.agentFiles())
	cfg := client.ClientConfig("localhost")
	conn, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

func TestHealthEventsOverrideUntilHealthy(t *testing.T) {
	p := newPKI(t)
	var wakes atomic.Int32
	srv := newTestServer(t, ServerConfig{})
	addr := startServerFor(t, srv, loadCerts(t, p.serverFiles()), testLeader{wake: func() { wakes.Add(1) }})
	st := rawStream(t, addr, p.agentFiles(), tokenFor("node-a"))
	sendHello(t, st, "node-a")
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	send := func(seq uint64, ev *telemetryv1.Event) {
		t.Helper()
		if err := st.Send(&telemetryv1.AgentMessage{Seq: seq, Kind: &telemetryv1.AgentMessage_Event{Event: ev}}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	dev := func() (bool, string) {
		d := srv.Telemetry(time.Now(), 3)["node-a"].Devices[testGPU]
		return d.Unhealthy, d.HealthReason
	}
	send(2, &telemetryv1.Event{Kind: telemetryv1.Event_KIND_XID, DeviceUuid: testGPU, Xid: 13}) // ignored by the agent: no health
	if un, _ := dev(); un || wakes.Load() != 0 {
		t.Fatalf("an Xid without health made the GPU unhealthy (%v) or woke the scheduler (%d)", un, wakes.Load())
	}
	send(3, &telemetryv1.Event{Kind: telemetryv1.Event_KIND_XID, DeviceUuid: testGPU, Xid: 79, Health: telemetryv1.Health_HEALTH_UNHEALTHY})
	if un, why := dev(); !un || why != "Xid 79" || wakes.Load() != 1 {
		t.Fatalf("after Xid 79: unhealthy %v %q, wakes %d; want true, Xid 79, 1", un, why, wakes.Load())
	}
	// Samples do not clear it; a healthy event does.
	if err := st.Send(&telemetryv1.AgentMessage{Seq: 4, Kind: &telemetryv1.AgentMessage_Samples{Samples: testSamples(1)}}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 5*time.Second, "the sample", func() bool {
		return srv.Telemetry(time.Now(), 3)["node-a"].Devices[testGPU].MemoryUsedBytes == 1
	})
	if un, _ := dev(); !un {
		t.Fatal("a sample cleared the health override")
	}
	send(5, &telemetryv1.Event{Kind: telemetryv1.Event_KIND_HEALTH, DeviceUuid: testGPU, Health: telemetryv1.Health_HEALTH_HEALTHY})
	if un, _ := dev(); un || wakes.Load() != 2 {
		t.Fatalf("after a healthy event: unhealthy %v, wakes %d", un, wakes.Load())
	}
}

func TestInvalidMessagesEndTheStream(t *testing.T) {
	p := newPKI(t)
	srv := newTestServer(t, ServerConfig{MaxDevices: 4})
	addr := startServer(t, srv, loadCerts(t, p.serverFiles()))
	nan, inf := math.NaN(), math.Inf(1)
	tests := []struct {
		name string
		msg  *telemetryv1.AgentMessage
	}{
		{"NaN utilization", &telemetryv1.AgentMessage{Kind: &telemetryv1.AgentMessage_Samples{Samples: &telemetryv1.Samples{Devices: []*telemetryv1.DeviceSample{{Uuid: testGPU, SmUtilPercent: &nan}}}}}},
		{"infinite power", &telemetryv1.AgentMessage{Kind: &telemetryv1.AgentMessage_Samples{Samples: &telemetryv1.Samples{Devices: []*telemetryv1.DeviceSample{{Uuid: testGPU, PowerWatts: &inf}}}}}},
		{"utilization above 100", &telemetryv1.AgentMessage{Kind: &telemetryv1.AgentMessage_Samples{Samples: &telemetryv1.Samples{Devices: []*telemetryv1.DeviceSample{{Uuid: testGPU, SmUtilPercent: ptr(101.0)}}}}}},
		{"unknown device", &telemetryv1.AgentMessage{Kind: &telemetryv1.AgentMessage_Samples{Samples: &telemetryv1.Samples{Devices: []*telemetryv1.DeviceSample{{Uuid: "GPU-other"}}}}}},
		{"event on an unknown device", &telemetryv1.AgentMessage{Kind: &telemetryv1.AgentMessage_Event{Event: &telemetryv1.Event{Kind: telemetryv1.Event_KIND_ECC, DeviceUuid: "GPU-other"}}}},
		{"too many devices", &telemetryv1.AgentMessage{Kind: &telemetryv1.AgentMessage_Event{Event: &telemetryv1.Event{Kind: telemetryv1.Event_KIND_MIG_LAYOUT,
			Devices: []*telemetryv1.Device{{Uuid: "a"}, {Uuid: "b"}, {Uuid: "c"}, {Uuid: "d"}, {Uuid: "e"}}}}}},
		{"second hello", &telemetryv1.AgentMessage{Kind: &telemetryv1.AgentMessage_Hello{Hello: testHello()}}},
		{"no kind", &telemetryv1.AgentMessage{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := rawStream(t, addr, p.agentFiles(), tokenFor("node-a"))
			sendHello(t, st, "node-a")
			if _, err := st.Recv(); err != nil {
				t.Fatal(err)
			}
			tc.msg.Seq = 2
			if err := st.Send(tc.msg); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Recv(); status.Code(err) != codes.InvalidArgument {
				t.Fatalf("Recv() error %v, want InvalidArgument", err)
			}
			testwait.For(t, 5*time.Second, "the node's state to be dropped", func() bool {
				_, ok := srv.Telemetry(time.Now(), 3)["node-a"]
				return !ok
			})
		})
	}
}

func TestOnlyTheLeaderTakesStreams(t *testing.T) {
	p := newPKI(t)
	var leading atomic.Bool
	srv := newTestServer(t, ServerConfig{})
	addr := startServerFor(t, srv, loadCerts(t, p.serverFiles()), testLeader{ready: leading.Load})
	st := rawStream(t, addr, p.agentFiles(), tokenFor("node-a"))
	sendHello(t, st, "node-a")
	if _, err := st.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("a non-leader answered %v, want Unavailable", err)
	}
	leading.Store(true)
	st = rawStream(t, addr, p.agentFiles(), tokenFor("node-a"))
	sendHello(t, st, "node-a")
	if _, err := st.Recv(); err != nil {
		t.Fatalf("the leader refused: %v", err)
	}
	leading.Store(false) // the lease is lost: the stream ends
	start := time.Now()
	if _, err := st.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("after losing the lead Recv() = %v, want Unavailable", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the stream ended %s after the lead was lost, want within a second", d)
	}
}

func TestStaleNodesAreLeftOut(t *testing.T) {
	now := time.Unix(1000, 0)
	srv := newTestServer(t, ServerConfig{Now: func() time.Time { return now }})
	srv.hello("node-a", 1, func(error) {}, &telemetryv1.Hello{IntervalMillis: 1000, Devices: testHello().Devices})
	if _, ok := srv.Telemetry(now.Add(3*time.Second), 3)["node-a"]; !ok {
		t.Fatal("a node 3 intervals old is left out")
	}
	if _, ok := srv.Telemetry(now.Add(5*time.Second), 3)["node-a"]; ok {
		t.Fatal("a node 5 intervals old is kept with staleIntervals 3")
	}
	srv.gone("node-a", 1)
	if _, ok := srv.Telemetry(now, 3)["node-a"]; ok {
		t.Fatal("a node whose stream ended is kept")
	}
}

// TestEndedStreamsCloseTheirConnection: a stream waiting in Recv ends
// when a newer stream of its node replaces it or when it sends no Hello
// in time (the server closes its connection); the newer stream goes on.
func TestEndedStreamsCloseTheirConnection(t *testing.T) {
	p := newPKI(t)
	srv := newTestServer(t, ServerConfig{HelloTimeout: 200 * time.Millisecond})
	addr := startServer(t, srv, loadCerts(t, p.serverFiles()))
	t.Run("replaced", func(t *testing.T) {
		old := rawStream(t, addr, p.agentFiles(), tokenFor("node-a"))
		sendHello(t, old, "node-a")
		if _, err := old.Recv(); err != nil {
			t.Fatal(err)
		}
		st := rawStream(t, addr, p.agentFiles(), tokenFor("node-a"))
		sendHello(t, st, "node-a")
		if _, err := st.Recv(); err != nil {
			t.Fatal(err)
		}
		if _, err := old.Recv(); status.Code(err) != codes.Unavailable {
			t.Fatalf("replaced stream Recv() = %v, want Unavailable", err)
		}
		if err := st.Send(&telemetryv1.AgentMessage{Seq: 2, Kind: &telemetryv1.AgentMessage_Samples{Samples: testSamples(7)}}); err != nil {
			t.Fatal(err)
		}
		testwait.For(t, 5*time.Second, "the newer stream's sample", func() bool {
			n, ok := srv.Telemetry(time.Now(), 3)["node-a"]
			return ok && n.Devices[testGPU].MemoryUsedBytes == 7
		})
	})
	t.Run("no hello", func(t *testing.T) {
		st := rawStream(t, addr, p.agentFiles(), tokenFor("node-b"))
		start := time.Now()
		if _, err := st.Recv(); status.Code(err) != codes.Unavailable {
			t.Fatalf("Recv() without a hello = %v, want Unavailable", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("the stream without a hello ended after %s, want about 200ms", d)
		}
		// The handler counts it after the connection closes.
		testwait.For(t, 5*time.Second, "the no-hello refusal to be counted", func() bool {
			return testutil.ToFloat64(srv.m.refused.WithLabelValues("no-hello")) == 1
		})
	})
}

func TestLogLimiter(t *testing.T) {
	l := logLimiter{every: 10 * time.Second}
	t0 := time.Unix(1_800_000_000, 0)
	steps := []struct {
		key            string
		at             time.Duration
		ok             bool
		wantSuppressed int
	}{
		{"tls-unknown-ca", 0, true, 0},
		{"tls-unknown-ca", time.Second, false, 0},
		{"tls-unknown-ca", 2 * time.Second, false, 0},
		{"tls-certificate-expired", 3 * time.Second, true, 0}, // another reason: its own budget
		{"tls-unknown-ca", 10 * time.Second, true, 2},
		{"tls-unknown-ca", 11 * time.Second, false, 0},
		{"tls-unknown-ca", time.Minute, true, 1},
	}
	for i, s := range steps {
		ok, n := l.allow(s.key, t0.Add(s.at))
		if ok != s.ok || n != s.wantSuppressed {
			t.Errorf("step %d (%s at %s): allow = %v, %d; want %v, %d", i, s.key, s.at, ok, n, s.ok, s.wantSuppressed)
		}
	}
}

// TestInsecureServerWithCertificatesTrustsHello: an insecure server given
// certificates anyway (tests) trusts the Hello and asks for no token.
func TestInsecureServerWithCertificatesTrustsHello(t *testing.T) {
	p := newPKI(t)
	srv := newTestServer(t, ServerConfig{Insecure: true})
	addr := startServer(t, srv, loadCerts(t, p.serverFiles()))
	st := rawStream(t, addr, p.agentFiles(), "")
	sendHello(t, st, "node-a")
	if ack, err := st.Recv(); err != nil || ack.GetSeq() != 1 {
		t.Fatalf("Recv() = %v, %v; want ack 1", ack, err)
	}
}

func TestNewServerNeedsAuthenticator(t *testing.T) {
	if _, err := NewServer(ServerConfig{}); !errors.Is(err, ErrConfig) {
		t.Fatalf("NewServer without Authenticate or Insecure = %v, want ErrConfig", err)
	}
}
