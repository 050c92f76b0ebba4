package heal

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Defaults of [Config] fields left zero.
const (
	DefaultBackoffBase = time.Minute
	DefaultBackoffMax  = time.Hour
	DefaultMaxPerPlan  = 100
	DefaultMaxOwners   = 10000
	// DefaultHomeTTL is how long a healed gang's nodes are remembered.
	DefaultHomeTTL = 10 * time.Minute
)

// Config tunes a [Healer]. Zero values take the defaults.
type Config struct {
	// Default is the action for pods without [Annotation]: [Evict]
	// (zero) or [Delete].
	Default Action
	// BackoffBase is the least time between two healings of one owner;
	// each further healing within BackoffReset of the last doubles it, up
	// to BackoffMax. Defaults [DefaultBackoffBase] and
	// [DefaultBackoffMax]; BackoffBase at most BackoffMax, both at most a
	// day.
	BackoffBase, BackoffMax time.Duration
	// BackoffReset is how long an owner must go without healing for its
	// backoff to start over; default twice BackoffMax.
	BackoffReset time.Duration
	// MaxPerPlan bounds the pods one plan evicts or deletes (a gang is
	// never split: it may exceed the bound alone); the rest follow in the
	// next plans. Default [DefaultMaxPerPlan], 1 to 10000.
	MaxPerPlan int
	// MaxOwners bounds the owners whose backoff is remembered (the least
	// recently healed are forgotten first). Default [DefaultMaxOwners].
	MaxOwners int
	// HomeTTL is how long the nodes of a healed gang are remembered
	// ([Healer.Homes]) so that its re-created members are placed in the
	// domain it ran in. Default [DefaultHomeTTL], at most an hour. At most
	// MaxOwners gangs are remembered.
	HomeTTL time.Duration
}

func (c Config) withDefaults() Config {
	c.Default = cmp.Or(c.Default, Evict)
	c.BackoffBase = cmp.Or(c.BackoffBase, DefaultBackoffBase)
	c.BackoffMax = cmp.Or(c.BackoffMax, DefaultBackoffMax)
	c.BackoffReset = cmp.Or(c.BackoffReset, 2*c.BackoffMax)
	c.MaxPerPlan = cmp.Or(c.MaxPerPlan, DefaultMaxPerPlan)
	c.MaxOwners = cmp.Or(c.MaxOwners, DefaultMaxOwners)
	c.HomeTTL = cmp.Or(c.HomeTTL, DefaultHomeTTL)
	return c
}

// Validate reports every bad field (after defaults).
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if err := c.Default.Validate(); err != nil {
		errs = append(errs, err)
	}
	const day = 24 * time.Hour
	if c.BackoffBase < 0 || c.BackoffMax < 0 || c.BackoffBase > c.BackoffMax || c.BackoffMax > day {
		errs = append(errs, fmt.Errorf("heal: backoff %s..%s: want 0 < base <= max <= 24h", c.BackoffBase, c.BackoffMax))
	}
	if c.BackoffReset < c.BackoffMax || c.BackoffReset > 7*day {
		errs = append(errs, fmt.Errorf("heal: backoff reset %s: want at least the backoff max %s and at most 168h", c.BackoffReset, c.BackoffMax))
	}
	if c.MaxPerPlan < 1 || c.MaxPerPlan > 10000 {
		errs = append(errs, fmt.Errorf("heal: max per plan %d: want 1 to 10000", c.MaxPerPlan))
	}
	if c.MaxOwners < 1 || c.MaxOwners > 1000000 {
		errs = append(errs, fmt.Errorf("heal: max owners %d: want 1 to 1000000", c.MaxOwners))
	}
	if c.HomeTTL < 0 || c.HomeTTL > time.Hour {
		errs = append(errs, fmt.Errorf("heal: home TTL %s: want 0 (default %s) to 1h", c.HomeTTL, DefaultHomeTTL))
	}
	return errors.Join(errs...)
}

