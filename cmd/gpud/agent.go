package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpud/gpud/internal/printable"
	"github.com/gpud/gpud/internal/taskgroup"
	"github.com/gpud/gpud/pkg/adminapi"
	"github.com/gpud/gpud/pkg/agenthttp"
	"github.com/gpud/gpud/pkg/agentsrc"
	"github.com/gpud/gpud/pkg/deviceplugin"
	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/memwatch"
	"github.com/gpud/gpud/pkg/mig"
	"github.com/gpud/gpud/pkg/mig/migcli"
	"github.com/gpud/gpud/pkg/mig/migctl"
	"github.com/gpud/gpud/pkg/sharingctl"
	"github.com/gpud/gpud/pkg/simnode"
	"github.com/gpud/gpud/pkg/simnode/simapi"
	"github.com/gpud/gpud/pkg/telemetry"
	"github.com/gpud/gpud/pkg/timeslice"
)

// The device plugin reads the store and the sharing runtime as they are.
var (
	_ deviceplugin.Source        = (*discovery.Store)(nil)
	_ deviceplugin.SharingSource = (*timeslice.Runtime)(nil)
)

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
	node, err := resolveNodeName(cfg.nvml, sim)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	src, err := newNodeSources(cfg, lib, node, log)
	if err != nil {
		return err
	}
	defer src.Close(log)
	tasks, err := wireAgent(cfg, args, lib, sim, src, log)
	if err != nil {
		return err
	}
	log.Info("agent starting", "version", version, "node", node, "simulated", sim != nil)
	// All tasks start together; the first error stops the agent.
	if err := taskgroup.Run(ctx, tasks); err != nil {
		log.Error("agent stopped", "err", err)
		return err
	}
	log.Info("agent stopped")
	return nil
}

// newNodeSources opens the node's sources on the agent's flags.
func newNodeSources(cfg *agentConfig, lib nvml.Interface, node string, log *slog.Logger) (*agentsrc.Sources, error) {
	sharing := func(inv gpu.Inventory) (timeslice.Config, error) { return loadSharing(&cfg.sharing, inv) }
	return agentsrc.Open(agentsrc.Config{Node: node, PodResourcesSocket: cfg.podResourcesSocket, ProcRoot: cfg.procRoot,
		PodLogsRoot: cfg.podLogsRoot, Health: healthConfig(&cfg.health), Sharing: sharing}, lib, log)
}

