package telemetry

import (
	"errors"
	"io/fs"
	"slices"
	"strconv"
	"time"

	"github.com/gpud/gpud/pkg/procattr"
	"github.com/gpud/gpud/pkg/timeslice"
)

// holdersLocked maps device UUIDs (GPU or MIG) to the containers holding
// them, and counts the replica IDs assigned per device.
func (s *Sampler) holdersLocked() (map[string][]Holder, map[string]int) {
	if len(s.assigned) == 0 {
		return nil, nil
	}
	holders := map[string][]Holder{}
	replicas := map[string]int{}
	for _, a := range s.assigned {
		h := Holder{Namespace: a.Namespace, Pod: a.Pod, Container: a.Container}
		for _, id := range a.DeviceIDs {
			uuid, _, isReplica := timeslice.ParseReplicaID(id)
			if isReplica {
				replicas[uuid]++
			}
			if !slices.Contains(holders[uuid], h) {
				holders[uuid] = append(holders[uuid], h)
			}
		}
	}
	return holders, replicas
}

// attributeProcsLocked resolves the container of every process seen, keeps
// the answers for pids still running, and refreshes pod names when an
// unknown pod UID shows up.
func (s *Sampler) attributeProcsLocked() {
	if s.attr.Procs == nil {
		return
	}
	seen := map[uint32]pidEntry{}
	needNames := false
	for _, d := range s.devs {
		for _, p := range d.procs {
			e, ok := s.pids[p.PID]
			if !ok {
				c, err := s.attr.Procs.Lookup(p.PID)
				e = pidEntry{c: c, err: err}
				if err != nil && !errors.Is(err, procattr.ErrNotContainer) && !errors.Is(err, fs.ErrNotExist) {
					s.attrErrs["proc"]++
					s.log.Debug("process attribution failed", "pid", p.PID, "err", err)
				}
			}
			seen[p.PID] = e
			if e.err == nil && s.attr.Names != nil {
				if _, ok := s.podNames[e.c.PodUID]; !ok {
					needNames = true
				}
			}
		}
	}
	s.pids = seen
	if needNames {
		names, err := s.attr.Names.Pods()
		if err != nil {
			s.attrErrs["podlogs"]++
			s.log.Debug("pod names unavailable", "err", err)
		} else {
			s.podNames = names
		}
	}
}

// buildLocked copies the state into a new immutable snapshot.
func (s *Sampler) buildLocked(taken time.Time) *Snapshot {
	holders, replicas := s.holdersLocked()
	snap := &Snapshot{
		Taken:             taken,
		Sweeps:            s.sweeps,
		Devices:           make([]DeviceSnapshot, 0, len(s.devs)),
		PodResourcesUp:    s.podUp,
		AttributionErrors: make(map[string]uint64, len(s.attrErrs)),
	}
	for k, v := range s.attrErrs {
		snap.AttributionErrors[k] = v
	}
	for _, d := range s.devs {
		ds := d.snap
		ds.Holders = holders[ds.UUID]
		ds.Replicas = replicas[ds.UUID]
		if !ds.MIG {
			ds.LastXid = s.lastXid[ds.UUID]
		}
		ds.labelsFor(s.cfg.Hostname)
		snap.Devices = append(snap.Devices, ds)
	}
	for _, d := range s.devs {
		for _, p := range d.procs {
			ps := ProcessSnapshot{
				GPUIndex: d.snap.GPUIndex, GPUUUID: d.snap.UUID, DeviceUUID: p.DeviceUUID,
				GIID: -1, PID: p.PID, UsedBytes: p.UsedBytes, At: d.procsAt,
			}
			if m := s.byUUID[p.DeviceUUID]; m != nil && m.snap.MIG {
				ps.GIID = m.snap.GIID
			}
			if d.util.sm != nil {
				ps.SMUtil, ps.HasSMUtil = d.util.sm[p.PID], true
			}
			s.nameProcess(&ps, holders[ps.DeviceUUID])
			ps.prepare(s.cfg.Hostname)
			snap.Processes = append(snap.Processes, ps)
		}
	}
	for k, v := range s.errs {
		snap.Errors = append(snap.Errors, ErrorCount{UUID: k.uuid, Call: k.call, Reason: k.reason, Count: v})
	}
	slices.SortFunc(snap.Errors, func(a, b ErrorCount) int {
		if c := compareStr(a.UUID, b.UUID); c != 0 {
			return c
		}
		if c := compareStr(a.Call, b.Call); c != 0 {
			return c
		}
		return compareStr(a.Reason, b.Reason)
	})
	for k, v := range s.xids {
		snap.Xids = append(snap.Xids, XidCount{GPUUUID: k.uuid, Xid: k.xid, Count: v})
	}
	slices.SortFunc(snap.Xids, func(a, b XidCount) int {
		if c := compareStr(a.GPUUUID, b.GPUUUID); c != 0 {
			return c
		}
		return int(a.Xid) - int(b.Xid)
	})
	return snap
}

// nameProcess fills a process's pod and container: from its cgroup and the
// pod's name when both are known (so pods sharing one GPU are told apart),
// else from the device's only holder.
func (s *Sampler) nameProcess(ps *ProcessSnapshot, holders []Holder) {
	if e, ok := s.pids[ps.PID]; ok && e.err == nil {
		ps.PodUID, ps.ContainerID = e.c.PodUID, e.c.ContainerID
		if ref, ok := s.podNames[e.c.PodUID]; ok {
			ps.Namespace, ps.Pod = ref.Namespace, ref.Name
			var ctr string
			n := 0
			for _, h := range holders {
				if h.Namespace == ref.Namespace && h.Pod == ref.Name && h.Container != ctr {
					ctr = h.Container
					n++
				}
			}
			if n == 1 {
				ps.Container = ctr
			}
			return
		}
	}
	if len(holders) == 1 {
		ps.Namespace, ps.Pod, ps.Container = holders[0].Namespace, holders[0].Pod, holders[0].Container
	}
}

func compareStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// pidLabel formats a pid for the pid label.
func pidLabel(pid uint32) string { return strconv.FormatUint(uint64(pid), 10) }
