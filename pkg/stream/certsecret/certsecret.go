package certsecret

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpud/gpud/pkg/stream"
)

// Defaults of [Config], as the deploy manifests name them.
const (
	DefaultNamespace       = "gpud"
	DefaultCASecret        = "gpud-telemetry-ca"
	DefaultSchedulerSecret = "gpud-scheduler-tls"
	DefaultAgentSecret     = "gpud-agent-tls"
	// DefaultTelemetryService is the scheduler's telemetry Service, whose
	// names the scheduler's certificate carries by default.
	DefaultTelemetryService = "gpud-scheduler-telemetry"
)

// DefaultSchedulerNames are the DNS names of the telemetry Service in
// namespace: short, namespaced, .svc and .svc.cluster.local.
func DefaultSchedulerNames(namespace string) []string {
	svc := DefaultTelemetryService + "." + namespace
	return []string{DefaultTelemetryService, svc, svc + ".svc", svc + ".svc.cluster.local"}
}

// Config names the Secrets and the certificates' lifetimes.
type Config struct {
	// Namespace holds the three Secrets.
	Namespace string
	// CASecret holds the CA (ca.crt, ca.key; or a cert-manager CA's
	// tls.crt, tls.key); SchedulerSecret the scheduler's serving
	// certificate (kubernetes.io/tls); AgentSecret the agents' client
	// certificate. Each also carries ca.crt.
	CASecret        string
	SchedulerSecret string
	AgentSecret     string
	// SchedulerNames are the DNS names of the scheduler's certificate.
	SchedulerNames []string
	// Validity is the leaves' lifetime; CAValidity a new CA's. A reused
	// CA must outlive new leaves.
	Validity   time.Duration
	CAValidity time.Duration
}

// Validate reports empty names and lifetimes out of order.
func (c Config) Validate() error {
	var errs []error
	if c.Namespace == "" || c.CASecret == "" || c.SchedulerSecret == "" || c.AgentSecret == "" {
		errs = append(errs, errors.New("empty namespace or Secret name"))
	}
	if len(c.SchedulerNames) == 0 {
		errs = append(errs, errors.New("no scheduler DNS name"))
	}
	if c.Validity <= 0 || c.CAValidity < c.Validity {
		errs = append(errs, fmt.Errorf("validity %s, CA validity %s: want 0 < validity <= CA validity", c.Validity, c.CAValidity))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("certsecret: %w", err)
	}
	return nil
}

// Result says what [Write] did.
type Result struct {
	// CA is "created" or "reused".
	CA string
	// Removed counts the per-node entries an older gpud wrote into the
	// agent Secret, removed by this write.
	Removed int
}

// Write issues the certificates at now and writes the three Secrets: the
// CA is reused when its Secret exists, the leaves are new each time, and
// the agent Secret's data is replaced (keeping its type, which is
// immutable).
func Write(ctx context.Context, client kubernetes.Interface, cfg Config, now time.Time) (Result, error) {
	var res Result
	if err := cfg.Validate(); err != nil {
		return res, err
	}
	secrets := client.CoreV1().Secrets(cfg.Namespace)
	ca, created, err := loadOrCreateCA(ctx, client, cfg, now)
	if err != nil {
		return res, err
	}
	res.CA = map[bool]string{true: "created", false: "reused"}[created]

	cert, key, err := ca.Issue(stream.Leaf{CommonName: "gpud-scheduler", DNSNames: cfg.SchedulerNames, Server: true, NotBefore: now, Validity: cfg.Validity})
	if err != nil {
		return res, err
	}
	sched := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: cfg.SchedulerSecret, Namespace: cfg.Namespace, Labels: labels()},
		Type: corev1.SecretTypeTLS, Data: map[string][]byte{corev1.TLSCertKey: cert, corev1.TLSPrivateKeyKey: key, "ca.crt": ca.CertPEM}}
	if err := apply(ctx, secrets, sched); err != nil {
		return res, err
	}

	cert, key, err = ca.Issue(stream.Leaf{CommonName: stream.AgentCommonName, Client: true, NotBefore: now, Validity: cfg.Validity})
	if err != nil {
		return res, err
	}
	agent := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: cfg.AgentSecret, Namespace: cfg.Namespace, Labels: labels()},
		Type: corev1.SecretTypeOpaque, Data: map[string][]byte{corev1.TLSCertKey: cert, corev1.TLSPrivateKeyKey: key, "ca.crt": ca.CertPEM}}
	if old, err := secrets.Get(ctx, cfg.AgentSecret, metav1.GetOptions{}); err == nil {
		for k := range old.Data {
			if _, ok := agent.Data[k]; !ok {
				res.Removed++
			}
		}
		agent.Type = old.Type // immutable: an older gpud's Opaque, or a cert-manager kubernetes.io/tls
	} else if !apierrors.IsNotFound(err) {
		return res, fmt.Errorf("read secret %s/%s: %w", cfg.Namespace, cfg.AgentSecret, err)
	}
	return res, apply(ctx, secrets, agent)
}

