package stream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	telemetryv1 "github.com/gpud/gpud/api/telemetry/v1"
	"github.com/gpud/gpud/internal/testkit/testwait"
)

// pki is a test CA with files of a scheduler and agent certificates.
type pki struct {
	t   *testing.T
	ca  *CA
	dir string
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	ca, err := NewCA("gpud-test-ca", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	p := &pki{t: t, ca: ca, dir: t.TempDir()}
	writeFile(t, filepath.Join(p.dir, "ca.crt"), ca.CertPEM)
	return p
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil { // atomic, as a Secret update
		t.Fatal(err)
	}
}

// files issues leaf and writes it as name.crt/name.key next to the CA.
func (p *pki) files(name string, leaf Leaf) CertFiles {
	p.t.Helper()
	leaf.NotBefore = time.Now()
	if leaf.Validity == 0 {
		leaf.Validity = time.Hour
	}
	cert, key, err := p.ca.Issue(leaf)
	if err != nil {
		p.t.Fatal(err)
	}
	f := CertFiles{Cert: filepath.Join(p.dir, name+".crt"), Key: filepath.Join(p.dir, name+".key"), CA: filepath.Join(p.dir, "ca.crt")}
	writeFile(p.t, f.Key, key)
	writeFile(p.t, f.Cert, cert)
	return f
}

func (p *pki) serverFiles() CertFiles {
	return p.files("server", Leaf{CommonName: "gpud-scheduler", DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true})
}

// agentFiles is the agents' shared client certificate: it proves a gpud
// agent, not a node.
func (p *pki) agentFiles() CertFiles {
	return p.files("agent", Leaf{CommonName: AgentCommonName, Client: true})
}

// tokenFor is the token testAuth accepts for node (with any ".."
// padding after it).
func tokenFor(node string) string { return "token-for." + node }

// testAuth stands in for the TokenReview authenticator: tokenFor(node)
// proves node; "expired" is invalid; "unreachable" is a temporary failure.
type testAuth struct{}

func (testAuth) Authenticate(_ context.Context, tok, node string) error {
	tok, _, _ = strings.Cut(tok, "..") // padding to a real token's size
	switch {
	case tok == "expired":
		return &AuthError{Reason: ReasonTokenInvalid, Err: errors.New("token has expired")}
	case tok == "unreachable":
		return &AuthError{Reason: ReasonTokenReviewFailed, Temporary: true, Err: errors.New("connection refused")}
	case tok == tokenFor(node):
		return nil
	case strings.HasPrefix(tok, "token-for."):
		return &AuthError{Reason: ReasonTokenNodeMismatch, Err: fmt.Errorf("the token's pod runs on %s", strings.TrimPrefix(tok, "token-for."))}
	}
	return &AuthError{Reason: ReasonTokenInvalid, Err: errors.New("unknown token")}
}

func staticToken(tok string) func() (string, error) {
	return func() (string, error) { return tok, nil }
}

func loadCerts(t *testing.T, f CertFiles) *Certs {
	t.Helper()
	c, err := LoadCerts(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// startServer serves srv with certs on a free port until the test ends.
func startServer(t *testing.T, srv *Server, certs *Certs) string {
	t.Helper()
	return startServerFor(t, srv, certs, nil)
}

// startServerFor is startServer for a leader.
func startServerFor(t *testing.T, srv *Server, certs *Certs, leader Leader) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	testwait.Run(t, "stream server", func(ctx context.Context) error { return srv.Serve(ctx, ln, certs, leader) })
	return ln.Addr().String()
}

// testLeader is a Leader of two functions; nil ones are always ready and
// wake nobody.
type testLeader struct {
	ready func() bool
	wake  func()
}

func (l testLeader) Ready() bool { return l.ready == nil || l.ready() }

func (l testLeader) Wake() {
	if l.wake != nil {
		l.wake()
	}
}

func newTestServer(t *testing.T, cfg ServerConfig) *Server {
	t.Helper()
	if cfg.Authenticate == nil && !cfg.Insecure {
		cfg.Authenticate = testAuth{}
	}
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const testGPU = "GPU-00000000-0000-0000-0000-000000000001"

func testHello() *telemetryv1.Hello {
	return &telemetryv1.Hello{Devices: []*telemetryv1.Device{
		{Uuid: testGPU, Model: "NVIDIA H100 80GB HBM3", MemoryTotalBytes: 80 << 30, Health: telemetryv1.Health_HEALTH_HEALTHY},
		{Uuid: "GPU-00000000-0000-0000-0000-000000000002", MemoryTotalBytes: 80 << 30, Health: telemetryv1.Health_HEALTH_HEALTHY},
	}}
}

func ptr[T any](v T) *T { return &v }

func testSamples(used uint64) *telemetryv1.Samples {
	return &telemetryv1.Samples{TakenUnixNanos: time.Now().UnixNano(), Devices: []*telemetryv1.DeviceSample{
		{Uuid: testGPU, SmUtilPercent: ptr(42.0), MemoryUsedBytes: ptr(used), PowerWatts: ptr(300.0), TemperatureCelsius: ptr(50.0)},
	}}
}
