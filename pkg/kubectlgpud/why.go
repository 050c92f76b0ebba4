package kubectlgpud

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpud/gpud/pkg/scheduler/plan"
	"github.com/gpud/gpud/pkg/scheduler/view"
)

// maxEvents bounds the events [Why] reports, newest first.
const maxEvents = 10

// WhyInfo is why a pod runs where it does, or waits.
type WhyInfo struct {
	Pod       PodInfo `json:"pod"`
	Scheduler string  `json:"scheduler"`
	// Scheduled is the pod's PodScheduled condition, if any.
	Scheduled *Condition `json:"scheduled,omitempty"`
	// Events are the newest events about the pod, newest first.
	Events []EventInfo `json:"events,omitempty"`
	// Group is the pod's PodGroup (by label) and its members here.
	Group *GroupInfo `json:"group,omitempty"`
	// Queue is the pod's queue (by label) and its pods here.
	Queue *QueueUse `json:"queue,omitempty"`
	// Room says, per thing the pod wants, how much of it is free.
	Room []string `json:"room,omitempty"`
	// Fits says whether gpud's allocator would place the pod's devices
	// now, and where (devices only).
	Fits string `json:"fits,omitempty"`
	// Moves says which pods would have to move for whole GPUs to be free
	// on one node.
	Moves string   `json:"moves,omitempty"`
	Notes []string `json:"notes,omitempty"`
}

// Condition is a pod condition.
type Condition struct {
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// EventInfo is one event about the pod.
type EventInfo struct {
	Time    time.Time `json:"time"`
	Type    string    `json:"type"`
	Reason  string    `json:"reason"`
	From    string    `json:"from"`
	Count   int32     `json:"count,omitempty"`
	Message string    `json:"message"`
}

// GroupInfo is a gang's members among the pods read.
type GroupInfo struct {
	Name    string `json:"name"`
	Members int    `json:"members"`
	Bound   int    `json:"bound"`
}

// Why explains pod p from the snapshot: its PodScheduled condition, the
// newest events, its group and queue among the snapshot's pods, and for
// what it asks (gpud's claims, the device plugin's resources) how much is
// free: "needs 4 GPUs on one node; the most free on any node is 2
// (node-a)".
func Why(s *Snapshot, p *corev1.Pod, prefix string) WhyInfo {
	v := buildView(s)
	ix := newClaimIndex(s.Claims)
	classes := map[string]*resourceapi.DeviceClass{}
	for _, c := range s.Classes {
		classes[c.Name] = c
	}
	claims := ix.of(p)
	pi, _ := podInfo(v, p, claims, classes, prefix)
	w := WhyInfo{Pod: pi, Scheduler: p.Spec.SchedulerName, Notes: slices.Clone(s.Notes)}
	if w.Scheduler == "" {
		w.Scheduler = corev1.DefaultSchedulerName
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			w.Scheduled = &Condition{Status: string(c.Status), Reason: c.Reason, Message: c.Message}
		}
	}
	w.Events = events(s.Events)
	if g := p.Labels[plan.PodGroupLabel]; g != "" {
		w.Group = &GroupInfo{Name: g}
		for _, q := range s.Pods {
			if q.Namespace == p.Namespace && q.Labels[plan.PodGroupLabel] == g && !terminal(q) {
				w.Group.Members++
				if q.Spec.NodeName != "" {
					w.Group.Bound++
				}
			}
		}
	}
	if q := p.Labels[plan.QueueLabel]; q != "" {
		for _, qu := range Queues(s, prefix) {
			if qu.Name == q {
				w.Queue = &qu
			}
		}
	}
	if p.Spec.NodeName != "" || terminal(p) {
		return w
	}
	nodes := Nodes(s, prefix)
	u := newUsage(v, s.Claims)
	var pending []*resourceapi.ResourceClaim
	for _, c := range claims {
		if c.Status.Allocation == nil && usesGPUD(c, classes) {
			pending = append(pending, c)
		}
	}
	if len(pending) > 0 && len(s.Classes) > 0 {
		items, others, err := v.Demand(pending)
		switch {
		case err != nil:
			w.Room = append(w.Room, "gpud's scheduler cannot read the pod's claims: "+err.Error())
		default:
			held := holders(v, s.Claims)
			for _, it := range items {
				w.Room = append(w.Room, roomFor(v, u, nodes, it))
				if it.Kind == view.Whole && w.Moves == "" {
					w.Moves = movesFor(v, held, it.Count)
				}
			}
			for _, o := range others {
				w.Room = append(w.Room, fmt.Sprintf("claim %s is left to the structured allocator: %s", o.Claim.Name, o.Why))
			}
			if len(items) > 0 {
				if allocs, err := v.Place(items, view.Options{}); errors.Is(err, view.ErrNoFit) {
					w.Fits = "gpud's allocator finds no node with room for the pod's devices now"
				} else if err != nil {
					w.Fits = "gpud's allocator cannot place the pod's devices: " + err.Error()
				} else if len(allocs) > 0 {
					w.Fits = fmt.Sprintf("gpud's allocator would place the pod's devices on %s now (devices only: node affinity, taints, gang and queue are the scheduler's to check)", allocs[0].Node)
				}
			}
		}
	}
	if p.Status.ExtendedResourceClaimStatus == nil {
		requested := podRequestsByNode(s.Pods)
		for _, r := range pluginResources(p, prefix) {
			w.Room = append(w.Room, roomForResource(s.Nodes, requested, r))
		}
	}
	return w
}

