package agentevents

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/memwatch"
)

// Event reasons, as `kubectl get events --field-selector reason=...`
// finds them.
const (
	ReasonGPUUnhealthy             = "GPUUnhealthy"
	ReasonGPULost                  = "GPULost"
	ReasonGPUHealthy               = "GPUHealthy"
	ReasonGPUMemoryOverLimit       = "GPUMemoryOverLimit"
	ReasonGPUMemoryLimitKilled     = "GPUMemoryLimitKilled"
	ReasonGPUMemoryLimitSet        = "GPUMemoryLimitSet"
	ReasonGPUMemoryLimitFailed     = "GPUMemoryLimitFailed"
	ReasonGPUMemoryBorrowerEvicted = "GPUMemoryBorrowerEvicted"
	ReasonMIGLayoutChanged         = "MIGLayoutChanged"
	ReasonNodeTainted              = "GPUNodeTainted"
	ReasonNodeTaintRemoved         = "GPUNodeTaintRemoved"
	ReasonNodeTaintedNoExecute     = "GPUNodeTaintedNoExecute"
)

// GPUHealth records a GPU's or MIG device's health change on the Node: a
// Warning when it turns Unhealthy or Lost (the note names the device and
// the reason, the Xid for one), a Normal event when it is Healthy again.
// It is a discovery.SetHealthFunc, for HealthMonitor.OnHealth.
func (r *Recorder) GPUHealth(uuid string, h gpu.Health, reason string) {
	if r == nil {
		return
	}
	ref := r.nodeRef(uuid)
	switch h {
	case gpu.Healthy:
		r.emit(ref, corev1.EventTypeNormal, ReasonGPUHealthy, "MarkHealthy",
			fmt.Sprintf("GPU %s is healthy again: it had no error for the recovery period and answers NVML; it is offered to pods again", uuid))
	case gpu.Lost:
		r.emit(ref, corev1.EventTypeWarning, ReasonGPULost, "MarkLost",
			fmt.Sprintf("GPU %s is lost (%s): it is withdrawn from pods and does not come back without a reset or reboot", uuid, reason))
	default:
		r.emit(ref, corev1.EventTypeWarning, ReasonGPUUnhealthy, "MarkUnhealthy",
			fmt.Sprintf("GPU %s is unhealthy (%s): it is withdrawn from new pods until it has no error for the recovery period", uuid, reason))
	}
}

// WatchdogOverLimit records that a pod uses more memory on a shared GPU
// than its shares allow, as the memory watchdog found it, once per
// episode; the note says what the watchdog's mode does about it. A pod
// the watchdog could not name is recorded on the Node, with its UID. It
// is a memwatch.WatchdogConfig.OnViolation.
func (r *Recorder) WatchdogOverLimit(v memwatch.Violation, mode memwatch.Enforce) {
	if r == nil {
		return
	}
	then := "reported only (--enforce-memory=report)"
	if mode == memwatch.EnforceKill {
		then = "its processes are killed, largest first, until it fits (--enforce-memory=kill)"
	}
	note := fmt.Sprintf("uses %d MiB of GPU %s, over its share's limit of %d MiB (pids %s): %s",
		v.UsedBytes>>20, v.DeviceUUID, v.LimitBytes>>20, joinPIDs(v.PIDs), then)
	r.emit(r.podOrNode(v, &note), corev1.EventTypeWarning, ReasonGPUMemoryOverLimit, "CheckMemory", note)
}

// WatchdogKilled records that the memory watchdog killed one of a pod's
// processes (pid, using procBytes) for the pod's violation v. It is a
// memwatch.WatchdogConfig.OnKill.
func (r *Recorder) WatchdogKilled(v memwatch.Violation, pid uint32, procBytes uint64) {
	if r == nil {
		return
	}
	note := fmt.Sprintf("killed pid %d (%d MiB) on GPU %s: the pod used %d MiB there, over its share's limit of %d MiB",
		pid, procBytes>>20, v.DeviceUUID, v.UsedBytes>>20, v.LimitBytes>>20)
	r.emit(r.podOrNode(v, &note), corev1.EventTypeWarning, ReasonGPUMemoryLimitKilled, "Kill", note)
}

// MemoryLimitSet records a container's driver-enforced GPU memory limits
// on one GPU: soft is guaranteed, allocations past hard fail.
func (r *Recorder) MemoryLimitSet(namespace, pod, podUID, container, gpuUUID string, softBytes, hardBytes uint64) {
	if r == nil {
		return
	}
	r.emit(podRef(namespace, pod, podUID, container), corev1.EventTypeNormal, ReasonGPUMemoryLimitSet, "SetMemoryLimit",
		fmt.Sprintf("GPU memory limit on GPU %s set by the driver: %d MiB guaranteed (soft), allocations past %d MiB fail (hard)", gpuUUID, softBytes>>20, hardBytes>>20))
}