// wireAgent builds every component on the sources it needs and returns
// them as tasks.
func wireAgent(cfg *agentConfig, args []string, lib nvml.Interface, sim *simnode.Node, src *agentsrc.Sources, log *slog.Logger) ([]taskgroup.Task, error) {
	metrics := prometheus.NewRegistry()
	sampler, err := telemetry.NewSampler(lib, src.Store.Inventory, telemetry.Attribution{Pods: src.Pods, Procs: src.Containers, Names: src.PodNames},
		telemetry.Config{Interval: sweepInterval(&cfg.telemetry), Hostname: src.Node}, log.With("component", "telemetry"))
	if err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	compat, _ := telemetry.ParseCompat(cfg.telemetry.compat) // validated
	if err := metrics.Register(telemetry.NewCollector(sampler, compat, version)); err != nil {
		return nil, fmt.Errorf("telemetry: register metrics: %w", err)
	}
	src.Health.OnXid(sampler.RecordXid)
	events, eventTasks, err := newEventRecorder(&cfg.events, cfg, src.Node, metrics, log.With("component", "kube-events"))
	if err != nil {
		return nil, err
	}
	src.Events = events
	src.Health.OnHealth(events.GPUHealth)

	migLog := log.With("component", "mig")
	migSvc, err := migcli.NewService(lib, sim, cfg.mig.journal, cfg.mig.resetGPUs, src.Pods,
		func(res mig.Result) {
			rediscoverAfterMIG(src.Store, migLog)
			migctl.ReportChanges(res, events.MIGLayoutChanged)
		}, migLog)
	if err != nil {
		return nil, err
	}
	var reload func() (migctl.Layout, error)
	if cfg.configPath != "" {
		reload = agentReloader(args)
	}
	migState := &migctl.ConfigState{}
	migMetrics, err := migctl.NewMetrics(metrics)
	if err != nil {
		return nil, err
	}
	migC, err := migctl.New(migctl.Config{Service: migSvc, Layout: cfg.mig.layout, Force: cfg.mig.force, ConfigPath: cfg.configPath,
		Reload: reload, State: migState.Set, Metrics: migMetrics, Log: migLog})
	if err != nil {
		return nil, err
	}
	sharingC, err := sharingctl.New(sharingControllerConfig(&cfg.sharing, src.Sharing, src.Store.Current, metrics, log.With("component", "sharing"),
		memwatch.WatchdogConfig{Processes: src.Procs, Containers: src.Containers, Pods: src.PodNames, Assignments: src.Pods,
			OnViolation: events.WatchdogOverLimit, OnKill: events.WatchdogKilled}))
	if err != nil {
		return nil, err
	}
	tasks := []taskgroup.Task{
		{Name: "inventory", Run: func(ctx context.Context) error { return src.Store.Run(ctx, cfg.rediscover) }},
		{Name: "health", Run: src.Health.Run},
		{Name: "telemetry", Run: sampler.Run},
		{Name: "mig", Run: migC.Run},
		{Name: "sharing", Run: sharingC.Run},
	}
	tasks = append(tasks, eventTasks...)
	st, err := newStream(&cfg.telemetry.stream, streamDeps{node: src.Node, inventory: src.Store.Current, changed: src.Store.InventoryChanged,
		sharing: src.Sharing, snapshot: sampler.Snapshot, metrics: metrics, log: log.With("component", "stream")})
	if err != nil {
		return nil, err
	}
	if st != nil {
		src.Health.OnXid(st.OnXid)
		tasks = append(tasks, taskgroup.Task{Name: "stream", Run: st.Run})
	}
	var limitModes map[string]string // set while enforcement is built, before the DRA driver runs
	enforceTasks, enforceStatus, err := newEnforceTasks(cfg, src, lib, metrics, src.Store.Current,
		func(m map[string]string) { limitModes = m }, log.With("component", "enforce"))
	if err != nil {
		return nil, err
	}
	tasks = append(tasks, enforceTasks...)
	mpsA, err := newMPSAgent(&cfg.mps, sim != nil, lib, src.Sharing, src.Store, log.With("component", "mps"))
	if err != nil {
		return nil, err
	}
	if mpsA.Root() != "" {
		tasks = append(tasks, taskgroup.Task{Name: "mps", Run: mpsA.Run})
	}
	enforceStatus = mpsA.WithStatus(enforceStatus)
	var httpSrv *agenthttp.Server // its ready checks are added below, before it runs
	if cfg.http.addr != "" {
		srv := &agenthttp.Server{Addr: cfg.http.addr, Inventory: src.Store.Inventory, Metrics: metrics, Enforcement: enforceStatus, Log: log.With("component", "http")}
		tasks = append(tasks, taskgroup.Task{Name: "http", Run: srv.Run})
		httpSrv = srv
	}
	if cfg.admin.socket != "" {
		mux := http.NewServeMux()
		migctl.API{Service: migSvc, Metrics: migMetrics}.Routes(mux)
		sharingctl.API{Runtime: src.Sharing}.Routes(mux)
		if sim != nil {
			simapi.API{Node: sim, Log: log.With("component", "sim"), ProcRoot: cfg.procRoot}.Routes(mux)
		}
		srv := &adminapi.Server{Path: cfg.admin.socket, Handler: mux, Log: log.With("component", "admin")}
		tasks = append(tasks, taskgroup.Task{Name: "admin", Run: srv.Run})
	}
	labelTasks, err := newNodeLabelTasks(&cfg.labels, cfg, src, migState, log.With("component", "node-labels"))
	if err != nil {
		return nil, err
	}
	tasks = append(tasks, labelTasks...)
	taintTasks, err := newNodeTaintTasks(&cfg.nodeTaint, cfg, src, metrics, log.With("component", "node-taint"))
	if err != nil {
		return nil, err
	}
	tasks = append(tasks, taintTasks...)
	files, err := deviceFiles(cfg.nvml, sim, src.Store.Current())
	if err != nil {
		return nil, err
	}
	var driverEdits cdispec.ContainerEdits
	if draEnabled(&cfg.dra) || (cfg.dp.pluginDir != "" && cfg.dp.cdiDir != "") {
		driverEdits = newDriverEdits(cfg.driver, lib, sim, cfg.mps.driverRoot, log.With("component", "driver-files"))
	}
	if draEnabled(&cfg.dra) {
		drv, err := newDRADriver(&cfg.dra, draDeps{node: src.Node, inventory: src.Store, migState: migSvc.State, sim: sim, sharing: src.Sharing,
			slices: mig.NewSlices(migSvc), cdiDir: cfg.dp.cdiDir, mpsRoot: mpsA.Root(), files: files, driverEdits: driverEdits, log: log.With("component", "dra"),
			memoryLimitModes: func() map[string]string { return limitModes }})
		if err != nil {
			return nil, err
		}
		mpsA.ShareFractions(preparedFractions(drv.Preparer()))
		if httpSrv != nil {
			// A DRA agent whose slices are not in the API server offers
			// nothing to pods: not ready, and /readyz says why.
			httpSrv.Ready = append(httpSrv.Ready, drv.Published)
		}
		return append(tasks, taskgroup.Task{Name: "dra", Run: drv.Run}), nil
	}
	dp, err := newDevicePlugin(&cfg.dp, struct {
		*discovery.Store
		*timeslice.Runtime
	}{src.Store, src.Sharing}, mpsA.Root(), files, driverEdits, log.With("component", "deviceplugin"))
	if err != nil {
		return nil, err
	}
	if dp != nil {
		tasks = append(tasks, taskgroup.Task{Name: "deviceplugin", Run: dp.Run})
	}
	return tasks, nil
}

// agentReloader rereads the agent config with the one loader, so a reload
// follows the rule of the start: flags on the command line win, every key
// and value is checked, errors name file and line. It returns the MIG
// controller's part, the one that applies changes at run time.
func agentReloader(args []string) func() (migctl.Layout, error) {
	return func() (migctl.Layout, error) {
		c, err := loadAgentConfig(args, io.Discard)
		if err != nil {
			return migctl.Layout{}, err
		}
		return c.mig.layout, nil
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
		return nil, flagErr("log-level", "%s: want debug, info, warn or error", printable.Quote(level))
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch strings.ToLower(format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, flagErr("log-format", "%s: want text or json", printable.Quote(format))
}