// DeviceKey names a device by its node and UUID.
type DeviceKey struct{ Node, UUID string }

// Device is a device a pod's claims hold.
type Device struct {
	// Node and Name are the device's pool (node) and DRA device name
	// ("gpu-3"); UUID its "uuid" attribute ("" for a MIG placement that
	// does not exist yet) and ParentUUID its GPU's, for a MIG device or
	// partition.
	Node, Name, UUID, ParentUUID string
	// Taint, if not "", is why an untolerated NoExecute taint is on the
	// device ("Xid 79"): the device counts as failed.
	Taint string
}

// Pod is a bound pod as the healer sees it.
type Pod struct {
	// Key is "namespace/name"; UID the pod's UID; Node its node.
	Key, UID, Node string
	// Owner is whose backoff the pod shares: its controller
	// ("namespace/Kind/name"), else "" (the pod alone). A gang's members
	// share the gang's.
	Owner string
	// Group is the pod's gang ("namespace/name"), "" for none.
	Group string
	// Devices are the devices its claims hold.
	Devices []Device
	// Annotation is the raw value of [Annotation] ("" when absent).
	Annotation string
	// Checkpointable pods resume from LastCheckpoint (zero: unknown);
	// Started is when the pod started (zero: unknown).
	Checkpointable bool
	LastCheckpoint time.Time
	Started        time.Time
	// Terminating pods (deletionTimestamp set) are already going.
	Terminating bool
}

// Input is one plan's view of the cluster.
type Input struct {
	Pods []Pod
	// Unhealthy are the devices reported failed, with the reason, by
	// node and UUID (a GPU's failure fails its MIG devices).
	Unhealthy map[DeviceKey]string
	// Now is the time of the plan.
	Now time.Time
	// MinMember is each gang's minMember by group key. A gang with more
	// running members than its minMember (elastic) loses only its members
	// on failed devices while the rest stay at or above minMember; absent
	// or below 1: the whole gang goes.
	MinMember map[string]int
}

// Removal is one pod to evict or delete.
type Removal struct {
	Pod    *Pod
	Action Action
	// Device is the failed device that caused it (for a gang mate, the
	// member's); Reason why it failed ("Xid 79"); Mate, for a gang mate
	// not on a failed device itself, the member that is.
	Device Device
	Reason string
	Mate   string
	// Attempt counts the owner's healings within its backoff window,
	// this one included (1: the first).
	Attempt int
	// Staying, for a member of an elastic gang removed alone, is how
	// many of the gang's members keep running (at least its minMember);
	// 0 otherwise.
	Staying int
}

// What reported a failure ([Device.ReportedBy]).
const (
	ByStream = "the telemetry stream"
	ByTaint  = "a NoExecute device taint"
)

// ReportedBy says what reported d failed: [ByTaint] when it carries an
// untolerated NoExecute taint, else [ByStream] (Input.Unhealthy).
func (d Device) ReportedBy() string {
	if d.Taint != "" {
		return ByTaint
	}
	return ByStream
}

// Why is the Removal's message: node, GPU, reason and what reported it.
func (r Removal) Why() string {
	uuid := cmp.Or(r.Device.UUID, r.Device.ParentUUID, r.Device.Name)
	if r.Mate != "" {
		return fmt.Sprintf("gang %s member %s lost GPU %s on node %s (%s), reported by %s", r.Pod.Group, r.Mate, uuid, r.Device.Node, r.Reason, r.Device.ReportedBy())
	}
	why := fmt.Sprintf("GPU %s on node %s failed (%s), reported by %s", uuid, r.Device.Node, r.Reason, r.Device.ReportedBy())
	if r.Staying > 0 {
		members := "members"
		if r.Staying == 1 {
			members = "member"
		}
		why += fmt.Sprintf("; gang %s keeps its %d other %s running", r.Pod.Group, r.Staying, members)
	}
	return why
}

