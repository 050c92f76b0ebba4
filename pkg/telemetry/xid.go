package telemetry

// RecordXid records one Xid event of a GPU: its last Xid
// (DCGM_FI_DEV_XID_ERRORS) and a count per Xid code. The node's one NVML
// event pump (discovery's health monitor) calls it for every Xid; the
// sampler opens no event set of its own. Safe for concurrent use.
func (s *Sampler) RecordXid(gpuUUID string, xid uint64) {
	s.mu.Lock()
	s.lastXid[gpuUUID] = xid
	s.xids[xidKey{gpuUUID, xid}]++
	s.mu.Unlock()
	s.log.Info("xid event", "gpu_uuid", gpuUUID, "xid", xid)
}
