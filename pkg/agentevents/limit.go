package agentevents

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limits bounds how many Events the agent writes. Each (object, reason)
// pair has its own token bucket, and all events share one more, so a
// flood on one GPU cannot starve the others and a flood everywhere cannot
// flood the API server. Zero fields take the defaults.
type Limits struct {
	// Burst events of one reason on one object may go at once; then one
	// per Every. Defaults: 5, and one a minute.
	Burst int
	Every time.Duration
	// NodeBurst events of any kind may go at once; then one per NodeEvery.
	// Defaults: 50, and one a second.
	NodeBurst int
	NodeEvery time.Duration
	// MaxKeys bounds the buckets kept (one per object and reason seen
	// recently); past it, keys whose bucket is full again are forgotten,
	// and a new key is refused while none is. Default 4096.
	MaxKeys int
}

// Default limits.
const (
	DefaultBurst     = 5
	DefaultEvery     = time.Minute
	DefaultNodeBurst = 50
	DefaultNodeEvery = time.Second
	DefaultMaxKeys   = 4096
)

func (l Limits) withDefaults() Limits {
	if l.Burst <= 0 {
		l.Burst = DefaultBurst
	}
	if l.Every <= 0 {
		l.Every = DefaultEvery
	}
	if l.NodeBurst <= 0 {
		l.NodeBurst = DefaultNodeBurst
	}
	if l.NodeEvery <= 0 {
		l.NodeEvery = DefaultNodeEvery
	}
	if l.MaxKeys <= 0 {
		l.MaxKeys = DefaultMaxKeys
	}
	return l
}

// limiter is the keyed token buckets of [Limits]. It reads no clock: the
// caller passes now.
type limiter struct {
	l Limits

	mu   sync.Mutex
	node *rate.Limiter
	keys map[string]*rate.Limiter
}

func newLimiter(l Limits) *limiter {
	l = l.withDefaults()
	return &limiter{l: l, node: rate.NewLimiter(rate.Every(l.NodeEvery), l.NodeBurst), keys: map[string]*rate.Limiter{}}
}

// allow takes a token from key's bucket and the node's, or reports false
// (and takes none) when either is empty.
func (lm *limiter) allow(key string, now time.Time) bool {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	b := lm.keys[key]
	if b == nil {
		if len(lm.keys) >= lm.l.MaxKeys {
			lm.forgetFull(now)
		}
		if len(lm.keys) >= lm.l.MaxKeys {
			return false
		}
		b = rate.NewLimiter(rate.Every(lm.l.Every), lm.l.Burst)
		lm.keys[key] = b
	}
	if b.TokensAt(now) < 1 || lm.node.TokensAt(now) < 1 {
		return false
	}
	b.AllowN(now, 1)
	lm.node.AllowN(now, 1)
	return true
}

// forgetFull drops the buckets that refilled: a new bucket for their key
// would be the same.
func (lm *limiter) forgetFull(now time.Time) {
	for k, b := range lm.keys {
		if b.TokensAt(now) >= float64(lm.l.Burst) {
			delete(lm.keys, k)
		}
	}
}
