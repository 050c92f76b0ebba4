package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/gpud/gpud/pkg/stream"
)

const certsUsage = `usage: gpud certs [flags]

Writes the telemetry stream's transport certificates into Kubernetes
Secrets, for clusters without cert-manager (deploy/certs has the
cert-manager way):

  --ca-secret         the CA (ca.crt, ca.key); reused when it exists, so a
                      rerun renews the leaves without a new CA (a
                      cert-manager CA's Secret, tls.crt and tls.key, is
                      reused as well)
  --scheduler-secret  the scheduler's serving certificate (tls.crt, tls.key,
                      ca.crt), for the telemetry Service's names
  --agent-secret      the agents' client certificate (tls.crt, tls.key,
                      CN gpud-agent) and ca.crt, one for every agent: it
                      proves a gpud agent, not a node. Each agent proves
                      its node with its pod's projected ServiceAccount
                      token, which the scheduler checks (TokenReview), so
                      no node can report for another with what this
                      Secret holds. A rerun replaces the Secret's data,
                      removing the per-node keys older gpud wrote.

Rerun it before --validity runs out; nodes joining need nothing.

Flags:`

// Defaults of `gpud certs`.
const (
	defaultCertsNamespace  = "gpud"
	defaultCASecret        = "gpud-telemetry-ca"
	defaultSchedulerSecret = "gpud-scheduler-tls"
	defaultAgentSecret     = "gpud-agent-tls"
	defaultTelemetrySvc    = "gpud-scheduler-telemetry"
)

type certsOptions struct {
	kubeconfig      string
	namespace       string
	nodes           string // no longer used: refused with an explanation
	nodeSelector    string // likewise
	caSecret        string
	schedulerSecret string
	agentSecret     string
	serverNames     string
	validity        time.Duration
	caValidity      time.Duration
}

func (o *certsOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of an identity that may read and write Secrets in --namespace; empty uses the in-cluster config")
	fs.StringVar(&o.namespace, "namespace", defaultCertsNamespace, "namespace of the Secrets (gpud's)")
	fs.StringVar(&o.nodes, "nodes", "", "removed: agents no longer get per-node certificates (their ServiceAccount token proves the node); any value is refused")
	fs.StringVar(&o.nodeSelector, "node-selector", "", "removed, as --nodes")
	fs.StringVar(&o.caSecret, "ca-secret", defaultCASecret, "Secret of the CA (created once, then reused)")
	fs.StringVar(&o.schedulerSecret, "scheduler-secret", defaultSchedulerSecret, "Secret of the scheduler's serving certificate (kubernetes.io/tls)")
	fs.StringVar(&o.agentSecret, "agent-secret", defaultAgentSecret, "Secret of the agents' certificates")
	fs.StringVar(&o.serverNames, "scheduler-names", "", "comma-separated DNS names of the scheduler's certificate; empty: the telemetry Service "+defaultTelemetrySvc+" in --namespace (short, .svc and .svc.cluster.local)")
	fs.DurationVar(&o.validity, "validity", 365*24*time.Hour, "validity of the scheduler's and the agents' certificates")
	fs.DurationVar(&o.caValidity, "ca-validity", 10*365*24*time.Hour, "validity of a new CA")
}

func splitList(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func (o *certsOptions) validate() []error {
	var errs []error
	if msgs := validation.IsDNS1123Label(o.namespace); len(msgs) > 0 {
		errs = append(errs, flagErr("namespace", "%s: %s", quoteTrunc(o.namespace), strings.Join(msgs, "; ")))
	}
	for _, f := range []struct{ name, v string }{{"ca-secret", o.caSecret}, {"scheduler-secret", o.schedulerSecret}, {"agent-secret", o.agentSecret}} {
		if msgs := validation.IsDNS1123Subdomain(f.v); len(msgs) > 0 {
			errs = append(errs, flagErr(f.name, "%s: %s", quoteTrunc(f.v), strings.Join(msgs, "; ")))
		}
	}
	for _, f := range []struct{ name, v string }{{"nodes", o.nodes}, {"node-selector", o.nodeSelector}} {
		if f.v != "" {
			errs = append(errs, flagErr(f.name, "%s: agents no longer get per-node certificates: each proves its node with its pod's ServiceAccount token, and one agent certificate serves all; drop the flag", quoteTrunc(f.v)))
		}
	}
	for _, n := range splitList(o.serverNames) {
		if msgs := validation.IsDNS1123Subdomain(n); len(msgs) > 0 {
			errs = append(errs, flagErr("scheduler-names", "%s: %s", quoteTrunc(n), strings.Join(msgs, "; ")))
		}
	}
	if o.validity < time.Hour || o.validity > 10*365*24*time.Hour {
		errs = append(errs, flagErr("validity", "%s: want 1h to 10 years", o.validity))
	}
	if o.caValidity < o.validity || o.caValidity > 30*365*24*time.Hour {
		errs = append(errs, flagErr("ca-validity", "%s: want at least --validity, at most 30 years", o.caValidity))
	}
	return errs
}

func (o *certsOptions) schedulerNames() []string {
	if n := splitList(o.serverNames); len(n) > 0 {
		return n
	}
	svc := defaultTelemetrySvc + "." + o.namespace
	return []string{defaultTelemetrySvc, svc, svc + ".svc", svc + ".svc.cluster.local"}
}

// runCerts is `gpud certs`.
func runCerts(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gpud certs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &certsOptions{}
	o.register(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, certsUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("certs: unexpected argument %s (flags only)", quoteTrunc(fs.Arg(0)))
	}
	if err := errors.Join(o.validate()...); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	restCfg, err := kubeRESTConfig(o.kubeconfig)
	if err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	restCfg.UserAgent = "gpud-certs/" + version
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("certs: API client: %w", err)
	}
	res, err := o.write(ctx, client, time.Now())
	if err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	fmt.Fprintf(stdout, "CA %s/%s (%s), scheduler %s/%s for %s, agents %s/%s (one client certificate, CN %s; each agent proves its node with its ServiceAccount token)\n",
		o.namespace, o.caSecret, res.ca, o.namespace, o.schedulerSecret, strings.Join(o.schedulerNames(), ","), o.namespace, o.agentSecret, stream.AgentCommonName)
	if res.removed > 0 {
		fmt.Fprintf(stdout, "removed %d per-node certificate and key entries an older gpud wrote into %s/%s\n", res.removed, o.namespace, o.agentSecret)
	}
	return nil
}