// events are the newest events, newest first, at most maxEvents.
func events(in []*corev1.Event) []EventInfo {
	var out []EventInfo
	for _, e := range in {
		t := e.LastTimestamp.Time
		if !e.EventTime.IsZero() && e.EventTime.After(t) {
			t = e.EventTime.Time
		}
		if e.Series != nil && e.Series.LastObservedTime.After(t) {
			t = e.Series.LastObservedTime.Time
		}
		if t.IsZero() {
			t = e.FirstTimestamp.Time
		}
		from := cmp.Or(e.ReportingController, e.Source.Component)
		count := e.Count
		if e.Series != nil {
			count = e.Series.Count
		}
		out = append(out, EventInfo{Time: t.UTC(), Type: e.Type, Reason: e.Reason, From: from, Count: count, Message: e.Message})
	}
	slices.SortStableFunc(out, func(a, b EventInfo) int { return b.Time.Compare(a.Time) })
	if len(out) > maxEvents {
		out = out[:maxEvents]
	}
	return out
}

// roomFor says how much of what a DRA item asks for is free.
func roomFor(v *view.View, u usage, nodes []NodeInfo, it *view.Item) string {
	switch it.Kind {
	case view.Fraction:
		mem := it.Capacity[view.CapacityMemory]
		best, where := freeFraction(v, u)
		msg := fmt.Sprintf("claim %s: needs %s of one GPU's memory; ", it.Claim.Name, bytesGi(mem.Value()))
		if where == "" {
			return msg + "no GPU has memory free for a fraction"
		}
		return msg + fmt.Sprintf("the most free on one GPU is %s (%s)", bytesGi(best), where)
	case view.MIG:
		profile := it.Alloc.MIGProfile
		if req := requestByName(it.Claim, it.Request); req != nil && req.Exactly != nil {
			for _, s := range req.Exactly.Selectors {
				if s.CEL != nil {
					if m := profileSelector.FindStringSubmatch(s.CEL.Expression); m != nil {
						profile = m[1]
					}
				}
			}
		}
		free := freeMIG(v, u, profile)
		msg := fmt.Sprintf("claim %s: needs a MIG %s slice; ", it.Claim.Name, profile)
		if len(free) == 0 {
			return msg + "no " + profile + " placement is free on any node"
		}
		return msg + "free placements: " + strings.Join(free, ", ")
	}
	most, where := 0, ""
	for _, n := range nodes {
		if n.Source == SourceDRA && n.FreeGPUs > most {
			most, where = n.FreeGPUs, n.Name
		}
	}
	msg := fmt.Sprintf("claim %s: needs %d %s on one node; ", it.Claim.Name, it.Count, plural(it.Count, "GPU", "GPUs"))
	if most == 0 {
		msg += "no node has a free GPU"
	} else {
		msg += fmt.Sprintf("the most free on any node is %d (%s)", most, where)
	}
	if all, _ := v.MostPerNode(it); all < it.Count {
		msg += fmt.Sprintf("; no node has %d such GPUs at all (the most is %d): it cannot fit as asked", it.Count, all)
	}
	return msg
}