// MemoryLimitFailed records that a container's GPU memory limits could not
// be set on gpus: the container runs without the driver's limit (the MPS
// limit and the watchdog still hold) while the agent retries.
func (r *Recorder) MemoryLimitFailed(namespace, pod, podUID, container string, gpus []string, err error) {
	if r == nil {
		return
	}
	r.emit(podRef(namespace, pod, podUID, container), corev1.EventTypeWarning, ReasonGPUMemoryLimitFailed, "SetMemoryLimit",
		fmt.Sprintf("GPU memory limit on %s not set, the container runs without the driver's limit (MPS limits and the memory watchdog still apply) and the agent retries: %v",
			strings.Join(gpus, ","), err))
}

// MemoryBorrowerEvicted records that a container lost the GPU memory it
// borrowed above its soft limit while the GPU was under pressure: the
// driver evicts borrowers first (their processes are killed) to give
// others their guaranteed share. beforeBytes and afterBytes are what it
// held on the GPU at the agent's poll before and after.
func (r *Recorder) MemoryBorrowerEvicted(namespace, pod, podUID, container, gpuUUID string, softBytes, beforeBytes, afterBytes uint64) {
	if r == nil {
		return
	}
	r.emit(podRef(namespace, pod, podUID, container), corev1.EventTypeWarning, ReasonGPUMemoryBorrowerEvicted, "Evict",
		fmt.Sprintf("GPU memory borrowed above the guaranteed %d MiB on GPU %s was taken back under memory pressure: the container held %d MiB and now %d MiB; the driver evicts containers above their request first, so a pod that must not be evicted should request what it uses",
			softBytes>>20, gpuUUID, beforeBytes>>20, afterBytes>>20))
}

// MIGLayoutChanged records a GPU's new MIG layout on the Node; from and to
// describe the layouts (migctl.ReportChanges gives them).
func (r *Recorder) MIGLayoutChanged(gpuUUID, from, to string) {
	if r == nil {
		return
	}
	r.emit(r.nodeRef(gpuUUID), corev1.EventTypeNormal, ReasonMIGLayoutChanged, "ApplyMIGLayout",
		fmt.Sprintf("MIG layout of GPU %s changed from %s to %s", gpuUUID, from, to))
}

// NodeTaint records on the Node that the agent put taint key=value on it
// for reason, or removed it (value ""): the node's GPUs keep failing, or
// stayed healthy long enough.
func (r *Recorder) NodeTaint(key, value, reason string) {
	if r == nil {
		return
	}
	if value == "" {
		r.emit(r.nodeRef(""), corev1.EventTypeNormal, ReasonNodeTaintRemoved, "Untaint",
			fmt.Sprintf("taint %s removed: the node's GPUs stayed healthy", key))
		return
	}
	r.emit(r.nodeRef(""), corev1.EventTypeWarning, ReasonNodeTainted, "Taint",
		fmt.Sprintf("taint %s=%s:NoSchedule set: %s", key, value, reason))
}

// NodeTaintNoExecute records on the Node that the agent added the
// NoExecute step of taint key=value (beside its NoSchedule one): the
// node's GPUs still fail after the NoSchedule taint's grace period, and
// the pods that do not tolerate it are evicted.
func (r *Recorder) NodeTaintNoExecute(key, value, reason string) {
	if r == nil {
		return
	}
	r.emit(r.nodeRef(""), corev1.EventTypeWarning, ReasonNodeTaintedNoExecute, "Taint",
		fmt.Sprintf("taint %s=%s:NoExecute set (its GPUs still fail; pods without a toleration are evicted): %s", key, value, reason))
}

// podOrNode is the violation's pod, or the node when the pod is not
// known; then the note says whose UID it was.
func (r *Recorder) podOrNode(v memwatch.Violation, note *string) *corev1.ObjectReference {
	if v.Pod != "" {
		return podRef(v.Namespace, v.Pod, v.PodUID, "")
	}
	*note = "a pod (uid " + v.PodUID + ") " + *note
	return r.nodeRef(v.DeviceUUID)
}

func joinPIDs(pids []uint32) string {
	s := make([]string, len(pids))
	for i, p := range pids {
		s[i] = strconv.FormatUint(uint64(p), 10)
	}
	return strings.Join(s, ",")
}
