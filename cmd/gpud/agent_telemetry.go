package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/gpud/gpud/pkg/podresources"
	"github.com/gpud/gpud/pkg/procattr"
	"github.com/gpud/gpud/pkg/telemetry"
)

// telemetryComponent samples NVML in the background and serves /metrics.
type telemetryComponent struct {
	interval time.Duration
	compat   string
	socket   string
}

func (c *telemetryComponent) name() string { return "telemetry" }

func (c *telemetryComponent) registerFlags(fs *flag.FlagSet) {
	fs.DurationVar(&c.interval, "sample-interval", 5*time.Second, "how often telemetry reads every GPU and MIG device from NVML")
	fs.StringVar(&c.compat, "metrics-compat", "dcgm", "device metric names on /metrics: dcgm (dcgm-exporter's), native (gpud_*, base units) or both")
	fs.StringVar(&c.socket, "pod-resources-socket", podresources.DefaultSocket, "kubelet PodResources API socket, for namespace/pod/container labels")
}

func (c *telemetryComponent) run(ctx context.Context, a *agent) error {
	log := a.log.With("component", "telemetry")
	compat, err := telemetry.ParseCompat(c.compat)
	if err != nil {
		return err
	}
	pods := podresources.New(c.socket)
	defer func() {
		if err := pods.Close(); err != nil {
			log.Warn("pod resources close failed", "err", err)
		}
	}()
	s, err := telemetry.NewSampler(a.lib, a.Inventory, telemetry.Attribution{
		Pods:  pods,
		Procs: procattr.Resolver{ProcRoot: a.procRoot},
		Names: procattr.PodLogs{Root: a.podLogsRoot},
	}, telemetry.Config{Interval: c.interval, Hostname: a.node}, log)
	if err != nil {
		return fmt.Errorf("--sample-interval %s: %w", c.interval, err)
	}
	if err := a.metrics.Register(telemetry.NewCollector(s, compat, version)); err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	log.Info("telemetry sampling", "interval", s.Config().Interval, "metrics_compat", compat, "pod_resources_socket", pods.Socket())
	return s.Run(ctx)
}