func labels() map[string]string {
	return map[string]string{"app.kubernetes.io/name": "gpud", "app.kubernetes.io/component": "telemetry-certs"}
}

// loadOrCreateCA reads the CA Secret or creates it; true when created.
func loadOrCreateCA(ctx context.Context, client kubernetes.Interface, cfg Config, now time.Time) (*stream.CA, bool, error) {
	secrets := client.CoreV1().Secrets(cfg.Namespace)
	s, err := secrets.Get(ctx, cfg.CASecret, metav1.GetOptions{})
	switch {
	case err == nil:
		crt, key := s.Data["ca.crt"], s.Data["ca.key"]
		if len(key) == 0 { // a cert-manager CA Certificate's Secret
			crt, key = s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey]
		}
		ca, err := stream.ParseCA(crt, key)
		if err != nil {
			return nil, false, fmt.Errorf("secret %s/%s: %w (delete it to make a new CA, then rerun)", cfg.Namespace, cfg.CASecret, err)
		}
		if !now.Before(ca.Cert.NotAfter.Add(-cfg.Validity)) {
			return nil, false, fmt.Errorf("secret %s/%s: the CA expires %s, before certificates of --validity %s would: delete it to make a new CA, then rerun", cfg.Namespace, cfg.CASecret, ca.Cert.NotAfter.Format(time.RFC3339), cfg.Validity)
		}
		return ca, false, nil
	case !apierrors.IsNotFound(err):
		return nil, false, fmt.Errorf("read secret %s/%s: %w", cfg.Namespace, cfg.CASecret, err)
	}
	ca, err := stream.NewCA("gpud-telemetry-ca", now, cfg.CAValidity)
	if err != nil {
		return nil, false, err
	}
	s = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: cfg.CASecret, Namespace: cfg.Namespace, Labels: labels()},
		Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"ca.crt": ca.CertPEM, "ca.key": ca.KeyPEM}}
	if _, err := secrets.Create(ctx, s, metav1.CreateOptions{}); err != nil {
		return nil, false, fmt.Errorf("create secret %s/%s: %w", cfg.Namespace, cfg.CASecret, err)
	}
	return ca, true, nil
}

// secretsClient is the part of the Secrets client apply uses.
type secretsClient interface {
	Create(ctx context.Context, s *corev1.Secret, opts metav1.CreateOptions) (*corev1.Secret, error)
	Update(ctx context.Context, s *corev1.Secret, opts metav1.UpdateOptions) (*corev1.Secret, error)
}

// apply creates s, or replaces its data when it exists.
func apply(ctx context.Context, secrets secretsClient, s *corev1.Secret) error {
	_, err := secrets.Create(ctx, s, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = secrets.Update(ctx, s, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("write secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	return nil
}
