package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/gpud/gpud/pkg/adminapi"
	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/mig"
	"github.com/gpud/gpud/pkg/podresources"
	"github.com/gpud/gpud/pkg/procattr"
	"github.com/gpud/gpud/pkg/telemetry"
	"github.com/gpud/gpud/pkg/timeslice"
)

// task is one long-running part of the agent. All tasks start together;
// the first error stops the agent.
type task struct {
	name string
	run  func(ctx context.Context) error
}

// runAgent is `gpud agent`: load and validate the whole config, open NVML,
// read the node once, build every component on what it needs, then run
// them all until ctx ends or one fails.
func runAgent(ctx context.Context, args []string, _, stderr io.Writer) error {
	cfg, err := loadAgentConfig(args, stderr)
	if err != nil {
		return err
	}
	log, _ := newLogger(stderr, cfg.logFormat, cfg.logLevel) // validated
	lib, sim, closeLib, err := openNVML(cfg.nvml)
	if err != nil {
		return err
	}
	defer closeLib()
	node := cfg.nvml.resolveNodeName(sim)

	// The node's one owner of each stream: the inventory store (with
	// health), the NVML event pump, the process reader, the PodResources
	// client. Components get them, not each other.
	store := discovery.NewStore(discovery.New(lib, node, log.With("component", "discovery")), log.With("component", "inventory"))
	inv, err := store.Rediscover()
	if err != nil {
		log.Warn("inventory read failed, retrying in the background", "err", err)
	}
	sharing, err := cfg.sharing.loadSharing(inv)
	if err != nil {
		return err
	}
	pods := podresources.New(cfg.podResourcesSocket)
	defer func() {
		if err := pods.Close(); err != nil {
			log.Warn("pod resources close failed", "err", err)
		}
	}()
	procs := discovery.ProcessReader{Lib: lib}
	containers := procattr.Resolver{ProcRoot: cfg.procRoot}
	podNames := procattr.PodLogs{Root: cfg.podLogsRoot}
	health := discovery.NewHealthMonitor(lib, cfg.health.config(), store.SetHealth, log.With("component", "health"))
	runtime := timeslice.NewRuntime(timeslice.RuntimeConfig{Initial: sharing, Inventory: store.Current, Allocations: pods})
	metrics := prometheus.NewRegistry()

	migLog := log.With("component", "mig")
	migSvc, err := newMIGService(lib, sim, cfg.mig.journal, cfg.mig.resetGPUs, pods,
		func(mig.Result) { rediscoverAfterMIG(store, migLog) }, migLog)
	if err != nil {
		return err
	}

	sampler, err := telemetry.NewSampler(lib, store.Inventory, telemetry.Attribution{Pods: pods, Procs: containers, Names: podNames},
		telemetry.Config{Interval: cfg.telemetry.interval, Hostname: node}, log.With("component", "telemetry"))
	if err != nil {
		return fmt.Errorf("telemetry: %w", err)
	}
	compat, _ := telemetry.ParseCompat(cfg.telemetry.compat) // validated
	if err := metrics.Register(telemetry.NewCollector(sampler, compat, version)); err != nil {
		return fmt.Errorf("telemetry: register metrics: %w", err)
	}
	health.OnXid(sampler.RecordXid)

	dp, err := cfg.dp.newDevicePlugin(struct {
		*discovery.Store
		*timeslice.Runtime
	}{store, runtime}, log.With("component", "deviceplugin"))
	if err != nil {
		return err
	}

	var reload func() (migOptions, error)
	if cfg.configPath != "" {
		reload = agentReloader(args)
	}
	migC := &migComponent{svc: migSvc, reload: reload, configPath: cfg.configPath, log: migLog, opts: cfg.mig}
	sharingC := &sharingComponent{opts: cfg.sharing, deps: sharingDeps{
		runtime: runtime, inventory: store.Current, metrics: metrics, log: log.With("component", "sharing"),
		watchdog: timeslice.WatchdogConfig{Processes: procs, Containers: containers, Pods: podNames, Assignments: pods},
	}}

	adminMux := http.NewServeMux()
	migAPI{svc: migSvc}.routes(adminMux)
	sharingAPI{runtime: runtime}.routes(adminMux)

	tasks := []task{
		{"inventory", func(ctx context.Context) error { return store.Run(ctx, cfg.rediscover) }},
		{"health", health.Run},
		{"telemetry", sampler.Run},
		{"mig", migC.Run},
		{"sharing", sharingC.Run},
	}
	if cfg.http.addr != "" {
		srv := &httpServer{addr: cfg.http.addr, inventory: store.Inventory, metrics: metrics, log: log.With("component", "http")}
		tasks = append(tasks, task{"http", srv.Run})
	}
	if cfg.admin.socket != "" {
		srv := &adminapi.Server{Path: cfg.admin.socket, Handler: adminMux, Log: log.With("component", "admin")}
		tasks = append(tasks, task{"admin", srv.Run})
	}
	if dp != nil {
		tasks = append(tasks, task{"deviceplugin", dp.Run})
	}

	log.Info("agent starting", "version", version, "node", node, "simulated", sim != nil)
	g, ctx := errgroup.WithContext(ctx)
	for _, t := range tasks {
		g.Go(func() error {
			if err := t.run(ctx); err != nil {
				return fmt.Errorf("%s: %w", t.name, err)
			}
			return nil
		})
	}
	err = g.Wait()
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Error("agent stopped", "err", err)
		return err
	}
	log.Info("agent stopped")
	return nil
}

// agentReloader rereads the agent config with the one loader, so a reload
// follows the rule of the start: flags on the command line win, every key
// and value is checked, errors name file and line. It returns the MIG
// component's part, the one that applies changes at run time.
func agentReloader(args []string) func() (migOptions, error) {
	return func() (migOptions, error) {
		c, err := loadAgentConfig(args, io.Discard)
		if err != nil {
			return migOptions{}, err
		}
		return c.mig, nil
	}
}

// rediscoverAfterMIG rereads the node after a MIG change so the device
// plugin re-advertises. A GPU whose MIG mode change waits for a reset is
// reported MIGPending by discovery, and the device plugin withdraws it
// until a reset applied the change; this only logs which ones.
func rediscoverAfterMIG(store *discovery.Store, log *slog.Logger) {
	inv, err := store.Rediscover()
	if err != nil {
		log.Warn("rediscover after mig apply failed", "err", err)
		return
	}
	for _, g := range inv.GPUs {
		if g.MIGPending {
			log.Info("gpu withdrawn until reset", "gpu_uuid", g.UUID)
		}
	}
}

func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, flagErr("log-level", "%s: want debug, info, warn or error", quoteTrunc(level))
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch strings.ToLower(format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, flagErr("log-format", "%s: want text or json", quoteTrunc(format))
}
