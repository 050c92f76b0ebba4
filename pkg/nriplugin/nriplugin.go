// Package nriplugin is gpud's NRI plugin (github.com/containerd/nri): the
// runtime tells the agent of each container as it is created and started,
// so the cpuset is set in the container's spec before its process exists
// (--cpu-affinity align) and the device filter is attached before the
// runtime starts it (--isolate-devices). The agent's cgroup poll
// (pkg/enforce) stays on as the fallback and keeps the filters current.
//
// It owns the NRI connection and nothing else: every decision is
// pkg/enforce's.
package nriplugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"

	"github.com/gpud/gpud/pkg/enforce"
)

// DefaultSocket is where containerd and CRI-O serve NRI.
const DefaultSocket = "/var/run/nri/nri.sock"

// Name and Index register the plugin with the runtime; the index orders
// plugins (lower runs first).
const (
	Name  = "gpud"
	Index = "50"
)

// Hooks is what the plugin asks of the enforcer (*enforce.Enforcer).
type Hooks interface {
	CPUSetAtCreate(ctx context.Context, c enforce.ContainerInfo) string
	ContainerStarting(ctx context.Context, c enforce.ContainerInfo)
	ContainerRemoved(c enforce.ContainerInfo)
}

var _ Hooks = (*enforce.Enforcer)(nil)

// Plugin connects to the runtime's NRI socket. Create one with [New].
type Plugin struct {
	socket string
	hooks  Hooks
	log    *slog.Logger
	// Retry is how long to wait before reconnecting; 0 means 5s.
	Retry time.Duration
}

// New returns a plugin for the NRI socket (empty: [DefaultSocket]).
func New(socket string, hooks Hooks, log *slog.Logger) *Plugin {
	if socket == "" {
		socket = DefaultSocket
	}
	return &Plugin{socket: socket, hooks: hooks, log: log}
}

// Run connects and serves until ctx ends, reconnecting when the runtime
// restarts or its socket appears. A node without NRI is not an error:
// the cgroup poll enforces alone, which Run says once.
func (p *Plugin) Run(ctx context.Context) error {
	retry := p.Retry
	if retry == 0 {
		retry = 5 * time.Second
	}
	absent, failing := false, false
	for {
		if _, err := os.Stat(p.socket); err != nil {
			if !absent {
				p.log.Info("nri not available, enforcing from the cgroup poll alone", "socket", p.socket, "err", err)
				absent = true
			}
		} else {
			absent = false
			registered, err := p.serve(ctx)
			if ctx.Err() != nil {
				return nil
			}
			// Said once per outage: a stale socket no runtime answers (left
			// by another runtime) must not warn every few seconds forever.
			switch {
			case registered:
				failing = false
				p.log.Warn("nri connection ended, reconnecting", "socket", p.socket, "err", err)
			case !failing:
				failing = true
				p.log.Warn("nri socket does not answer, enforcing from the cgroup poll alone and retrying quietly", "socket", p.socket, "err", err, "retry_every", retry)
			default:
				p.log.Debug("nri socket still does not answer", "socket", p.socket, "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(retry):
		}
	}
}

// serve registers with the runtime and serves until the connection ends;
// registered says whether it got that far.
func (p *Plugin) serve(ctx context.Context) (registered bool, err error) {
	closed := make(chan struct{})
	s, err := stub.New(handler{p}, stub.WithPluginName(Name), stub.WithPluginIdx(Index),
		stub.WithSocketPath(p.socket), stub.WithLogger(nriLog{p.log}), stub.WithOnClose(func() { close(closed) }))
	if err != nil {
		return false, fmt.Errorf("nriplugin: create stub on %s: %w", p.socket, err)
	}
	if err := s.Start(ctx); err != nil {
		return false, fmt.Errorf("nriplugin: register with the runtime on %s: %w", p.socket, err)
	}
	p.log.Info("nri plugin registered", "socket", p.socket, "runtime_nri", s.RuntimeNRIVersion())
	select {
	case <-ctx.Done():
		s.Stop()
		return true, nil
	case <-closed:
		s.Stop()
		return true, errors.New("nriplugin: the runtime closed the connection")
	}
}

// handler implements the NRI events gpud uses.
type handler struct{ p *Plugin }

// CreateContainer sets the cpuset in the container's spec.
func (h handler) CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	info := Info(pod, ctr)
	cpus := h.p.hooks.CPUSetAtCreate(ctx, info)
	if cpus == "" {
		return nil, nil, nil
	}
	adj := &api.ContainerAdjustment{}
	adj.SetLinuxCPUSetCPUs(cpus)
	h.p.log.Info("cpuset set at create", "container", info.String(), "cpus", cpus)
	return adj, nil, nil
}

// StartContainer attaches the device filter before the process runs.
func (h handler) StartContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	h.p.hooks.ContainerStarting(ctx, Info(pod, ctr))
	return nil
}

// RemoveContainer releases the container's filter.
func (h handler) RemoveContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	h.p.hooks.ContainerRemoved(Info(pod, ctr))
	return nil
}

// Info is what enforce needs of an NRI container.
func Info(pod *api.PodSandbox, ctr *api.Container) enforce.ContainerInfo {
	info := enforce.ContainerInfo{
		Namespace: pod.GetNamespace(), Pod: pod.GetName(), Container: ctr.GetName(), PodUID: pod.GetUid(),
		CgroupsPath: ctr.GetLinux().GetCgroupsPath(),
	}
	parent := strings.ToLower(pod.GetLinux().GetCgroupParent())
	info.Guaranteed = parent != "" && !strings.Contains(parent, "burstable") && !strings.Contains(parent, "besteffort")
	if cpu := ctr.GetLinux().GetResources().GetCpu(); cpu != nil {
		if s := cpu.GetShares().GetValue(); s > 2 {
			info.CPURequestMilli = int64(s) * 1000 / 1024
		}
		info.CPUQuota = cpu.GetQuota().GetValue()
		info.CPUPeriod = int64(cpu.GetPeriod().GetValue())
	}
	info.AllDevices = allowsEveryCharDevice(ctr.GetLinux().GetResources().GetDevices())
	return info
}

// allowsEveryCharDevice reports whether device cgroup rules, applied in
// order as runc applies them, end with every character device allowed:
// what a privileged container's spec says ("a *:* rwm").
func allowsEveryCharDevice(rules []*api.LinuxDeviceCgroup) bool {
	open := false
	for _, r := range rules {
		if r.GetMajor() != nil || r.GetMinor() != nil {
			continue
		}
		switch r.GetType() {
		case "", "a", "c":
			open = r.GetAllow()
		}
	}
	return open
}

// nriLog routes the NRI stub's printf logging into slog: detail at Debug,
// warnings and errors at Warn, each under one constant message.
type nriLog struct{ log *slog.Logger }

func (l nriLog) Debugf(_ context.Context, format string, args ...any) {
	l.log.Debug("nri stub", "detail", fmt.Sprintf(format, args...))
}

func (l nriLog) Infof(_ context.Context, format string, args ...any) {
	l.log.Debug("nri stub", "detail", fmt.Sprintf(format, args...))
}

func (l nriLog) Warnf(_ context.Context, format string, args ...any) {
	l.log.Warn("nri stub", "detail", fmt.Sprintf(format, args...))
}

func (l nriLog) Errorf(_ context.Context, format string, args ...any) {
	l.log.Warn("nri stub", "detail", fmt.Sprintf(format, args...))
}
