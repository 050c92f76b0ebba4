package enforce

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpud/gpud/pkg/dra"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/memlimit"
	"github.com/gpud/gpud/pkg/timeslice"
)

// MemoryLimits sets and clears a container's driver-enforced GPU memory
// limits; cgroup is the container's path in the cgroup2 hierarchy
// (*memlimit.Manager: it sets limits only on the GPUs whose mode is
// memlimit.ModeDriver and returns those).
type MemoryLimits interface {
	Set(cgroup string, fractions []memlimit.Fraction) ([]string, error)
	Clear(cgroup string, uuids []string) error
}

var _ MemoryLimits = (*memlimit.Manager)(nil)

// LimitEvents is told what happened to a container's memory limits, for
// Kubernetes Events (*agentevents.Recorder): each GPU's limits when set,
// and a failure once until a retry succeeds. podUID may be empty when
// unknown.
type LimitEvents interface {
	MemoryLimitSet(namespace, pod, podUID, container, gpuUUID string, softBytes, hardBytes uint64)
	MemoryLimitFailed(namespace, pod, podUID, container string, gpus []string, err error)
	// MemoryBorrowerEvicted: the container, above its soft limit on the
	// GPU, lost memory to the driver's eviction under pressure.
	MemoryBorrowerEvicted(namespace, pod, podUID, container, gpuUUID string, softBytes, beforeBytes, afterBytes uint64)
}

// limitsOwner is the container whose limits applyLimits sets.
type limitsOwner struct {
	namespace, pod, podUID, container string
}

func (o limitsOwner) String() string { return o.namespace + "/" + o.pod + "/" + o.container }

// Metrics are the enforcer's metrics on the agent's registry. A nil
// *Metrics records nothing.
type Metrics struct {
	sets      *prometheus.CounterVec
	unlimited prometheus.Gauge
	limits    *prometheus.GaugeVec
	evictions prometheus.Counter
}

// NewMetrics registers gpud_memory_limit_sets_total,
// gpud_memory_limit_unset_containers, gpud_container_memory_limit_bytes
// and gpud_memory_borrower_evictions_total on reg. Both results start at 0, so the first failure is an increase
// that alerts can see.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		sets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpud_memory_limit_sets_total",
			Help: "Containers' GPU memory limits set through the driver (result success), and containers whose limits the driver or the agent refused (result failure, counted once until a retry succeeds).",
		}, []string{"result"}),
		unlimited: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gpud_memory_limit_unset_containers",
			Help: "Containers holding GPU fractions whose memory limits could not be set: they run without the driver's limit (MPS limits and the watchdog still apply) while the agent retries every poll.",
		}),
		limits: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpud_container_memory_limit_bytes",
			Help: "A container's driver-enforced GPU memory limit on one GPU, in bytes: kind soft is guaranteed (the fraction's request), kind hard is where allocations fail (as asked; the driver caps the sum at the GPU's memory). Present while the limit is set.",
		}, []string{"namespace", "pod", "container", "UUID", "kind"}),
		evictions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpud_memory_borrower_evictions_total",
			Help: "Containers above their soft GPU memory limit (borrowing past their request) seen to lose that memory while their GPU was under memory pressure: the driver evicts borrowers first. Seen by polling the driver's per-cgroup use, so a borrower evicted and restarted within one poll is not counted.",
		}),
	}
	for _, r := range []string{"success", "failure"} {
		m.sets.WithLabelValues(r)
	}
	for _, c := range []prometheus.Collector{m.sets, m.unlimited, m.limits, m.evictions} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("enforce: register metrics: %w", err)
		}
	}
	return m, nil
}

func (m *Metrics) observeSet(ok bool) {
	if m == nil {
		return
	}
	r := "success"
	if !ok {
		r = "failure"
	}
	m.sets.WithLabelValues(r).Inc()
}

func (m *Metrics) observeEviction() {
	if m != nil {
		m.evictions.Inc()
	}
}

// setLimit records a container's limits on one GPU.
func (m *Metrics) setLimit(o limitsOwner, uuid string, soft, hard uint64) {
	if m == nil {
		return
	}
	m.limits.WithLabelValues(o.namespace, o.pod, o.container, uuid, "soft").Set(float64(soft))
	m.limits.WithLabelValues(o.namespace, o.pod, o.container, uuid, "hard").Set(float64(hard))
}

// dropLimits forgets a container's limits on uuids.
func (m *Metrics) dropLimits(o limitsOwner, uuids []string) {
	if m == nil {
		return
	}
	for _, uuid := range uuids {
		for _, kind := range []string{"soft", "hard"} {
			m.limits.DeleteLabelValues(o.namespace, o.pod, o.container, uuid, kind)
		}
	}
}

