package predict

import (
	"container/list"
	"fmt"
	"math"
	"slices"
)

// Bounds on arguments and options.
const (
	// MaxSeconds bounds a runtime (about 31 years, as pkg/trace's).
	MaxSeconds = 1_000_000_000
	// MaxLevels bounds the keys describing one job.
	MaxLevels = 8
	// MaxKeyBytes bounds one key.
	MaxKeyBytes = 512
	// MaxMaxKeys bounds Options.MaxKeys.
	MaxMaxKeys = 1 << 16
	// MaxHalfLife bounds Options.HalfLife.
	MaxHalfLife = 1_000_000
)

// Defaults of [Options].
const (
	DefaultMaxKeys   = 2048
	DefaultHalfLife  = 100
	DefaultMinWeight = 3
)

// growth is the ratio of a bucket's upper to lower bound; bucket b holds
// runtimes in [growth^b, growth^(b+1)) seconds.
const growth = 1.2

// buckets covers 1 s .. MaxSeconds.
var buckets = int(math.Ceil(math.Log(MaxSeconds)/math.Log(growth))) + 1

var logGrowth = math.Log(growth)

// minBucketWeight is the weight below which a bucket is forgotten.
const minBucketWeight = 1e-3

// Options configure a [Predictor]; the zero value takes the defaults.
type Options struct {
	// MaxKeys bounds the keys kept; the least recently used is evicted.
	// 0 means DefaultMaxKeys.
	MaxKeys int
	// HalfLife is the number of later observations of a key after which an
	// observation counts half; 0 means DefaultHalfLife.
	HalfLife float64
	// MinWeight is the decayed weight (about the number of recent jobs) a
	// key needs before it answers; coarser keys answer until then. 0 means
	// DefaultMinWeight.
	MinWeight float64
}

// withDefaults fills in zero fields and rejects values out of range.
func (o Options) withDefaults() (Options, error) {
	if o.MaxKeys == 0 {
		o.MaxKeys = DefaultMaxKeys
	}
	if o.HalfLife == 0 {
		o.HalfLife = DefaultHalfLife
	}
	if o.MinWeight == 0 {
		o.MinWeight = DefaultMinWeight
	}
	switch {
	case o.MaxKeys < 1 || o.MaxKeys > MaxMaxKeys:
		return o, fmt.Errorf("%w: max keys %d: want 1..%d", ErrInvalid, o.MaxKeys, MaxMaxKeys)
	case !(o.HalfLife >= 1 && o.HalfLife <= MaxHalfLife):
		return o, fmt.Errorf("%w: half-life %v: want 1..%d observations", ErrInvalid, o.HalfLife, MaxHalfLife)
	case !(o.MinWeight > 0 && o.MinWeight <= o.HalfLife*2):
		return o, fmt.Errorf("%w: min weight %v: want a number in (0, 2×half-life = %v]", ErrInvalid, o.MinWeight, o.HalfLife*2)
	}
	return o, nil
}

// Predictor is the learned state: a histogram per key, in LRU order.
type Predictor struct {
	o     Options
	decay float64 // weight kept per observation: 2^(-1/HalfLife)
	minW  float64 // MinWeight × decay^MinWeight: MinWeight jobs in a row pass it
	keys  map[string]*list.Element
	lru   *list.List // of *entry, most recently used at the front
}

type entry struct {
	key    string
	weight float64   // sum of w
	w      []float64 // decayed weight per bucket
}

// New returns an empty predictor.
func New(o Options) (*Predictor, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	d := math.Exp2(-1 / o.HalfLife)
	return &Predictor{o: o, decay: d, minW: o.MinWeight * math.Pow(d, o.MinWeight), keys: map[string]*list.Element{}, lru: list.New()}, nil
}

// Options returns the options in effect (defaults filled in).
func (p *Predictor) Options() Options { return p.o }

// Len is the number of keys held.
func (p *Predictor) Len() int { return p.lru.Len() }

// checkKeys validates a job's keys.
func checkKeys(keys []string) error {
	if len(keys) == 0 || len(keys) > MaxLevels {
		return fmt.Errorf("%w: %d keys: want 1..%d", ErrInvalid, len(keys), MaxLevels)
	}
	for i, k := range keys {
		if k == "" || len(k) > MaxKeyBytes {
			return fmt.Errorf("%w: key %d is %d bytes: want 1..%d", ErrInvalid, i, len(k), MaxKeyBytes)
		}
	}
	return nil
}

