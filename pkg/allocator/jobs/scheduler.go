package jobs

import (
	"fmt"
	"slices"

	"github.com/gpud/gpud/pkg/allocator"
)

// jobState is one submitted job.
type jobState struct {
	job     Job
	d       demand
	n       int
	queue   int
	seq     int
	running bool
	start   int64
	pods    []PodPlacement
	usage   Resources
	model   int    // model charged, -1 if none
	milli   int64  // per-model milli charged
	removed bool   // scratch: taken out during a preemption search
	why     string // scratch: why it may be preempted in the current search
	fits    bool   // fits on the empty cluster
	round   int    // Schedule call that last started it
	// savedPods keeps a preempted job's placement for undo.
	savedPods []PodPlacement
	never     Reason
	// attained is the GPU-milli-seconds of its runs before the current one
	// ([OrderLAS]).
	attained int64
}

func (j *jobState) estEnd(now int64) int64 {
	if j.job.EstimateSeconds <= 0 {
		return never
	}
	return max(now, j.start+j.job.EstimateSeconds)
}

// never is an unknown or unreachable time.
const never = int64(1) << 62

type reservation struct {
	r     Reservation
	queue int
	nodes []int
}

// Scheduler holds the cluster, queues and jobs and decides what runs.
type Scheduler struct {
	opts    Options
	c       *cluster
	empty   *cluster // never bound: decides "never fits"
	q       *queues
	jobs    map[string]*jobState
	pending []*jobState
	running []*jobState
	res     []reservation
	seq     int
	round   int    // Schedule calls so far
	blocked []bool // scratch mask of reserved nodes
}

