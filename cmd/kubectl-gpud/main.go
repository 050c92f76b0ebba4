// Command kubectl-gpud is a kubectl plugin (kubectl gpud ...): who holds
// which GPU, MIG slice or fraction, and why a pod waits, read with the
// user's kubeconfig and RBAC. It wires flags and the API client; the
// logic is pkg/kubectlgpud.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpud/gpud/internal/printable"
	"github.com/gpud/gpud/pkg/kubectlgpud"
)

const usage = `kubectl gpud: GPUs, MIG slices and fractions in the cluster, and why pods wait

Usage:
  kubectl gpud nodes  [flags]            per node: GPUs, model, free, MIG layout, fractions, health
  kubectl gpud pods   [-n NS | -A]       per pod: node, GPUs, MIG slices or fractions, queue, group
  kubectl gpud why    POD [-n NS]        the scheduler's reason, the pod's group and queue, what is free
  kubectl gpud queues [flags]            Queue objects (tree, weight, namespaces, guarantees, limits, usage,
                                         pending) and the pods and devices held per queue
  kubectl gpud version                   print the version

Flags:
`

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "kubectl-gpud:", printable.Lines(err.Error()))
		os.Exit(1)
	}
}

// flags are the command line's flags, kubectl's names.
type flags struct {
	kubeconfig, context, namespace, output, prefix string
	allNamespaces                                  bool
	timeout                                        time.Duration
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f flags
	fs := flag.NewFlagSet("kubectl gpud", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
	fs.StringVar(&f.context, "context", "", "the kubeconfig context to use")
	fs.StringVar(&f.namespace, "namespace", "", "the namespace (default: the context's)")
	fs.StringVar(&f.namespace, "n", "", "short for --namespace")
	fs.BoolVar(&f.allNamespaces, "all-namespaces", false, "pods of every namespace")
	fs.BoolVar(&f.allNamespaces, "A", false, "short for --all-namespaces")
	fs.StringVar(&f.output, "output", kubectlgpud.OutputTable, "output format: table or json")
	fs.StringVar(&f.output, "o", kubectlgpud.OutputTable, "short for --output")
	fs.StringVar(&f.prefix, "resource-prefix", kubectlgpud.DefaultResourcePrefix, "the device plugin's resource domain")
	fs.DurationVar(&f.timeout, "request-timeout", 30*time.Second, "time limit for the whole command")
	// kubectl passes flags and arguments in any order: parse flags between
	// the positional arguments.
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return err
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos, args = append(pos, args[0]), args[1:]
	}
	if len(pos) == 0 {
		fs.Usage()
		return errors.New("no command given; want one of " + strings.Join(kubectlgpud.Commands, ", "))
	}
	if pos[0] == "version" {
		if len(pos) > 1 {
			return fmt.Errorf("version: unexpected argument %s: the command takes none", printable.Quote(pos[1]))
		}
		fmt.Fprintln(stdout, "kubectl-gpud", version)
		return nil
	}
	if f.timeout <= 0 || f.timeout > time.Hour {
		return fmt.Errorf("--request-timeout %s: want more than 0 and at most 1h", f.timeout)
	}
	opt := kubectlgpud.Options{Command: pos[0], Args: pos[1:], Namespace: f.namespace, AllNamespaces: f.allNamespaces,
		Output: f.output, ResourcePrefix: f.prefix}
	if err := opt.Validate(); err != nil {
		return err
	}
	loading := clientcmd.NewDefaultClientConfigLoadingRules()
	loading.ExplicitPath = f.kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(loading, &clientcmd.ConfigOverrides{CurrentContext: f.context})
	if opt.Namespace == "" {
		ns, _, err := cc.Namespace()
		if err != nil {
			return fmt.Errorf("kubeconfig: %w", err)
		}
		opt.Namespace = ns
	}
	cfg, err := cc.ClientConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w (set --kubeconfig or KUBECONFIG)", err)
	}
	cfg.UserAgent = "kubectl-gpud/" + version
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kubernetes dynamic client: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	return kubectlgpud.RunClients(ctx, kubectlgpud.Clients{Kube: cs, Dynamic: dyn}, opt, stdout)
}
