// Package decide is gpud scheduler's policy: it turns a [plan.Snapshot]
// into a [plan.Plan] (which pending pod goes to which node and devices,
// which waits and why, which running pods are preempted).
//
// The decider is [Gpud], built with [New]: the runtime calls
//
//	d := decide.New(decide.Config{RackLabel: flags.RackLabel})
//	p := d.Decide(snapshot)
//
// once per cycle. A cycle orders pending pods by priority, then by the
// weighted DRF share of their queue among its siblings (queues under their
// guarantee first), then by age; places lone pods and whole gangs
// (all-or-nothing, NVLink domain, then rack, then zone, unless the gang
// names a required or preferred level: plan.GangTopology) on the snapshot's
// view with the allocator policy; enforces queue limits per resource and per
// GPU model (pkg/allocator/jobs' queue tree); preempts the cheapest victim
// set (jobs' cost order: fewest victims, checkpointable first, least
// GPU-time lost since the last checkpoint, least run time; a gang goes
// whole, except that an elastic gang's members beyond its minMember go
// first, each alone, the gang keeping its minimum running;
// PodDisruptionBudgets honoured) only after a
// what-if shows the preemptor fits; and backfills behind the first blocked
// pod or gang as EASY does, trusting runtime estimates. Reservations keep
// their nodes for their queue.
//
// The operator's objectives ([Config.Objective], a queue's own weights)
// reweigh this: energy and cost choose GPU pods' nodes with
// pkg/allocator/jobs' placement score, wait orders a queue's pods
// shortest predicted runtime first, fair and wait weigh sibling queues;
// the default weights are the policy above exactly.
//
// With telemetry (Snapshot.Telemetry, streamed by the nodes' agents),
// devices an agent reports unhealthy take no new pod at once, before the
// ResourceSlice taint arrives, and fractions are packed against measured
// memory as well as requested memory ([Config.Overcommit]); nodes without
// a stream are judged by ResourceSlices and claims alone, and pending
// reasons say so when it matters.
//
// A decision is pure and deterministic: no I/O, the clock is
// Snapshot.Now, iteration never depends on map order, and every search is
// capped ([Config]). Decide leaves the snapshot's view as it found it.
package decide

import (
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpud/gpud/pkg/allocator/jobs"
	"github.com/gpud/gpud/pkg/scheduler/plan"
)

// DefaultRackLabel is the node label that names a node's rack:
// jobs.LabelRack, the label `gpud sim jobs` groups racks by, so a gang
// meets the same topology in the simulator and in the cluster.
const DefaultRackLabel = jobs.LabelRack

// Reason codes of a pending pod that the decider adds to jobs.Code* and
// plan.Code*.
const (
	// CodePreempting: victims are being evicted for the pod (NominatedNode
	// is set), or terminating pods still hold the room it will take.
	CodePreempting = "preempting"
	// CodeReserved: the only room is on nodes reserved for another queue.
	CodeReserved = "reserved"
	// CodePDB: only victims whose PodDisruptionBudget allows no disruption
	// would make room.
	CodePDB = "pdb"
)

