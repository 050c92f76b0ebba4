package main

import (
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/gpud/gpud/internal/printable"
	"github.com/gpud/gpud/internal/taskgroup"
	"github.com/gpud/gpud/pkg/agentsrc"
	"github.com/gpud/gpud/pkg/nodetaint"
)

// nodeTaintOptions is --node-taint: taint the agent's Node when its GPUs
// keep failing (pkg/nodetaint). It uses the DRA driver's config loader
// (--kubeconfig, else in-cluster) and --node-name.
type nodeTaintOptions struct {
	on         bool
	window     time.Duration
	gpus       int
	clearAfter time.Duration
	noExecute  time.Duration
}

func (o *nodeTaintOptions) register(fs *flag.FlagSet) {
	fs.BoolVar(&o.on, "node-taint", false, "taint this node's Node "+nodetaint.TaintKey+":NoSchedule when a GPU fails again after recovering or --node-taint-gpus GPUs fail within --node-taint-window; removed after --node-taint-clear-after healthy; uses --kubeconfig and --node-name")
	fs.DurationVar(&o.window, "node-taint-window", nodetaint.DefaultWindow, "how far back GPU failures count for --node-taint (1m to 720h)")
	fs.IntVar(&o.gpus, "node-taint-gpus", nodetaint.DefaultMaxGPUs, "how many distinct GPUs failing within --node-taint-window taint the node (1 to 1024)")
	fs.DurationVar(&o.clearAfter, "node-taint-clear-after", nodetaint.DefaultClearAfter, "how long every GPU must stay healthy before --node-taint's taint is removed (1m to 168h)")
	fs.DurationVar(&o.noExecute, "node-taint-noexecute-after", 0, "with --node-taint: once the node has carried the NoSchedule taint this long with a GPU still unhealthy, add the NoExecute taint of the same key and value (pods without a toleration are evicted); both are removed together; 0 (the default) never, else 1m to 168h")
}

func nodeTaintConfig(o *nodeTaintOptions) nodetaint.Config {
	return nodetaint.Config{Window: o.window, MaxGPUs: o.gpus, ClearAfter: o.clearAfter, NoExecuteAfter: o.noExecute}
}

func (o *nodeTaintOptions) validate(dra *draOptions) []error {
	if !o.on {
		return nil
	}
	var errs []error
	if err := nodeTaintConfig(o).Validate(); err != nil {
		errs = append(errs, flagErr("node-taint", "--node-taint-window %s, --node-taint-gpus %d, --node-taint-clear-after %s, --node-taint-noexecute-after %s: %w", o.window, o.gpus, o.clearAfter, o.noExecute, err))
	}
	if !draEnabled(dra) && dra.kubeconfig == "" && !inClusterEnv() {
		errs = append(errs, flagErr("node-taint", "true needs API access: set --kubeconfig, or run in a pod with its service account token"))
	}
	return errs
}

// newNodeTaintTasks returns the node taint task, or none when it is off.
func newNodeTaintTasks(o *nodeTaintOptions, cfg *agentConfig, src *agentsrc.Sources, metrics prometheus.Registerer, log *slog.Logger) ([]taskgroup.Task, error) {
	if !o.on {
		return nil, nil
	}
	if msgs := validation.IsDNS1123Subdomain(src.Node); len(msgs) > 0 {
		return nil, flagErr("node-name", "%s is not a Kubernetes node name: %s; set --node-name", printable.Quote(src.Node), strings.Join(msgs, "; "))
	}
	rc, err := draRESTConfig(&cfg.dra)
	if err != nil {
		return nil, fmt.Errorf("node taint: %w", err)
	}
	rc.UserAgent = "gpud/" + version + " (node-taint)"
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("node taint: api client: %w", err)
	}
	s, err := nodetaint.NewSyncer(nodetaint.SyncerConfig{Client: client, NodeName: src.Node, Inventory: src.Store, Tracker: nodeTaintConfig(o), Log: log,
		Metrics: metrics, OnChange: func(t nodetaint.Taint) {
			if t.NoExecute {
				src.Events.NodeTaintNoExecute(nodetaint.TaintKey, t.Value, t.Reason)
				return
			}
			src.Events.NodeTaint(nodetaint.TaintKey, t.Value, t.Reason)
		}})
	if err != nil {
		return nil, err
	}
	return []taskgroup.Task{{Name: "node-taint", Run: s.Run}}, nil
}