// New builds a scheduler over nodes (their order is [PodPlacement.Node]),
// queues and reservations.
func New(nodes []allocator.Node, qs []Queue, rs []Reservation, opts Options) (*Scheduler, error) {
	c, err := newCluster(nodes)
	if err != nil {
		return nil, fmt.Errorf("jobs: cluster: %w", err)
	}
	empty, _ := newCluster(nodes)
	t, err := newQueues(qs, c)
	if err != nil {
		return nil, fmt.Errorf("jobs: queues: %w", err)
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if opts.Objective != nil {
		c.obj = newObjState(opts.Objective, c)
	}
	s := &Scheduler{opts: opts, c: c, empty: empty, q: t, jobs: map[string]*jobState{}}
	for _, r := range rs {
		qi, ok := t.byName[r.Queue]
		if !ok || r.End <= r.Start {
			return nil, fmt.Errorf("%w: reservation %q: queue %q or window [%d,%d)", ErrInvalid, r.Name, r.Queue, r.Start, r.End)
		}
		rv := reservation{r: r, queue: qi}
		for _, name := range r.Nodes {
			i, ok := c.byName[name]
			if !ok {
				return nil, fmt.Errorf("%w: reservation %q: node %q not in the cluster", ErrInvalid, r.Name, name)
			}
			rv.nodes = append(rv.nodes, i)
		}
		s.res = append(s.res, rv)
	}
	if len(s.res) > 0 {
		s.blocked = make([]bool, len(c.info))
	}
	return s, nil
}

// Capacity is the cluster's total of every resource (healthy GPUs only).
func (s *Scheduler) Capacity() Resources { return s.c.capacity }

// QueueUsage is what queue name's jobs (and its descendants') hold now.
func (s *Scheduler) QueueUsage(name string) Resources {
	if i, ok := s.q.byName[name]; ok {
		return s.q.list[i].usage
	}
	return Resources{}
}

// Submit adds a pending job. IDs must be unique and the queue a leaf.
func (s *Scheduler) Submit(j Job) error {
	if _, dup := s.jobs[j.ID]; dup || j.ID == "" {
		return fmt.Errorf("%w: submit %q: empty or duplicate id", ErrInvalid, j.ID)
	}
	qi, ok := s.q.byName[j.Queue]
	switch {
	case !ok:
		return fmt.Errorf("%w: submit %q: queue %q is not defined", ErrInvalid, j.ID, j.Queue)
	case len(s.q.list[qi].children) > 0:
		return fmt.Errorf("%w: submit %q: queue %q is a parent queue, not a leaf", ErrInvalid, j.ID, j.Queue)
	}
	d, err := s.c.demand(j.Pod)
	if err != nil {
		return fmt.Errorf("jobs: submit %q: %w", j.ID, err)
	}
	js := &jobState{job: j, d: d, n: max(j.Pods, 1), queue: qi, seq: s.seq, model: -1}
	s.seq++
	s.checkNever(js)
	s.jobs[j.ID] = js
	s.pending = append(s.pending, js)
	return nil
}

// Finish removes a running or pending job and frees what it holds.
func (s *Scheduler) Finish(id string) error {
	j, ok := s.jobs[id]
	if !ok {
		return fmt.Errorf("%w: finish %q", ErrUnknownJob, id)
	}
	if j.running {
		s.stop(j)
		s.running = slices.DeleteFunc(s.running, func(x *jobState) bool { return x == j })
	} else {
		s.pending = slices.DeleteFunc(s.pending, func(x *jobState) bool { return x == j })
	}
	delete(s.jobs, id)
	return nil
}

// SetGPUHealth marks GPU gpu (a device index) of node healthy or not: an
// unhealthy GPU takes no new pods and is left out of preemption searches; it
// keeps what runs on it, so the caller decides what happens to those jobs
// (they are returned, in start order) and finishes them when it does. The
// cluster's [Scheduler.Capacity], queue shares and the never-fits check stay
// those of [New] (a failure is taken to be transient), except that a GPU
// unhealthy at New and marked healthy here counts from then on.
func (s *Scheduler) SetGPUHealth(node string, gpu int, healthy bool) ([]string, error) {
	i, ok := s.c.byName[node]
	if !ok || gpu < 0 || gpu >= len(s.c.info[i].gpus) {
		return nil, fmt.Errorf("%w: GPU %d of node %q: no such GPU", ErrInvalid, gpu, node)
	}
	s.c.setHealth(i, gpu, healthy)
	if healthy && !s.empty.info[i].gpus[gpu].healthy {
		// Unhealthy since New: the empty cluster grows, and pending jobs
		// that never fitted may fit now.
		s.empty.setHealth(i, gpu, true)
		for _, j := range s.pending {
			if !j.fits {
				s.checkNever(j)
			}
		}
	}
	var on []string
	for _, j := range s.running {
		for _, p := range j.pods {
			if p.Node == i && slices.Contains(p.GPUs, gpu) {
				on = append(on, j.job.ID)
				break
			}
		}
	}
	return on, nil
}

// Running lists the running jobs' IDs in start order.
func (s *Scheduler) Running() []string {
	out := make([]string, len(s.running))
	for i, j := range s.running {
		out[i] = j.job.ID
	}
	return out
}

// Placement returns where a running job's pods are.
func (s *Scheduler) Placement(id string) ([]PodPlacement, bool) {
	j, ok := s.jobs[id]
	if !ok || !j.running {
		return nil, false
	}
	return slices.Clone(j.pods), true
}

// stop unbinds a running job and uncharges its queue; it stays in s.running.
func (s *Scheduler) stop(j *jobState) {
	s.c.unbindAll(j.pods, &j.d)
	s.q.charge(j.queue, j.usage, j.model, j.milli, -1)
	j.savedPods = j.pods
	j.running, j.pods = false, nil
}

// commit marks j running on pods (already bound) and charges its queue.
func (s *Scheduler) commit(j *jobState, pods []PodPlacement, now int64) {
	j.pods, j.running, j.start, j.round = pods, true, now, s.round
	j.usage, j.model = s.placementUsage(j, pods)
	j.milli = j.d.modelMilli() * int64(j.n)
	s.q.charge(j.queue, j.usage, j.model, j.milli, 1)
	s.running = append(s.running, j)
}

func (s *Scheduler) placementUsage(j *jobState, pods []PodPlacement) (Resources, int) {
	var total Resources
	model := -1
	for i := range pods {
		r, m := s.c.usage(&pods[i], &j.d)
		total = total.Add(r)
		if m >= 0 {
			model = m
		}
	}
	return total, model
}

// reservedMask marks the nodes j may not use at now, or returns nil; sig
// has bit k set when reservation k applies.
func (s *Scheduler) reservedMask(j *jobState, now int64) ([]bool, uint64) {
	if len(s.res) == 0 {
		return nil, 0
	}
	clear(s.blocked)
	var sig uint64
	for k, r := range s.res {
		if s.q.within(j.queue, r.queue) || j.job.Preemptible || now >= r.r.End {
			continue
		}
		if now < r.r.Start && j.job.EstimateSeconds > 0 && now+j.job.EstimateSeconds <= r.r.Start {
			continue
		}
		for _, i := range r.nodes {
			s.blocked[i] = true
		}
		sig |= 1 << (k % 64)
	}
	if sig == 0 {
		return nil, 0
	}
	return s.blocked, sig
}
