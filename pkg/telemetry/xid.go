package telemetry

import (
	"context"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// xidWaitMs is how long one EventSet.Wait blocks before ctx is checked.
const xidWaitMs = 500

// watchXids records Xid events until ctx ends: the last Xid per GPU
// (DCGM_FI_DEV_XID_ERRORS) and a count per Xid code. GPUs are registered
// as they appear in the device list; a GPU that cannot register (lost, or
// no event support) is retried at the next loop.
func (s *Sampler) watchXids(ctx context.Context) {
	set, ret := s.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		s.log.Warn("xid events unavailable", "err", ret)
		return
	}
	defer set.Free()
	for ctx.Err() == nil {
		s.registerXids(set)
		e, ret := set.Wait(xidWaitMs)
		if ret != nvml.SUCCESS || e.EventType&nvml.EventTypeXidCriticalError == 0 || e.Device == nil {
			continue
		}
		uuid, ret := e.Device.GetUUID()
		if ret != nvml.SUCCESS {
			continue
		}
		s.mu.Lock()
		s.lastXid[uuid] = e.EventData
		s.xids[xidKey{uuid, e.EventData}]++
		s.mu.Unlock()
		s.log.Info("xid event", "gpu_uuid", uuid, "xid", e.EventData)
	}
}

// registerXids registers the GPUs not registered yet on set.
func (s *Sampler) registerXids(set nvml.EventSet) {
	s.mu.Lock()
	type reg struct {
		uuid string
		h    nvml.Device
	}
	var todo []reg
	for _, d := range s.devs {
		if !d.snap.MIG && d.handle != nil && !s.xidRegged[d.snap.UUID] {
			todo = append(todo, reg{d.snap.UUID, d.handle})
		}
	}
	s.mu.Unlock()
	for _, r := range todo {
		if ret := r.h.RegisterEvents(nvml.EventTypeXidCriticalError, set); ret != nvml.SUCCESS {
			continue
		}
		s.mu.Lock()
		s.xidRegged[r.uuid] = true
		s.mu.Unlock()
	}
}
