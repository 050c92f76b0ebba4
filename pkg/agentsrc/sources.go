// Package agentsrc holds the agent's one owner of each hardware and
// kubelet stream ([Sources]): the inventory store, the NVML event pump,
// the GPU process reader, the PodResources client, the sharing runtime.
// The agent's components get these, never each other. It opens no NVML
// handle: the library comes in opened.
package agentsrc

import (
	"errors"
	"log/slog"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/pkg/agentevents"
	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/podresources"
	"github.com/gpud/gpud/pkg/procattr"
	"github.com/gpud/gpud/pkg/timeslice"
)

// Config says where the sources read from.
type Config struct {
	// Node is the node name reported everywhere; required.
	Node string
	// PodResourcesSocket is the kubelet's PodResources socket; required.
	PodResourcesSocket string
	// ProcRoot is the /proc to resolve GPU processes' containers in.
	ProcRoot string
	// PodLogsRoot is the kubelet's pod log dir, to name pods by UID.
	PodLogsRoot string
	// Health configures the NVML event pump.
	Health discovery.HealthConfig
	// Sharing returns the sharing config checked against the node's
	// first inventory; nil: no sharing config.
	Sharing func(gpu.Inventory) (timeslice.Config, error)
}

// Validate reports every missing field.
func (c Config) Validate() error {
	var errs []error
	if c.Node == "" {
		errs = append(errs, errors.New("agentsrc: empty node name"))
	}
	if c.PodResourcesSocket == "" {
		errs = append(errs, errors.New("agentsrc: empty PodResources socket"))
	}
	return errors.Join(errs...)
}

// Sources are the node's one owner of each hardware and kubelet stream.
type Sources struct {
	Node       string                   // the node name reported everywhere
	Store      *discovery.Store         // inventory + health, with change notification
	Health     *discovery.HealthMonitor // the one NVML event pump
	Procs      discovery.ProcessReader  // the one GPU process reader
	Pods       *podresources.Client     // the one PodResources client
	Containers procattr.Resolver
	PodNames   procattr.PodLogs
	Sharing    *timeslice.Runtime // the sharing config and its update policy
	// Events is the agent's one Kubernetes Events recorder; nil (records
	// nothing) without API access or with --kube-events=false. The agent
	// sets it once its recorder is built, before anything runs.
	Events *agentevents.Recorder
}

// Open reads the node once and checks the sharing config against it, so
// nothing starts with a config this node cannot take. A failed first
// read is logged and retried in the background by the store's Run.
// Close the result.
func Open(cfg Config, lib nvml.Interface, log *slog.Logger) (*Sources, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	store := discovery.NewStore(discovery.New(lib, cfg.Node, log.With("component", "discovery")), log.With("component", "inventory"))
	inv, err := store.Rediscover()
	if err != nil {
		log.Warn("inventory read failed, retrying in the background", "err", err)
	}
	var sharing timeslice.Config
	if cfg.Sharing != nil {
		if sharing, err = cfg.Sharing(inv); err != nil {
			return nil, err
		}
	}
	pods := podresources.New(cfg.PodResourcesSocket)
	return &Sources{
		Node:       cfg.Node,
		Store:      store,
		Health:     discovery.NewHealthMonitor(lib, cfg.Health, store.SetHealth, log.With("component", "health")),
		Procs:      discovery.ProcessReader{Lib: lib},
		Pods:       pods,
		Containers: procattr.Resolver{ProcRoot: cfg.ProcRoot},
		PodNames:   procattr.PodLogs{Root: cfg.PodLogsRoot},
		Sharing:    timeslice.NewRuntime(timeslice.RuntimeConfig{Initial: sharing, Inventory: store.Current, Allocations: pods}),
	}, nil
}

// Close closes the PodResources client; a failure is logged.
func (s *Sources) Close(log *slog.Logger) {
	if err := s.Pods.Close(); err != nil {
		log.Warn("pod resources close failed", "err", err)
	}
}