// Left is a pod left on a failed device, and why.
type Left struct {
	Pod    *Pod
	Device Device
	Reason string
	// Kept: by [Keep]; otherwise the owner backs off until Until
	// (Attempt healings so far).
	Kept    bool
	Until   time.Time
	Attempt int
}

// Invalid is a pod whose [Annotation] is malformed; the default applies.
type Invalid struct {
	Pod     *Pod
	Message string
}

// Plan is what one plan decides. Removals come in order: checkpointable
// units first, least work lost first; a gang's members are consecutive.
type Plan struct {
	Removals []Removal
	Left     []Left
	Invalid  []Invalid
	// Deferred counts pods beyond MaxPerPlan, left to the next plans.
	Deferred int
	// NewBackoffs are the owners that started backing off in this plan.
	NewBackoffs int
}

// Healer plans healings. Make it with [New]; not safe for concurrent use.
type Healer struct {
	cfg Config
	// owners are the backoff states by owner key.
	owners map[string]*owner
	// chosen are the pods planned for removal and not yet gone (by UID),
	// so that a gang whose failed member is gone still loses the rest.
	chosen map[string]Removal
	// homes are the nodes each healed gang ran on, by group key.
	homes map[string]home
}

// home is where a healed gang ran, and when it was healed.
type home struct {
	nodes []string
	at    time.Time
}

type owner struct {
	attempts int
	last     time.Time
	// until is when the current backoff ends (reported once).
	until time.Time
}

// New returns a Healer for cfg, or cfg's problems.
func New(cfg Config) (*Healer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Healer{cfg: cfg.withDefaults(), owners: map[string]*owner{}, chosen: map[string]Removal{}, homes: map[string]home{}}, nil
}

// unit is a pod alone or a gang, healed as one.
type unit struct {
	key  string // backoff key
	pods []*Pod
	// failed: the first failed device of a member, its reason, the
	// member (pod key).
	dev    Device
	reason string
	member string
	keep   bool
	// hit are a gang's members on failed devices or chosen before;
	// staying, for an elastic gang losing only those, how many remain.
	hit     []*Pod
	staying int
	// nodes, for a gang, are the nodes its running members are on.
	nodes []string
}

// failure returns the first failed device of p and why.
func failure(p *Pod, bad map[DeviceKey]string) (Device, string, bool) {
	for _, d := range p.Devices {
		if d.Taint != "" {
			return d, d.Taint, true
		}
		for _, u := range []string{d.UUID, d.ParentUUID} {
			if u == "" {
				continue
			}
			if r, ok := bad[DeviceKey{d.Node, u}]; ok {
				return d, cmp.Or(r, "unhealthy"), true
			}
		}
	}
	return Device{}, "", false
}