func (m *Metrics) setUnlimited(n int64) {
	if m != nil {
		m.unlimited.Set(float64(n))
	}
}

// fractions are a container's shares of whole GPUs' memory, for
// [MemoryLimits]: its device plugin replicas whose share has memory (the
// sharing config's, [Config.Sharing]), and its DRA devices of driver
// gpu.gpud.io that are fractions (the claim's memory capacity, from the
// driver's checkpoint through [DRA].Prepared). The request is the soft
// limit; the hard limit is the share's memoryLimitMiB or the claim's
// opaque memoryLimit, the request when they have none (no borrowing). The
// GPUs come from the same device IDs and device names the device filter
// uses. The error is why a share of a DRA device could not be looked up.
func (e *Enforcer) fractions(inv gpu.Inventory, s snapshot, ns, pod, ctr string) ([]memlimit.Fraction, error) {
	var out []memlimit.Fraction
	if e.cfg.Sharing != nil {
		sharing := e.cfg.Sharing()
		for _, id := range deviceIDs(s.assignments, ns, pod, ctr) {
			uuid, n, ok := timeslice.ParseReplicaID(id)
			g := wholeGPU(inv, uuid)
			if !ok || g == nil {
				continue
			}
			sh, shared := sharing.For(g.UUID, g.Index)
			if !shared {
				continue
			}
			share, err := sh.ShareOf(n, g.MemoryBytes>>20)
			if err != nil || share.MemoryMiB == 0 {
				continue // a replica beyond the config, or one that only time-slices
			}
			out = append(out, memlimit.Fraction{GPUUUID: g.UUID, RequestBytes: share.MemoryMiB << 20, LimitBytes: share.MemoryLimitMiB << 20})
		}
	}
	for _, c := range s.claims {
		if c.Driver != dra.DriverName || c.Namespace != ns || c.Pod != pod || c.Container != ctr {
			continue
		}
		uuid, ok := draDeviceUUID(inv, c.Device)
		if !ok || wholeGPU(inv, uuid) == nil {
			continue
		}
		if c.ShareID != "" && s.fractionsErr != nil {
			return nil, s.fractionsErr
		}
		if f, ok := s.fractions[claimDevice{c.ClaimNamespace, c.ClaimName, c.Device, c.ShareID}]; ok {
			out = append(out, memlimit.Fraction{GPUUUID: uuid, RequestBytes: f.MemoryBytes, LimitBytes: f.LimitBytes})
		}
	}
	return out, nil
}

// claimDevice names one prepared device of one claim: a share of a GPU
// is told apart by its share ID.
type claimDevice struct {
	namespace, claim, device, shareID string
}

// preparedFractions indexes the prepared claims' fractions by claim and
// device.
func preparedFractions(claims []ClaimRef) map[claimDevice]ClaimFraction {
	out := map[claimDevice]ClaimFraction{}
	for _, c := range claims {
		for _, f := range c.Fractions {
			out[claimDevice{c.Namespace, c.Name, f.Device, f.ShareID}] = f
		}
	}
	return out
}

// wholeGPU is the inventory's GPU with this UUID; nil for a MIG device or
// an unknown UUID.
func wholeGPU(inv gpu.Inventory, uuid string) *gpu.GPU {
	for i := range inv.GPUs {
		if inv.GPUs[i].UUID == uuid {
			return &inv.GPUs[i]
		}
	}
	return nil
}

