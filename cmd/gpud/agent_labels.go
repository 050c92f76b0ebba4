package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpud/gpud/internal/printable"
	"github.com/gpud/gpud/internal/taskgroup"
	"github.com/gpud/gpud/pkg/agentsrc"
	"github.com/gpud/gpud/pkg/mig/migctl"
	"github.com/gpud/gpud/pkg/nodelabels"
	"github.com/gpud/gpud/pkg/nodelabels/labelsync"
)

// labelsOptions is --node-labels: keep GPU Feature Discovery's labels on
// the agent's Node. Unset ("auto") it is on when the agent has API
// access: in DRA mode (which needs it), with --kubeconfig, or in a pod
// whose service account token is mounted (the in-cluster config). It uses
// the DRA driver's config loader (--kubeconfig, else in-cluster) and
// --node-name.
type labelsOptions struct {
	set bool // given on the command line or in the config file
	on  bool
}

const labelsAuto = "auto"

func (o *labelsOptions) register(fs *flag.FlagSet) {
	fs.Var(o, "node-labels", "keep GPU Feature Discovery's node labels (nvidia.com/gpu.product, gpu.count, ...) and gpud.io/ ones on this node's Node: true, false or auto (on when the agent has API access: --kubelet-api dra, --kubeconfig, or a pod's service account token); uses --kubeconfig and --node-name")
}

// String, Set and IsBoolFlag make --node-labels a bool flag with a third
// value, auto, its default.
func (o *labelsOptions) String() string {
	if o == nil || !o.set {
		return labelsAuto
	}
	return strconv.FormatBool(o.on)
}

func (o *labelsOptions) Set(s string) error {
	if s == labelsAuto {
		o.set, o.on = false, false
		return nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("%q: want true, false or auto", s)
	}
	o.set, o.on = true, b
	return nil
}

func (o *labelsOptions) IsBoolFlag() bool { return true }

// inClusterEnv reports whether the agent runs in a pod (the in-cluster
// config's environment; its token is checked when the client is built).
func inClusterEnv() bool {
	return os.Getenv("KUBERNETES_SERVICE_HOST") != "" && os.Getenv("KUBERNETES_SERVICE_PORT") != ""
}

// validate checks --node-labels against the API access the other flags
// give. DRA mode checks --kubeconfig and --node-name itself; outside it,
// labels check them here.
func (o *labelsOptions) validate(dra *draOptions, nodeName string) []error {
	if o.set && !o.on || draEnabled(dra) {
		return nil
	}
	var errs []error
	if o.set && dra.kubeconfig == "" && !inClusterEnv() {
		errs = append(errs, flagErr("node-labels", "true needs API access: set --kubeconfig, or run in a pod with its service account token"))
	}
	if dra.kubeconfig != "" {
		if _, err := clientcmd.BuildConfigFromFlags("", dra.kubeconfig); err != nil {
			errs = append(errs, flagErr("kubeconfig", "%w", err))
		}
	}
	// --node-name is checked with the other NVML flags (nvmlFlags.validate).
	return errs
}

// newNodeLabelTasks returns the node labels task, or none when labels are off. In
// auto mode, missing API access turns labels off with one log line;
// with --node-labels=true it is an error.
func newNodeLabelTasks(o *labelsOptions, cfg *agentConfig, src *agentsrc.Sources, migState *migctl.ConfigState, log *slog.Logger) ([]taskgroup.Task, error) {
	if o.set && !o.on {
		return nil, nil
	}
	if !o.set && !draEnabled(&cfg.dra) && cfg.dra.kubeconfig == "" && !inClusterEnv() {
		log.Info("node labels off: no API access (set --kubeconfig, or --node-labels=false to say so)")
		return nil, nil
	}
	off := func(err error) ([]taskgroup.Task, error) {
		if o.set || draEnabled(&cfg.dra) {
			return nil, err
		}
		log.Info("node labels off", "reason", err)
		return nil, nil
	}
	if msgs := validation.IsDNS1123Subdomain(src.Node); len(msgs) > 0 {
		return off(flagErr("node-name", "%s (from $NODE_NAME, the simulated profile or the hostname) is not a Kubernetes node name: %s; set --node-name",
			printable.Quote(src.Node), strings.Join(msgs, "; ")))
	}
	rc, err := draRESTConfig(&cfg.dra)
	if err != nil {
		return off(err)
	}
	rc.UserAgent = "gpud/" + version + " (node-labels)"
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return off(fmt.Errorf("node labels: api client: %w", err))
	}
	strategy := "" // DRA: MIG devices are dynamic, GFD's strategies do not apply
	if !draEnabled(&cfg.dra) {
		strategy = cfg.dp.migStrategy
	}
	u, err := labelsync.New(labelsync.Config{
		Client: client, NodeName: src.Node, Inventory: src.Store,
		Options: func() nodelabels.Options {
			return nodelabels.Options{MIGStrategy: strategy, MIGConfigState: migState.Get(src.Store.Current())}
		},
		Log: log,
	})
	if err != nil {
		return nil, err // names the package
	}
	migState.Notify(u.Refresh)
	return []taskgroup.Task{{Name: "node-labels", Run: u.Run}}, nil
}