// freeFraction is the most memory free on one GPU for a fraction (a
// shareable whole-GPU device, healthy, no exclusive or MIG allocation) and
// where ("node gpu N").
func freeFraction(v *view.View, u usage) (int64, string) {
	var best int64
	where := ""
	for _, n := range v.Nodes() {
		for _, g := range n.GPUs {
			d := n.Devices[g.Whole]
			if d == nil || !d.Shareable || len(badTaints(d.Taints)) > 0 {
				continue
			}
			du := u.dev[devKey{n.Name, d.Name}]
			used := int64(0)
			if du != nil {
				if du.exclusive > 0 {
					continue
				}
				used = du.memoryBytes
			}
			if u.byGPU[gpuKey{n.Name, g.Index}] > dev(du) {
				continue // a MIG placement of this GPU is allocated
			}
			if free := g.MemoryBytes - used; free > best {
				best, where = free, fmt.Sprintf("%s gpu %d", n.Name, g.Index)
			}
		}
	}
	return best, where
}

// dev is how many allocations a device's use counts.
func dev(du *devUse) int {
	if du == nil {
		return 0
	}
	return du.exclusive + du.shares
}

// freeMIG lists, per node, the free placements of a MIG profile: not
// allocated, on a GPU whose whole device is not allocated, not overlapping
// an allocated MIG device, healthy. "node: N".
func freeMIG(v *view.View, u usage, profile string) []string {
	var out []string
	for _, n := range v.Nodes() {
		count := 0
		for _, g := range n.GPUs {
			if d := n.Devices[g.Whole]; d != nil && (u.dev[devKey{n.Name, d.Name}] != nil || len(badTaints(d.Taints)) > 0) {
				continue
			}
			var taken [][2]int
			for _, name := range g.MIG {
				if d := n.Devices[name]; d != nil && u.dev[devKey{n.Name, name}] != nil {
					taken = append(taken, [2]int{d.Start, d.Start + d.Size})
				}
			}
			for _, name := range g.MIG {
				d := n.Devices[name]
				if d == nil || d.Profile != profile || u.dev[devKey{n.Name, name}] != nil || len(badTaints(d.Taints)) > 0 {
					continue
				}
				if !slices.ContainsFunc(taken, func(t [2]int) bool { return d.Start < t[1] && t[0] < d.Start+d.Size }) {
					count++
				}
			}
		}
		if count > 0 {
			out = append(out, fmt.Sprintf("%s: %d", n.Name, count))
		}
	}
	return out
}

// roomForResource says how much of a device plugin's resource is free on
// the node with the most.
func roomForResource(nodes []*corev1.Node, requested map[string]corev1.ResourceList, r DeviceUse) string {
	name := corev1.ResourceName(r.Device)
	most, where := int64(0), ""
	for _, n := range nodes {
		alloc, ok := n.Status.Allocatable[name]
		if !ok {
			continue
		}
		req := requested[n.Name][name]
		if free := alloc.Value() - req.Value(); free > most {
			most, where = free, n.Name
		}
	}
	msg := fmt.Sprintf("needs %d %s on one node; ", r.Count, r.Device)
	if where == "" {
		return msg + "no node has one free"
	}
	return msg + fmt.Sprintf("the most free on any node is %d (%s)", most, where)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