// Observe records that a job described by keys (most specific first) ran
// for seconds, under every one of its keys.
func (p *Predictor) Observe(keys []string, seconds int64) error {
	if err := checkKeys(keys); err != nil {
		return err
	}
	if seconds < 1 || seconds > MaxSeconds {
		return fmt.Errorf("%w: runtime %d s: want 1..%d", ErrInvalid, seconds, MaxSeconds)
	}
	b := bucketOf(seconds)
	for _, k := range keys {
		e := p.entry(k, true)
		e.weight = 0
		for i := range e.w {
			if e.w[i] *= p.decay; e.w[i] < minBucketWeight {
				e.w[i] = 0 // forgotten: keeps the encoding sparse
			}
			e.weight += e.w[i]
		}
		e.w[b]++
		e.weight++
	}
	return nil
}

// Prediction is a predicted runtime and where it came from.
type Prediction struct {
	// Seconds is the predicted runtime, at least 1.
	Seconds int64
	// Level indexes the key that answered; Key is that key.
	Level int
	Key   string
	// Weight is the key's decayed weight (about its number of recent jobs).
	Weight float64
}

// Predict returns the q-quantile (0 < q < 1) of the runtimes seen under the
// most specific of keys whose weight reaches MinWeight, or false when none
// does (the runtime is unknown).
func (p *Predictor) Predict(keys []string, q float64) (Prediction, bool, error) {
	if err := checkKeys(keys); err != nil {
		return Prediction{}, false, err
	}
	if !(q > 0 && q < 1) {
		return Prediction{}, false, fmt.Errorf("%w: quantile %v: want a number in (0, 1)", ErrInvalid, q)
	}
	for lv, k := range keys {
		e := p.entry(k, false)
		if e == nil || e.weight < p.minW {
			continue
		}
		return Prediction{Seconds: e.quantile(q), Level: lv, Key: k, Weight: e.weight}, true, nil
	}
	return Prediction{}, false, nil
}

// entry returns k's entry, marking it used; with create it adds a missing
// one (evicting the least recently used over MaxKeys), else returns nil.
func (p *Predictor) entry(k string, create bool) *entry {
	if el, ok := p.keys[k]; ok {
		p.lru.MoveToFront(el)
		return el.Value.(*entry)
	}
	if !create {
		return nil
	}
	p.evictTo(p.o.MaxKeys - 1)
	e := &entry{key: k, w: make([]float64, buckets)}
	p.keys[k] = p.lru.PushFront(e)
	return e
}

// evictTo drops least recently used keys until n are left.
func (p *Predictor) evictTo(n int) {
	for p.lru.Len() > n {
		el := p.lru.Back()
		delete(p.keys, el.Value.(*entry).key)
		p.lru.Remove(el)
	}
}

// bucketOf is the bucket of a runtime of s >= 1 seconds.
func bucketOf(s int64) int {
	b := int(math.Floor(math.Log(float64(s)) / logGrowth))
	return min(max(b, 0), buckets-1)
}

// quantile interpolates log-linearly within the bucket where the
// cumulative weight reaches q of the total.
func (e *entry) quantile(q float64) int64 {
	target := q * e.weight
	var cum float64
	for b, w := range e.w {
		if w <= 0 {
			continue
		}
		if cum+w >= target {
			frac := (target - cum) / w
			v := math.Exp((float64(b) + frac) * logGrowth)
			return min(max(int64(math.Round(v)), 1), MaxSeconds)
		}
		cum += w
	}
	// Rounding left target just above the sum: the last bucket's top.
	for b := len(e.w) - 1; b >= 0; b-- {
		if e.w[b] > 0 {
			return min(max(int64(math.Round(math.Exp(float64(b+1)*logGrowth))), 1), MaxSeconds)
		}
	}
	return 1
}

// WithOptions returns a copy of p under o: what p learned, with o's key
// limit (the least recently used keys dropped), half-life and minimum
// weight from now on; a key's weight over what the new half-life allows is
// scaled down to it (its quantiles unchanged). A scheduler uses it to apply its flags to what a
// previous leader stored under other ones.
func (p *Predictor) WithOptions(o Options) (*Predictor, error) {
	q, err := New(o)
	if err != nil {
		return nil, err
	}
	var kept []*entry // most recently used first
	for el := p.lru.Front(); el != nil && len(kept) < q.o.MaxKeys; el = el.Next() {
		kept = append(kept, el.Value.(*entry))
	}
	// A key's weight stays under the new half-life's limit (a longer one
	// let it grow further), scaled down whole so its quantiles stay.
	limit := 1 / (1 - q.decay)
	for _, e := range slices.Backward(kept) { // oldest first: the order is kept
		c := &entry{key: e.key, weight: e.weight, w: slices.Clone(e.w)}
		if c.weight > limit {
			f := limit / c.weight
			c.weight = 0
			for i := range c.w {
				c.w[i] *= f
				c.weight += c.w[i]
			}
		}
		q.keys[e.key] = q.lru.PushFront(c)
	}
	return q, nil
}