type certsResult struct {
	ca      string // "created" or "reused"
	removed int    // per-node entries of an older gpud removed from the agent Secret
}

// write issues the certificates and writes the three Secrets.
func (o *certsOptions) write(ctx context.Context, client kubernetes.Interface, now time.Time) (certsResult, error) {
	var res certsResult
	secrets := client.CoreV1().Secrets(o.namespace)
	ca, created, err := o.loadOrCreateCA(ctx, client, now)
	if err != nil {
		return res, err
	}
	res.ca = map[bool]string{true: "created", false: "reused"}[created]

	cert, key, err := ca.Issue(stream.Leaf{CommonName: "gpud-scheduler", DNSNames: o.schedulerNames(), Server: true, NotBefore: now, Validity: o.validity})
	if err != nil {
		return res, err
	}
	sched := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: o.schedulerSecret, Namespace: o.namespace, Labels: certsLabels()},
		Type: corev1.SecretTypeTLS, Data: map[string][]byte{corev1.TLSCertKey: cert, corev1.TLSPrivateKeyKey: key, "ca.crt": ca.CertPEM}}
	if err := apply(ctx, secrets, sched); err != nil {
		return res, err
	}

	cert, key, err = ca.Issue(stream.Leaf{CommonName: stream.AgentCommonName, Client: true, NotBefore: now, Validity: o.validity})
	if err != nil {
		return res, err
	}
	agent := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: o.agentSecret, Namespace: o.namespace, Labels: certsLabels()},
		Type: corev1.SecretTypeOpaque, Data: map[string][]byte{corev1.TLSCertKey: cert, corev1.TLSPrivateKeyKey: key, "ca.crt": ca.CertPEM}}
	if old, err := secrets.Get(ctx, o.agentSecret, metav1.GetOptions{}); err == nil {
		for k := range old.Data {
			if _, ok := agent.Data[k]; !ok {
				res.removed++
			}
		}
		agent.Type = old.Type // immutable: an older gpud's Opaque, or a cert-manager kubernetes.io/tls
	} else if !apierrors.IsNotFound(err) {
		return res, fmt.Errorf("read secret %s/%s: %w", o.namespace, o.agentSecret, err)
	}
	return res, apply(ctx, secrets, agent)
}

func certsLabels() map[string]string {
	return map[string]string{"app.kubernetes.io/name": "gpud", "app.kubernetes.io/component": "telemetry-certs"}
}

// loadOrCreateCA reads the CA Secret or creates it.
func (o *certsOptions) loadOrCreateCA(ctx context.Context, client kubernetes.Interface, now time.Time) (*stream.CA, bool, error) {
	secrets := client.CoreV1().Secrets(o.namespace)
	s, err := secrets.Get(ctx, o.caSecret, metav1.GetOptions{})
	switch {
	case err == nil:
		crt, key := s.Data["ca.crt"], s.Data["ca.key"]
		if len(key) == 0 { // a cert-manager CA Certificate's Secret
			crt, key = s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey]
		}
		ca, err := stream.ParseCA(crt, key)
		if err != nil {
			return nil, false, fmt.Errorf("secret %s/%s: %w (delete it to make a new CA, then rerun)", o.namespace, o.caSecret, err)
		}
		if !now.Before(ca.Cert.NotAfter.Add(-o.validity)) {
			return nil, false, fmt.Errorf("secret %s/%s: the CA expires %s, before certificates of --validity %s would: delete it to make a new CA, then rerun", o.namespace, o.caSecret, ca.Cert.NotAfter.Format(time.RFC3339), o.validity)
		}
		return ca, false, nil
	case !apierrors.IsNotFound(err):
		return nil, false, fmt.Errorf("read secret %s/%s: %w", o.namespace, o.caSecret, err)
	}
	ca, err := stream.NewCA("gpud-telemetry-ca", now, o.caValidity)
	if err != nil {
		return nil, false, err
	}
	s = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: o.caSecret, Namespace: o.namespace, Labels: certsLabels()},
		Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"ca.crt": ca.CertPEM, "ca.key": ca.KeyPEM}}
	if _, err := secrets.Create(ctx, s, metav1.CreateOptions{}); err != nil {
		return nil, false, fmt.Errorf("create secret %s/%s: %w", o.namespace, o.caSecret, err)
	}
	return ca, true, nil
}

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