// Config tunes [Gpud]. The zero value is the defaults.
type Config struct {
	// RackLabel is the node label naming a node's rack; "" is
	// DefaultRackLabel (topology.gpud.io/rack).
	RackLabel string
	// GangTopologyLabels are the node labels a gang may name as its
	// topology level by annotation (gpud scheduler --gang-topology-labels),
	// besides nvlink, node, rack (RackLabel) and zone; a label a
	// scheduling.k8s.io PodGroup's spec.schedulingConstraints names needs
	// no listing (Kubernetes' API lets it name any).
	GangTopologyLabels []string
	// MaxPodsPerCycle caps the retried pending pods (plan.Pod.Retry) one
	// cycle considers (the rest wait, in order, for the next cycle); new
	// pods are always considered. 0 is 1000.
	MaxPodsPerCycle int
	// MaxVictimCandidates caps the running pods (a gang counts once) one
	// preemption search considers, most preferred first; 0 is 64.
	MaxVictimCandidates int
	// MaxPreemptionsPerCycle caps preemption searches per cycle; 0 is 8.
	MaxPreemptionsPerCycle int
	// MaxFitTests caps the what-if placements of one preemption search;
	// 0 is 512.
	MaxFitTests int
	// MaxBackfillTests caps the what-ifs backfill runs in one cycle (pods
	// behind the blocked one without a short enough estimate wait once it
	// is spent); 0 is 64.
	MaxBackfillTests int
	// MaxGroupsPerLevel caps the topology domains a gang tries per level;
	// 0 is 64.
	MaxGroupsPerLevel int
	// TypicalRequests is how many of the oldest pending pods' requests form
	// the typical workload the allocator policy measures fragmentation
	// against; 0 is 256, negative none.
	TypicalRequests int
	// NewShareID draws share IDs of fractional allocations; nil is a
	// fresh UUID each (as kube-scheduler draws them).
	NewShareID func() types.UID
	// Overcommit (gpud scheduler --overcommit) lets a fraction take GPU
	// memory that the GPU's tenants requested but, as the node's agent
	// measures it, do not use: up to the measured free memory less
	// OvercommitMarginPercent of the GPU's memory. Off (the default), and
	// on nodes without telemetry, a fraction gets no more than the
	// requested free memory (nor, with telemetry, than the measured).
	Overcommit bool
	// OvercommitMarginPercent is the share of a GPU's memory overcommit
	// keeps free of the measured use; 0 is view.DefaultMarginPercent
	// (10%: the sample is up to one stream interval old and tenants' use
	// grows in bursts).
	OvercommitMarginPercent int
	// Objective (gpud scheduler --objectives) weighs the policy's terms
	// for the pods of queues without their own weights (a Queue object's
	// spec.objectives, or its nearest ancestor's): energy and cost choose
	// GPU pods' nodes with pkg/allocator/jobs' placement score, wait
	// orders a queue's pods shortest predicted runtime first, fair and
	// wait weigh sibling queues. Nil is today's policy, as are the
	// weights util=1,fair=1.
	Objective *jobs.Objective
	// Models are the GPU models' power and price for the objectives
	// (gpud scheduler --gpu-models), matched to a GPU's productName by
	// objective.Match; nil is objective.DefaultModels().
	Models map[string]jobs.ModelPower
}

func (c Config) withDefaults() Config {
	if c.RackLabel == "" {
		c.RackLabel = DefaultRackLabel
	}
	if c.MaxPodsPerCycle <= 0 {
		c.MaxPodsPerCycle = 1000
	}
	if c.MaxVictimCandidates <= 0 {
		c.MaxVictimCandidates = 64
	}
	if c.MaxPreemptionsPerCycle <= 0 {
		c.MaxPreemptionsPerCycle = 8
	}
	if c.MaxFitTests <= 0 {
		c.MaxFitTests = 512
	}
	if c.MaxBackfillTests <= 0 {
		c.MaxBackfillTests = 64
	}
	if c.TypicalRequests == 0 {
		c.TypicalRequests = 256
	}
	if c.MaxGroupsPerLevel <= 0 {
		c.MaxGroupsPerLevel = 64
	}
	return c
}

// Gpud is gpud's decider: priority, fair share, queue limits, gangs,
// preemption, backfill and reservations over the allocator's placements.
type Gpud struct {
	cfg Config
	// charges are the bound pods' queue charges kept across Decide calls.
	charges boundCharges
}

var _ plan.Decider = (*Gpud)(nil)

// New returns the gpud decider.
func New(cfg Config) *Gpud { return &Gpud{cfg: cfg.withDefaults()} }

// Decide implements plan.Decider. The snapshot's view is used for what-ifs
// and restored before Decide returns. Bound pods' objects and claims are
// taken as informers give them, replaced and never changed in place: what
// a bound pod counts against its queue is kept by object from one call to
// the next.
func (g *Gpud) Decide(s *plan.Snapshot) plan.Plan {
	c := newCycle(g.cfg, s, &g.charges)
	defer c.restore()
	c.run()
	if len(s.Queues) > 0 {
		c.out.QueueUsage = make(map[string]jobs.Resources, len(s.Queues))
		for _, q := range s.Queues {
			if c.fair.tree.Has(q.Name) {
				c.out.QueueUsage[q.Name] = c.fair.tree.Usage(q.Name)
			}
		}
	}
	return c.out
}

// unixSeconds is t in Unix seconds (reservations' clock).
func unixSeconds(t time.Time) int64 { return t.Unix() }