// fractionsKey identifies a container's fractions, to set limits only when
// they change.
func fractionsKey(fs []memlimit.Fraction) string {
	parts := make([]string, len(fs))
	for i, f := range fs {
		parts[i] = f.GPUUUID + "=" + strconv.FormatUint(f.RequestBytes, 10) + "/" + strconv.FormatUint(f.LimitBytes, 10)
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// applyLimits sets the container's GPU memory limits from its fractions
// when they changed since the last Set, or when the last Set failed, and
// clears the GPUs it no longer has a fraction of. A failure is logged
// once per container and counted, the container is left running (see
// [Enforcer.ContainerStarting] for why) and the next poll retries.
// fracErr is why the fractions could not be read (the DRA checkpoint);
// it counts as a failure. Called with e.mu held.
func (e *Enforcer) applyLimits(rel string, who limitsOwner, t *tracked, fs []memlimit.Fraction, fracErr error) {
	name := who.String()
	key := fractionsKey(fs)
	if fracErr == nil && key == t.limitsKey && !t.limitsFailed {
		return
	}
	if fracErr == nil && len(fs) == 0 && len(t.limits) == 0 {
		t.limitsKey = key
		e.setLimitsFailed(t, false)
		return
	}
	var set []string
	err := fracErr
	if err == nil {
		if _, statErr := os.Stat(filepath.Join(e.cfg.Unified, rel)); e.cfg.Unified == "" || statErr != nil {
			err = fmt.Errorf("enforce: no cgroup2 directory for the container under %q", e.cfg.Unified)
		} else {
			set, err = e.cfg.MemoryLimits.Set(rel, fs)
		}
	}
	if err != nil {
		if !t.limitsFailed {
			e.cfg.Metrics.observeSet(false)
			e.log.Warn("gpu memory limits not set, container runs without the driver's limit, retrying every interval",
				"cgroup", rel, "container", name, "fractions", key, "err", err)
			if e.cfg.Events != nil {
				e.cfg.Events.MemoryLimitFailed(who.namespace, who.pod, who.podUID, who.container, fractionGPUs(fs), err)
			}
		}
		e.setLimitsFailed(t, true)
		return
	}
	if stale := without(t.limits, set); len(stale) > 0 {
		if err := e.cfg.MemoryLimits.Clear(rel, stale); err != nil {
			e.log.Warn("gpu memory limits not cleared", "cgroup", rel, "container", name, "gpus", strings.Join(stale, ","), "err", err)
		}
		e.cfg.Metrics.dropLimits(t.owner, stale)
	}
	for _, uuid := range set {
		soft, hard := limitsOn(fs, uuid)
		e.cfg.Metrics.setLimit(who, uuid, soft, hard)
	}
	if len(set) > 0 {
		e.cfg.Metrics.observeSet(true)
		e.log.Info("gpu memory limits set", "cgroup", rel, "container", name, "gpus", strings.Join(set, ","), "fractions", key)
		if e.cfg.Events != nil {
			for _, uuid := range set {
				soft, hard := limitsOn(fs, uuid)
				e.cfg.Events.MemoryLimitSet(who.namespace, who.pod, who.podUID, who.container, uuid, soft, hard)
			}
		}
	}
	t.limits, t.limitsKey, t.owner = set, key, who
	e.setLimitsFailed(t, false)
}

// limitsOn sums the fractions of one GPU, as [memlimit.Manager.Set] does
// (a hard limit of 0 is the request); the driver caps the hard sum at the
// GPU's memory.
func limitsOn(fs []memlimit.Fraction, uuid string) (soft, hard uint64) {
	for _, f := range fs {
		if f.GPUUUID == uuid {
			soft += f.RequestBytes
			hard += max(f.LimitBytes, f.RequestBytes)
		}
	}
	return soft, hard
}

// fractionGPUs lists the GPUs of fs, sorted, once each.
func fractionGPUs(fs []memlimit.Fraction) []string {
	var out []string
	for _, f := range fs {
		if !slices.Contains(out, f.GPUUUID) {
			out = append(out, f.GPUUUID)
		}
	}
	slices.Sort(out)
	return out
}

// clearLimits removes the container's limits (its cgroup went or the
// runtime removed it). Called with e.mu held.
func (e *Enforcer) clearLimits(rel string, t *tracked) {
	e.setLimitsFailed(t, false)
	if len(t.limits) == 0 || e.cfg.MemoryLimits == nil {
		return
	}
	e.cfg.Metrics.dropLimits(t.owner, t.limits)
	if err := e.cfg.MemoryLimits.Clear(rel, t.limits); err != nil {
		e.log.Warn("gpu memory limits not cleared", "cgroup", rel, "gpus", strings.Join(t.limits, ","), "err", err)
	} else {
		e.log.Debug("gpu memory limits cleared", "cgroup", rel, "gpus", strings.Join(t.limits, ","))
	}
	t.limits, t.limitsKey = nil, ""
}

// setLimitsFailed records whether the container's limits are missing
// after a failure, for Status and the gauge.
func (e *Enforcer) setLimitsFailed(t *tracked, failed bool) {
	if t.limitsFailed == failed {
		return
	}
	t.limitsFailed = failed
	d := int64(-1)
	if failed {
		d = 1
	}
	e.cfg.Metrics.setUnlimited(e.unlimited.Add(d))
}

// limitsNote is the memory limit part of Status.
func (e *Enforcer) limitsNote() string {
	if n := e.unlimited.Load(); n > 0 {
		return fmt.Sprintf("; gpu memory limits not set on %d container(s), retrying (see the log)", n)
	}
	return ""
}

// without is a minus b.
func without(a, b []string) []string {
	var out []string
	for _, s := range a {
		if !slices.Contains(b, s) {
			out = append(out, s)
		}
	}
	return out
}
