package kubectlgpud

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// Commands are the plugin's commands.
var Commands = []string{"nodes", "pods", "why", "queues"}

// Output formats.
const (
	OutputTable = "table"
	OutputJSON  = "json"
)

// DefaultResourcePrefix is the device plugin's resource domain.
const DefaultResourcePrefix = "nvidia.com"

// Options is one command line.
type Options struct {
	// Command is one of [Commands]; Args are its arguments (why: the pod).
	Command string
	Args    []string
	// Namespace is the namespace of pods and claims (pods, why); the
	// caller resolves the kubeconfig's default. AllNamespaces reads all
	// (pods).
	Namespace     string
	AllNamespaces bool
	// Output is OutputTable (the zero value) or OutputJSON.
	Output string
	// ResourcePrefix is the device plugin's resource domain; "" is
	// DefaultResourcePrefix.
	ResourcePrefix string
}

// Validate checks the command line, naming what is wrong and what to do.
func (o *Options) Validate() error {
	var errs []error
	switch o.Command {
	case "nodes", "queues":
		if len(o.Args) > 0 {
			errs = append(errs, fmt.Errorf("%s takes no arguments, got %q: %w", o.Command, o.Args[0], ErrUsage))
		}
	case "pods":
		if len(o.Args) > 0 {
			errs = append(errs, fmt.Errorf("pods takes no arguments, got %q; use -n NAMESPACE or -A: %w", o.Args[0], ErrUsage))
		}
	case "why":
		switch {
		case len(o.Args) != 1:
			errs = append(errs, fmt.Errorf("why takes one pod name (kubectl gpud why POD [-n NAMESPACE]), got %d arguments: %w", len(o.Args), ErrUsage))
		case len(validation.IsDNS1123Subdomain(o.Args[0])) > 0:
			errs = append(errs, fmt.Errorf("why: %q is not a pod name (%s): %w", o.Args[0], strings.Join(validation.IsDNS1123Subdomain(o.Args[0]), "; "), ErrUsage))
		}
		if o.AllNamespaces {
			errs = append(errs, fmt.Errorf("why takes one namespace (-n), not -A: %w", ErrUsage))
		}
	case "":
		errs = append(errs, fmt.Errorf("no command given; want one of %s: %w", strings.Join(Commands, ", "), ErrUsage))
	default:
		errs = append(errs, fmt.Errorf("unknown command %q; want one of %s: %w", o.Command, strings.Join(Commands, ", "), ErrUsage))
	}
	if o.Namespace != "" && len(validation.IsDNS1123Label(o.Namespace)) > 0 {
		errs = append(errs, fmt.Errorf("namespace %q is not a namespace name: %w", o.Namespace, ErrUsage))
	}
	switch o.Output {
	case "", OutputTable, OutputJSON:
	default:
		errs = append(errs, fmt.Errorf("output %q: want %s or %s: %w", o.Output, OutputTable, OutputJSON, ErrUsage))
	}
	if o.ResourcePrefix != "" && (strings.Contains(o.ResourcePrefix, "/") || !strings.Contains(o.ResourcePrefix, ".")) {
		errs = append(errs, fmt.Errorf("resource prefix %q: want a domain such as nvidia.com: %w", o.ResourcePrefix, ErrUsage))
	}
	return errors.Join(errs...)
}

// Clients are the API clients of a command: Kube for every command,
// Dynamic for the Queue objects (queues; nil: not read, noted).
type Clients struct {
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
}

// Run runs one command against the API server cs and prints its result
// to w; the queues command does not read Queue objects ([RunClients]
// does).
func Run(ctx context.Context, cs kubernetes.Interface, o Options, w io.Writer) error {
	return RunClients(ctx, Clients{Kube: cs}, o, w)
}

// RunClients runs one command with c and prints its result to w.
func RunClients(ctx context.Context, c Clients, o Options, w io.Writer) error {
	cs := c.Kube
	if err := o.Validate(); err != nil {
		return err
	}
	prefix := o.ResourcePrefix
	if prefix == "" {
		prefix = DefaultResourcePrefix
	}
	ns := o.Namespace
	if o.AllNamespaces {
		ns = ""
	}
	switch o.Command {
	case "nodes":
		s, err := Load(ctx, cs, Need{Nodes: true, Pods: true, DRA: true})
		if err != nil {
			return fmt.Errorf("nodes: %w", err)
		}
		return printNodes(w, o.Output, Nodes(s, prefix), s.Notes)
	case "pods":
		s, err := Load(ctx, cs, Need{PodsNamespace: ns, ClaimsNamespace: ns, Nodes: true, Pods: true, DRA: true,
			OptionalNodes: true, OptionalDRA: true})
		if err != nil {
			return fmt.Errorf("pods: %w", err)
		}
		return printPods(w, o.Output, Pods(s, prefix), s.Notes)
	case "queues":
		s, err := Load(ctx, cs, Need{Pods: true, DRA: true, OptionalDRA: true})
		if err != nil {
			return fmt.Errorf("queues: %w", err)
		}
		if err := LoadQueues(ctx, c.Dynamic, s); err != nil {
			return fmt.Errorf("queues: %w", err)
		}
		if err := LoadNamespaces(ctx, cs, s); err != nil {
			return fmt.Errorf("queues: %w", err)
		}
		return printQueues(w, o.Output, s, QueueObjects(s), Queues(s, prefix))
	}
	// why
	name := o.Args[0]
	pod, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("why: pod %q in namespace %q: %w; check the name with kubectl get pods -n %s, or give the namespace with -n", name, ns, ErrNotFound, ns)
	}
	if err != nil {
		return fmt.Errorf("why: get pod %s/%s: %w", ns, name, err)
	}
	s, err := Load(ctx, cs, Need{Fallback: ns, Nodes: true, Pods: true, DRA: true, OptionalNodes: true, OptionalDRA: true, EventsFor: pod})
	if err != nil {
		return fmt.Errorf("why %s/%s: %w", ns, name, err)
	}
	return printWhy(w, o.Output, Why(s, pod, prefix))
}