// Plan decides at in.Now. It records the healings it plans: the caller
// must carry them out (a removal that fails is planned again next time
// without a new backoff step while the pod stays).
func (h *Healer) Plan(in Input) Plan {
	var out Plan
	now := in.Now
	byUID := make(map[string]*Pod, len(in.Pods))
	groups := map[string][]*Pod{}
	for i := range in.Pods {
		p := &in.Pods[i]
		byUID[p.UID] = p
		if p.Group != "" {
			groups[p.Group] = append(groups[p.Group], p)
		}
	}
	// Pods chosen before and gone or going are done.
	for uid := range h.chosen {
		if p, ok := byUID[uid]; !ok || p.Terminating {
			delete(h.chosen, uid)
		}
	}
	actions := make(map[*Pod]Action, len(in.Pods))
	action := func(p *Pod) Action {
		if a, ok := actions[p]; ok {
			return a
		}
		a, err := ParseAction(p.Annotation, h.cfg.Default)
		if err != nil {
			out.Invalid = append(out.Invalid, Invalid{Pod: p, Message: err.Error()})
		}
		actions[p] = a
		return a
	}
	units := map[string]*unit{}
	var order []*unit
	for i := range in.Pods {
		p := &in.Pods[i]
		if p.Terminating {
			continue
		}
		dev, reason, failed := failure(p, in.Unhealthy)
		prev, wasChosen := h.chosen[p.UID]
		if !failed && !wasChosen {
			continue
		}
		key := "pod/" + p.Key
		if p.Owner != "" {
			key = "owner/" + p.Owner
		}
		if p.Group != "" {
			key = "gang/" + p.Group
		}
		u := units[key]
		if u == nil {
			u = &unit{key: key}
			units[key] = u
			order = append(order, u)
		}
		if failed && u.member == "" {
			u.dev, u.reason, u.member = dev, reason, p.Key
		} else if !failed && u.member == "" && wasChosen {
			u.dev, u.reason, u.member = prev.Device, prev.Reason, cmp.Or(prev.Mate, p.Key)
		}
		if p.Group == "" {
			u.pods = append(u.pods, p)
		} else {
			u.hit = append(u.hit, p)
		}
	}
	// Members: a gang's pods all; a lone pod or owner's pods those on
	// failed devices (or chosen before), gathered above.
	for _, u := range order {
		if g, ok := strings.CutPrefix(u.key, "gang/"); ok {
			var running []*Pod
			for _, p := range groups[g] {
				if !p.Terminating {
					running = append(running, p)
					if !slices.Contains(u.nodes, p.Node) {
						u.nodes = append(u.nodes, p.Node)
					}
				}
			}
			slices.Sort(u.nodes)
			// An elastic gang that keeps minMember running loses only
			// the members hit; otherwise the whole gang goes.
			if m := in.MinMember[g]; m > 0 && len(running)-len(u.hit) >= m {
				u.pods, u.staying = u.hit, len(running)-len(u.hit)
			} else {
				u.pods = running
			}
		}
		slices.SortFunc(u.pods, func(a, b *Pod) int { return cmp.Compare(a.Key, b.Key) })
		for _, p := range u.pods {
			if action(p) == Keep {
				u.keep = true
			}
		}
	}
	slices.SortStableFunc(order, func(a, b *unit) int { return h.compare(a, b, now) })
	budget := h.cfg.MaxPerPlan
	for _, u := range order {
		if u.keep {
			for _, p := range u.pods {
				if d, r, failed := failure(p, in.Unhealthy); failed {
					out.Left = append(out.Left, Left{Pod: p, Device: d, Reason: r, Kept: true})
				}
			}
			continue
		}
		continuing := false
		for _, p := range u.pods {
			if _, ok := h.chosen[p.UID]; ok {
				continuing = true
			}
		}
		o := h.owners[u.key]
		if o != nil && now.Sub(o.last) > h.cfg.BackoffReset {
			o = nil
			delete(h.owners, u.key)
		}
		if !continuing && o != nil && now.Before(o.last.Add(h.delay(o.attempts))) {
			until := o.last.Add(h.delay(o.attempts))
			if !o.until.Equal(until) {
				o.until = until
				out.NewBackoffs++
			}
			for _, p := range u.pods {
				if d, r, failed := failure(p, in.Unhealthy); failed {
					out.Left = append(out.Left, Left{Pod: p, Device: d, Reason: r, Until: until, Attempt: o.attempts})
				}
			}
			continue
		}
		if budget <= 0 || (len(u.pods) > budget && budget < h.cfg.MaxPerPlan) {
			out.Deferred += len(u.pods)
			continue
		}
		if !continuing {
			if o == nil {
				o = &owner{}
				h.owners[u.key] = o
			}
			o.attempts++
			o.last = now
		}
		for _, p := range u.pods {
			r := Removal{Pod: p, Action: action(p), Device: u.dev, Reason: u.reason, Attempt: o.attempts, Staying: u.staying}
			if prev, ok := h.chosen[p.UID]; ok {
				r.Device, r.Reason, r.Mate = prev.Device, prev.Reason, prev.Mate
			} else if d, why, failed := failure(p, in.Unhealthy); failed {
				r.Device, r.Reason = d, why
			} else {
				r.Mate = u.member
			}
			h.chosen[p.UID] = r
			out.Removals = append(out.Removals, r)
		}
		budget -= len(u.pods)
		if g, ok := strings.CutPrefix(u.key, "gang/"); ok && len(u.nodes) > 0 {
			if _, known := h.homes[g]; !continuing || !known {
				h.homes[g] = home{nodes: u.nodes, at: now}
			}
		}
	}
	h.trim(now)
	return out
}

