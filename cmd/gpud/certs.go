package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/gpud/gpud/internal/printable"
	"github.com/gpud/gpud/pkg/stream"
	"github.com/gpud/gpud/pkg/stream/certsecret"
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
	fs.StringVar(&o.namespace, "namespace", certsecret.DefaultNamespace, "namespace of the Secrets (gpud's)")
	fs.StringVar(&o.nodes, "nodes", "", "removed: agents no longer get per-node certificates (their ServiceAccount token proves the node); any value is refused")
	fs.StringVar(&o.nodeSelector, "node-selector", "", "removed, as --nodes")
	fs.StringVar(&o.caSecret, "ca-secret", certsecret.DefaultCASecret, "Secret of the CA (created once, then reused)")
	fs.StringVar(&o.schedulerSecret, "scheduler-secret", certsecret.DefaultSchedulerSecret, "Secret of the scheduler's serving certificate (kubernetes.io/tls)")
	fs.StringVar(&o.agentSecret, "agent-secret", certsecret.DefaultAgentSecret, "Secret of the agents' certificates")
	fs.StringVar(&o.serverNames, "scheduler-names", "", "comma-separated DNS names of the scheduler's certificate; empty: the telemetry Service "+certsecret.DefaultTelemetryService+" in --namespace (short, .svc and .svc.cluster.local)")
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
		errs = append(errs, flagErr("namespace", "%s: %s", printable.Quote(o.namespace), strings.Join(msgs, "; ")))
	}
	for _, f := range []struct{ name, v string }{{"ca-secret", o.caSecret}, {"scheduler-secret", o.schedulerSecret}, {"agent-secret", o.agentSecret}} {
		if msgs := validation.IsDNS1123Subdomain(f.v); len(msgs) > 0 {
			errs = append(errs, flagErr(f.name, "%s: %s", printable.Quote(f.v), strings.Join(msgs, "; ")))
		}
	}
	for _, f := range []struct{ name, v string }{{"nodes", o.nodes}, {"node-selector", o.nodeSelector}} {
		if f.v != "" {
			errs = append(errs, flagErr(f.name, "%s: agents no longer get per-node certificates: each proves its node with its pod's ServiceAccount token, and one agent certificate serves all; drop the flag", printable.Quote(f.v)))
		}
	}
	for _, n := range splitList(o.serverNames) {
		if msgs := validation.IsDNS1123Subdomain(n); len(msgs) > 0 {
			errs = append(errs, flagErr("scheduler-names", "%s: %s", printable.Quote(n), strings.Join(msgs, "; ")))
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

func schedulerNames(o *certsOptions) []string {
	if n := splitList(o.serverNames); len(n) > 0 {
		return n
	}
	return certsecret.DefaultSchedulerNames(o.namespace)
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
		return fmt.Errorf("certs: unexpected argument %s (flags only)", printable.Quote(fs.Arg(0)))
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
	res, err := certsecret.Write(ctx, client, certsecret.Config{Namespace: o.namespace, CASecret: o.caSecret, SchedulerSecret: o.schedulerSecret,
		AgentSecret: o.agentSecret, SchedulerNames: schedulerNames(o), Validity: o.validity, CAValidity: o.caValidity}, time.Now())
	if err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	fmt.Fprintf(stdout, "CA %s/%s (%s), scheduler %s/%s for %s, agents %s/%s (one client certificate, CN %s; each agent proves its node with its ServiceAccount token)\n",
		o.namespace, o.caSecret, res.CA, o.namespace, o.schedulerSecret, strings.Join(schedulerNames(o), ","), o.namespace, o.agentSecret, stream.AgentCommonName)
	if res.Removed > 0 {
		fmt.Fprintf(stdout, "removed %d per-node certificate and key entries an older gpud wrote into %s/%s\n", res.Removed, o.namespace, o.agentSecret)
	}
	return nil
}
