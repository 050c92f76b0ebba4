package deviceplugin

import (
	"context"
	"os"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpud/gpud/pkg/mps"
	"github.com/gpud/gpud/pkg/timeslice"
)

// Environment variables Allocate sets: the visible devices, and the MPS
// limits whose names timeslice owns (see [timeslice.Share.MPSEnv]).
const (
	envVisibleDevices = "NVIDIA_VISIBLE_DEVICES"
	envMPSThreads     = timeslice.EnvMPSActiveThreadPercentage
	envMPSMemLimit    = timeslice.EnvMPSPinnedDeviceMemLimit
	envMPSPipeDir     = mps.EnvPipeDirectory
)

// Allocate answers each container with its devices' CDI names and/or
// NVIDIA_VISIBLE_DEVICES, and MPS limits for replicas; with
// [Config.MPSRoot] set, a replica's container also mounts its GPU's MPS
// pipe directory and points CUDA_MPS_PIPE_DIRECTORY at it. An unknown
// device fails the whole request with InvalidArgument, an unhealthy one
// with FailedPrecondition, each naming the device; nothing is allocated
// then.
func (p *plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	set, _ := p.snapshot()
	resp, err := allocate(set, p.cfg.DeviceListStrategy, p.cfg.MPSRoot, req)
	if err != nil {
		p.log.Warn("allocate refused", "err", err)
		return nil, err
	}
	for i, c := range req.ContainerRequests {
		r := resp.ContainerResponses[i]
		p.log.Info("allocated", "devices", strings.Join(c.DevicesIds, ","), "visible", r.Envs[envVisibleDevices], "mps_pipe", r.Envs[envMPSPipeDir])
		if n := sharedUnits(set, c.DevicesIds); n > 1 && p.cfg.MPSRoot != "" {
			p.log.Warn("container shares several GPUs, MPS reaches the first only", "devices", strings.Join(c.DevicesIds, ","), "shared_gpus", n)
		}
	}
	return resp, nil
}

// allocate is Allocate without the logging. mpsRoot is [Config.MPSRoot].
func allocate(set *deviceSet, strategy, mpsRoot string, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	for _, c := range req.ContainerRequests {
		if len(c.DevicesIds) == 0 {
			return nil, status.Errorf(codes.InvalidArgument, "%s: a container request names no device", set.resource)
		}
		for _, id := range c.DevicesIds {
			d, ok := set.byID[id]
			if !ok {
				return nil, status.Errorf(codes.InvalidArgument, "%s: unknown device %q (not advertised by this resource)", set.resource, id)
			}
			if !d.healthy() {
				return nil, status.Errorf(codes.FailedPrecondition, "%s: device %q is %s (%s)", set.resource, id, d.Health, d.Reason)
			}
		}
	}
	resp := &pluginapi.AllocateResponse{ContainerResponses: make([]*pluginapi.ContainerAllocateResponse, 0, len(req.ContainerRequests))}
	for _, c := range req.ContainerRequests {
		r := containerResponse(set, strategy, c.DevicesIds)
		if err := mpsMount(set, mpsRoot, c.DevicesIds, r); err != nil {
			return nil, err
		}
		resp.ContainerResponses = append(resp.ContainerResponses, r)
	}
	return resp, nil
}

// mpsMount mounts the pipe directory of the container's first shared unit
// at [mps.ContainerPipeDir] and points CUDA_MPS_PIPE_DIRECTORY there: a
// CUDA client talks to one daemon, and each GPU has its own. It also
// mounts the daemons' shared memory ([mps.ShmDir]) at /dev/shm. The
// directories are created if the daemon has not started yet, since a bind
// mount of a missing directory fails the container. The CDI spec carries
// the same edit for runtimes that apply it; CDI replaces a mount at the
// same path, so the two do not stack.
func mpsMount(set *deviceSet, mpsRoot string, ids []string, r *pluginapi.ContainerAllocateResponse) error {
	if mpsRoot == "" {
		return nil
	}
	for _, id := range ids {
		d := set.byID[id]
		if d.Replica < 0 {
			continue
		}
		dir, shm := mps.PipeDir(mpsRoot, d.Unit), mps.ShmDir(mpsRoot)
		for _, p := range []string{dir, shm} {
			if err := os.MkdirAll(p, 0o755); err != nil {
				return status.Errorf(codes.Internal, "%s: device %q: create MPS directory %s (check --mps-root): %v", set.resource, id, p, err)
			}
		}
		r.Mounts = append(r.Mounts, &pluginapi.Mount{ContainerPath: mps.ContainerPipeDir, HostPath: dir},
			&pluginapi.Mount{ContainerPath: mps.ContainerShmDir, HostPath: shm})
		r.Envs[envMPSPipeDir] = mps.ContainerPipeDir
		return nil
	}
	return nil
}

// sharedUnits counts the distinct shared units among ids.
func sharedUnits(set *deviceSet, ids []string) int {
	units := map[string]bool{}
	for _, id := range ids {
		if d, ok := set.byID[id]; ok && d.Replica >= 0 {
			units[d.Unit] = true
		}
	}
	return len(units)
}

// unitShare is what a container gets of one unit: the sum of its replicas.
type unitShare struct {
	unit     string
	replicas int
	share    timeslice.Share
}

func containerResponse(set *deviceSet, strategy string, ids []string) *pluginapi.ContainerAllocateResponse {
	var units []*unitShare
	byUnit := map[string]*unitShare{}
	for _, id := range ids {
		d := set.byID[id]
		u, ok := byUnit[d.Unit]
		if !ok {
			u = &unitShare{unit: d.Unit}
			byUnit[d.Unit] = u
			units = append(units, u)
		}
		if d.Replica >= 0 {
			u.replicas++
			u.share.ComputePercent = min(100, u.share.ComputePercent+d.Share.ComputePercent)
			u.share.MemoryMiB += d.Share.MemoryMiB
			u.share.MemoryLimitMiB += d.Share.LimitMiB() // MPS's pinned limit is the hard one
		}
	}
	r := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{}}
	visible := make([]string, len(units))
	for i, u := range units {
		visible[i] = u.unit
		if strategy != ListEnvvar {
			r.CdiDevices = append(r.CdiDevices, &pluginapi.CDIDevice{Name: cdiName(u.unit)})
		}
	}
	if strategy != ListCDI {
		r.Envs[envVisibleDevices] = strings.Join(visible, ",")
	}
	mpsEnv(units, r.Envs)
	return r
}

// mpsEnv sets the MPS limits of the shared units: the compute percentage is
// one value for the container (the smallest share), the memory limit is
// per device index.
func mpsEnv(units []*unitShare, env map[string]string) {
	threads := 0
	var limits []string
	for i, u := range units {
		if u.replicas == 0 {
			continue
		}
		e := u.share.MPSEnv(i)
		if v, ok := e[envMPSThreads]; ok {
			if n, err := strconv.Atoi(v); err == nil && (threads == 0 || n < threads) {
				threads = n
			}
		}
		if v, ok := e[envMPSMemLimit]; ok {
			limits = append(limits, v)
		}
	}
	if threads > 0 {
		env[envMPSThreads] = strconv.Itoa(threads)
	}
	if len(limits) > 0 {
		sort.Strings(limits)
		env[envMPSMemLimit] = strings.Join(limits, ",")
	}
}