// delay is the backoff after attempts healings: base doubled per
// attempt after the first, at most max.
func (h *Healer) delay(attempts int) time.Duration {
	d := h.cfg.BackoffBase << min(max(attempts-1, 0), 30)
	if d <= 0 || d > h.cfg.BackoffMax {
		return h.cfg.BackoffMax
	}
	return d
}

// compare orders units: all-checkpointable first, then the least work
// lost (time since the last checkpoint, else since the start; unknown
// last), then by key.
func (h *Healer) compare(a, b *unit, now time.Time) int {
	ca, cb := checkpointable(a), checkpointable(b)
	if ca != cb {
		if ca {
			return -1
		}
		return 1
	}
	la, lb := lost(a, now), lost(b, now)
	if la != lb {
		switch {
		case la < 0:
			return 1
		case lb < 0:
			return -1
		}
		return cmp.Compare(la, lb)
	}
	return cmp.Compare(a.key, b.key)
}

func checkpointable(u *unit) bool {
	for _, p := range u.pods {
		if !p.Checkpointable {
			return false
		}
	}
	return len(u.pods) > 0
}

// lost is the most work a unit's member loses (-1: unknown).
func lost(u *unit, now time.Time) time.Duration {
	var worst time.Duration = -1
	for _, p := range u.pods {
		since := p.Started
		if p.Checkpointable && !p.LastCheckpoint.IsZero() {
			since = p.LastCheckpoint
		}
		if since.IsZero() {
			return -1
		}
		worst = max(worst, max(now.Sub(since), 0))
	}
	return worst
}

// trim forgets the homes older than HomeTTL and bounds the remembered
// owners and homes to MaxOwners, the least recently healed first.
func (h *Healer) trim(now time.Time) {
	for g, hm := range h.homes {
		if now.Sub(hm.at) >= h.cfg.HomeTTL {
			delete(h.homes, g)
		}
	}
	if over := len(h.homes) - h.cfg.MaxOwners; over > 0 {
		gs := slices.SortedFunc(maps.Keys(h.homes), func(a, b string) int {
			return cmp.Or(h.homes[a].at.Compare(h.homes[b].at), cmp.Compare(a, b))
		})
		for _, g := range gs[:over] {
			delete(h.homes, g)
		}
	}
	if len(h.owners) <= h.cfg.MaxOwners {
		return
	}
	type kv struct {
		k string
		t time.Time
	}
	all := make([]kv, 0, len(h.owners))
	for k, o := range h.owners {
		all = append(all, kv{k, o.last})
	}
	slices.SortFunc(all, func(a, b kv) int { return cmp.Or(a.t.Compare(b.t), cmp.Compare(a.k, b.k)) })
	for _, e := range all[:len(all)-h.cfg.MaxOwners] {
		delete(h.owners, e.k)
	}
}

// Pending reports whether pods planned for removal may still be there:
// a plan must run even when no device has failed.
func (h *Healer) Pending() bool { return len(h.chosen) > 0 }

// Homes are the nodes each gang healed within HomeTTL before now ran on,
// by group key (sorted, shared: not to be modified): its re-created
// members are best placed in the same domain.
func (h *Healer) Homes(now time.Time) map[string][]string {
	var out map[string][]string
	for g, hm := range h.homes {
		if now.Sub(hm.at) < h.cfg.HomeTTL {
			if out == nil {
				out = make(map[string][]string, len(h.homes))
			}
			out[g] = hm.nodes
		}
	}
	return out
}

// Owners is how many owners' backoff the healer remembers.
func (h *Healer) Owners() int { return len(h.owners) }
