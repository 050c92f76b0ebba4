package main

import (
	"flag"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/gpud/gpud/internal/taskgroup"
	"github.com/gpud/gpud/pkg/agentevents"
)

// eventsOptions is --kube-events: the agent's Kubernetes Events on pods
// and its Node. On by default where the agent has API access (the same
// as --node-labels auto: --kubelet-api dra, --kubeconfig, or a pod's
// service account token); without it the agent writes none.
type eventsOptions struct {
	on bool
}

func (o *eventsOptions) register(fs *flag.FlagSet) {
	fs.BoolVar(&o.on, "kube-events", true, "write Kubernetes Events on pods and this node (GPU unhealthy/healthy, memory watchdog reports and kills, GPU memory limits set or refused, MIG layout changes), rate limited per object; needs API access (--kubelet-api dra, --kubeconfig, or a pod's service account token) and is off without it; uses --kubeconfig and --node-name")
}

// newEventRecorder returns the Events recorder and its task, or a nil recorder
// (which records nothing) when Events are off or the agent has no API
// access; that is logged once, never an error: Events are a report.
func newEventRecorder(o *eventsOptions, cfg *agentConfig, node string, metrics prometheus.Registerer, log *slog.Logger) (*agentevents.Recorder, []taskgroup.Task, error) {
	if !o.on {
		return nil, nil, nil
	}
	if !draEnabled(&cfg.dra) && cfg.dra.kubeconfig == "" && !inClusterEnv() {
		log.Info("kubernetes events off: no API access (set --kubeconfig, or --kube-events=false to say so)")
		return nil, nil, nil
	}
	if msgs := validation.IsDNS1123Subdomain(node); len(msgs) > 0 {
		log.Warn("kubernetes events off: the node name is not a Kubernetes node name, set --node-name", "node", node)
		return nil, nil, nil
	}
	rc, err := draRESTConfig(&cfg.dra)
	if err != nil {
		log.Warn("kubernetes events off", "err", err)
		return nil, nil, nil
	}
	rc.UserAgent = "gpud/" + version + " (events)"
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		log.Warn("kubernetes events off", "err", fmt.Errorf("api client: %w", err))
		return nil, nil, nil
	}
	r, err := agentevents.New(agentevents.Config{Client: client, NodeName: node, Metrics: metrics, Log: log})
	if err != nil {
		return nil, nil, err
	}
	return r, []taskgroup.Task{{Name: "kube-events", Run: r.Run}}, nil
}
