package scheduler

import (
	"cmp"
	"slices"
	"strconv"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
)

// maxAssumed bounds each map of the assume cache; past it new entries
// are not recorded (the resourceVersion checks of the writes still
// prevent a double allocation).
const maxAssumed = 1 << 18

// absentGrace is how long a written claim the informer does not have at
// all is kept: a claim created and allocated just before this replica
// started leading may not have reached its informer yet.
const absentGrace = 30 * time.Second

type assumedClaim struct {
	c  *resourceapi.ResourceClaim
	at time.Time
}

// assumeCache holds what this process wrote that its informers may not
// show yet: claims (by UID, with the resourceVersion the write returned)
// and bound pods (by UID, with their node). An entry is dropped once the
// informer shows that resourceVersion or a newer one (or the pod bound),
// or the object is gone.
//
// It also holds the binds in flight (decided, handed to the bind workers,
// not yet written): each pod as bound to its node ([assumeCache.bound])
// and each claim as the decision left it, allocated and reserved for the
// pod ([assumeCache.inFlight]), whatever its resourceVersion, until the
// worker releases it. The next cycle therefore decides on the assumed
// state, as kube-scheduler's scheduling cycle runs on its assumed pods
// while their binding cycles run. Safe for concurrent use.
type assumeCache struct {
	mu     sync.Mutex
	claims map[types.UID]assumedClaim
	pods   map[types.UID]string
	// flying are the claims of binds in flight, by claim UID (the
	// stand-in UID for a claim of extended resources not yet created).
	flying map[types.UID]flyingClaim
}

// flyingClaim is a claim as a bind in flight for pod will write it.
type flyingClaim struct {
	c   *resourceapi.ResourceClaim
	pod types.UID
}

func newAssumeCache() *assumeCache {
	return &assumeCache{claims: map[types.UID]assumedClaim{}, pods: map[types.UID]string{}, flying: map[types.UID]flyingClaim{}}
}

// inFlight records the claims a bind for pod is about to write, as it
// will write them (not bounded by maxAssumed: what is in flight is bounded
// by the cycles' pending pods, and dropping it would double-allocate).
func (a *assumeCache) inFlight(pod types.UID, claims []*resourceapi.ResourceClaim) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, c := range claims {
		if c != nil && c.UID != "" {
			a.flying[c.UID] = flyingClaim{c: c, pod: pod}
		}
	}
}

// landed drops the in-flight claims of pod: its writes are done (what
// they wrote is in the cache as written) or undone.
func (a *assumeCache) landed(pod types.UID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for uid, f := range a.flying {
		if f.pod == pod {
			delete(a.flying, uid)
		}
	}
}

// unbound drops a pod assumed bound whose bind failed: the next cycle
// sees it pending again.
func (a *assumeCache) unbound(uid types.UID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.pods, uid)
}

// claim records a claim as the API server returned it (from a write or a
// fresh list) at time now.
func (a *assumeCache) claim(c *resourceapi.ResourceClaim, now time.Time) {
	if c == nil || c.UID == "" {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if old, ok := a.claims[c.UID]; ok && newer(old.c.ResourceVersion, c.ResourceVersion) {
		return // a later write is recorded already
	}
	if _, ok := a.claims[c.UID]; ok || len(a.claims) < maxAssumed {
		a.claims[c.UID] = assumedClaim{c: c, at: now}
	}
}

// bound records a pod bound to node.
func (a *assumeCache) bound(uid types.UID, node string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.pods) < maxAssumed {
		a.pods[uid] = node
	}
}

// forget drops everything (a new term as leader starts from the API).
func (a *assumeCache) forget() {
	a.mu.Lock()
	defer a.mu.Unlock()
	clear(a.claims)
	clear(a.pods)
	clear(a.flying)
}

// mergeClaims returns the informer's claims with each one this process
// wrote more recently replaced by the written version, plus written claims
// the informer does not have yet (for [absentGrace]); it drops entries the
// informer has caught up with. Claims of binds in flight replace both.
func (a *assumeCache) mergeClaims(informer []*resourceapi.ResourceClaim, now time.Time) []*resourceapi.ResourceClaim {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.claims) == 0 && len(a.flying) == 0 {
		return informer
	}
	out := make([]*resourceapi.ResourceClaim, len(informer), len(informer)+len(a.claims))
	present := make(map[types.UID]bool, len(a.claims))
	for i, c := range informer {
		out[i] = c
		w, ok := a.claims[c.UID]
		if !ok {
			continue
		}
		present[c.UID] = true
		if !newer(w.c.ResourceVersion, c.ResourceVersion) {
			delete(a.claims, c.UID) // the informer caught up
			continue
		}
		out[i] = w.c
	}
	for uid, w := range a.claims {
		switch {
		case present[uid]:
		case now.Sub(w.at) > absentGrace:
			delete(a.claims, uid) // deleted
		default:
			out = append(out, w.c)
		}
	}
	if len(a.flying) == 0 {
		return out
	}
	at := make(map[types.UID]int, len(out))
	for i, c := range out {
		at[c.UID] = i
	}
	n := len(out)
	for uid, f := range a.flying {
		if i, ok := at[uid]; ok {
			out[i] = f.c
			continue
		}
		out = append(out, f.c)
	}
	// Map order: sorted, so that a cycle's input does not depend on it.
	slices.SortFunc(out[n:], func(x, y *resourceapi.ResourceClaim) int { return cmp.Compare(x.UID, y.UID) })
	return out
}

// boundNode returns the node a pod was bound to by this process, if the
// informer has not shown it yet.
func (a *assumeCache) boundNode(uid types.UID) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	n, ok := a.pods[uid]
	return n, ok
}

// prunePods drops bound pods the informer shows bound, or no longer has;
// live reports whether the informer has the pod unbound.
func (a *assumeCache) prunePods(live func(types.UID) bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for uid := range a.pods {
		if !live(uid) {
			delete(a.pods, uid)
		}
	}
}

// newer reports whether resourceVersion a is newer than b. Kubernetes
// resource versions are etcd revisions (decimal integers); anything else
// is never newer.
func newer(a, b string) bool {
	x, err1 := strconv.ParseUint(a, 10, 64)
	y, err2 := strconv.ParseUint(b, 10, 64)
	return err1 == nil && err2 == nil && x > y
}
