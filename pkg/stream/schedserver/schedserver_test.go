package schedserver

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/gpud/gpud/pkg/stream"
)

func TestNew(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	t.Run("insecure: no certificates, no reviews", func(t *testing.T) {
		srv, certs, err := New(Options{Insecure: true}, &rest.Config{Host: "https://127.0.0.1:1"}, log)
		if err != nil || srv == nil || certs != nil {
			t.Fatalf("New = %v, %v, %v; want a server and no certificates", srv, certs, err)
		}
	})
	t.Run("missing certificate files name what failed", func(t *testing.T) {
		dir := t.TempDir()
		files := stream.CertFiles{Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key"), CA: filepath.Join(dir, "ca.crt")}
		_, _, err := New(Options{TLS: files, Audience: "gpud-telemetry", ServiceAccounts: []string{"gpud/gpud"}}, &rest.Config{Host: "https://127.0.0.1:1"}, log)
		if err == nil || !strings.Contains(err.Error(), "telemetry certificates") || !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("New with missing files: %v; want a telemetry certificates error wrapping fs.ErrNotExist", err)
		}
	})
	t.Run("TLS: certificates loaded, a bad token policy refused", func(t *testing.T) {
		dir := t.TempDir()
		ca, err := stream.NewCA("schedserver-test", time.Now(), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		cert, key, err := ca.Issue(stream.Leaf{CommonName: "gpud-scheduler", NotBefore: time.Now(), Validity: time.Hour, Server: true})
		if err != nil {
			t.Fatal(err)
		}
		files := stream.CertFiles{Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key"), CA: filepath.Join(dir, "ca.crt")}
		for p, b := range map[string][]byte{files.Cert: cert, files.Key: key, files.CA: ca.CertPEM} {
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		restCfg := &rest.Config{Host: "https://127.0.0.1:1"}
		srv, certs, err := New(Options{TLS: files, Audience: "gpud-telemetry", ServiceAccounts: []string{"gpud/gpud"}}, restCfg, log)
		if err != nil || srv == nil || certs == nil {
			t.Fatalf("New = %v, %v, %v; want a server and its certificates", srv, certs, err)
		}
		if _, _, err := New(Options{TLS: files, Audience: "gpud-telemetry", ServiceAccounts: []string{"not-a-namespace-slash-name"}}, restCfg, log); err == nil {
			t.Fatal("New took a ServiceAccount that is not namespace/name")
		}
	})
}
