package stream

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync/atomic"

	"github.com/gpud/gpud/internal/filewatch"
)

// AgentCommonName is the CommonName of the agents' client certificate.
// The certificate proves a gpud agent, not its node: every agent may hold
// the same one (the node is proven by each pod's token, see
// [Authenticator]).
const AgentCommonName = "gpud-agent"

// maxPEMBytes bounds each certificate, key or CA file read.
const maxPEMBytes = 1 << 20

// CertFiles names the PEM files of one end of the stream.
type CertFiles struct {
	// Cert and Key are this end's certificate (chain) and private key;
	// CA is the bundle that signs the other end's certificates.
	Cert, Key, CA string
}

// Validate reports whether all three files are named.
func (f CertFiles) Validate() error {
	var errs []error
	for _, p := range []struct{ flag, v string }{{"tls-cert", f.Cert}, {"tls-key", f.Key}, {"tls-ca", f.CA}} {
		if p.v == "" {
			errs = append(errs, fmt.Errorf("--%s is empty: %w", p.flag, ErrTLSConfig))
		}
	}
	return errors.Join(errs...)
}

// Certs holds one end's certificate and CA pool, loaded from [CertFiles];
// [Certs.Run] reloads them when the files change (a Secret's rotation),
// keeping the previous pair when the new files do not load. Connections
// take the current pair when they handshake; accepted connections are
// never touched. It is safe for concurrent use.
type Certs struct {
	files CertFiles
	log   *slog.Logger
	cur   atomic.Pointer[certPair]
	// reloaded counts successful reloads after the first load.
	reloaded atomic.Uint64
}

type certPair struct {
	cert *tls.Certificate
	pool *x509.CertPool
	// server is the scheduler's config for this pair, built once and
	// shared by every handshake (not one per handshake).
	server *tls.Config
}

// LoadCerts loads the files once; log may be nil.
func LoadCerts(files CertFiles, log *slog.Logger) (*Certs, error) {
	if err := files.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Certs{files: files, log: log}
	p, err := loadPair(files)
	if err != nil {
		return nil, err
	}
	c.cur.Store(p)
	return c, nil
}

func loadPair(f CertFiles) (*certPair, error) {
	certPEM, err := readBounded(f.Cert)
	if err != nil {
		return nil, err
	}
	keyPEM, err := readBounded(f.Key)
	if err != nil {
		return nil, err
	}
	caPEM, err := readBounded(f.CA)
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%w: certificate %s with key %s: %w", ErrTLSConfig, f.Cert, f.Key, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%w: CA bundle %s has no PEM certificate", ErrTLSConfig, f.CA)
	}
	server := &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		// No resumption: every connection verifies its client certificate
		// against the current CA bundle (agents keep no session cache).
		SessionTicketsDisabled: true,
	}
	return &certPair{cert: &cert, pool: pool, server: server}, nil
}

func readBounded(path string) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTLSConfig, err)
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, maxPEMBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: read %s: %w", ErrTLSConfig, path, err)
	}
	if len(b) > maxPEMBytes {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrTLSConfig, path, maxPEMBytes)
	}
	return b, nil
}

// Reload rereads the files; on failure the current pair stays.
func (c *Certs) Reload() error {
	p, err := loadPair(c.files)
	if err != nil {
		return err
	}
	c.cur.Store(p)
	c.reloaded.Add(1)
	return nil
}

// Run reloads the files whenever they change, until ctx ends.
func (c *Certs) Run(ctx context.Context) error {
	return filewatch.Watcher{
		Paths: []string{c.files.Cert, c.files.Key, c.files.CA},
		OnChange: func() {
			if err := c.Reload(); err != nil {
				c.log.Warn("certificates not reloaded, keeping the previous ones", "err", err)
				return
			}
			c.log.Info("certificates reloaded", "cert", c.files.Cert, "ca", c.files.CA)
		},
		Log: c.log,
	}.Run(ctx)
}

// ServerConfig is the scheduler's TLS config: TLS 1.3, its current
// certificate, and client certificates required and verified against the
// current CA bundle.
func (c *Certs) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return c.cur.Load().server, nil
		},
	}
}

// ClientConfig is the agent's TLS config for one connection: its current
// certificate, and the scheduler's verified against the current CA bundle
// under serverName. Key exchange is X25519 alone: Go's default hybrid
// X25519MLKEM768 puts a 1.2 KB key share in the ClientHello, and the
// scheduler's connection keeps read buffers sized to its largest record
// for as long as it lives (2-3 KiB per stream of the 50 KiB budget). The
// stream carries GPU metrics and health: keeping them secret from a future
// quantum computer (what the hybrid exchange is for) is not worth that.
func (c *Certs) ClientConfig(serverName string) *tls.Config {
	p := c.cur.Load()
	return &tls.Config{
		MinVersion:       tls.VersionTLS13,
		Certificates:     []tls.Certificate{*p.cert},
		RootCAs:          p.pool,
		ServerName:       serverName,
		CurvePreferences: []tls.CurveID{tls.X25519},
	}
}
