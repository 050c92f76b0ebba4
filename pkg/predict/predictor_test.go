package predict

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func mustNew(t testing.TB, o Options) *Predictor {
	t.Helper()
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestQuantilesWithinABucket: the quantiles of a known distribution come
// back within the bucket width (20 %).
func TestQuantilesWithinABucket(t *testing.T) {
	p := mustNew(t, Options{HalfLife: 1e5})
	keys := []string{"q/a"}
	for s := int64(1); s <= 1000; s++ {
		if err := p.Observe(keys, s*60); err != nil { // uniform 1..1000 minutes
			t.Fatal(err)
		}
	}
	for _, q := range []float64{0.1, 0.5, 0.8, 0.95} {
		got, ok, err := p.Predict(keys, q)
		if err != nil || !ok {
			t.Fatalf("q %v: %v %v", q, ok, err)
		}
		want := q * 1000 * 60
		if r := float64(got.Seconds) / want; r < 0.85 || r > 1.15 {
			t.Errorf("q %v: %d s, want about %.0f", q, got.Seconds, want)
		}
	}
}

// TestFallsBackToCoarserKeys: a key answers only once it has MinWeight
// jobs; until then the coarser key does, and unknown jobs get nothing.
func TestFallsBackToCoarserKeys(t *testing.T) {
	p := mustNew(t, Options{MinWeight: 3})
	for range 5 {
		if err := p.Observe([]string{"q/shape-a", "q"}, 100); err != nil {
			t.Fatal(err)
		}
	}
	keys := []string{"q/shape-b", "q"}
	for i := range 3 {
		got, ok, _ := p.Predict(keys, 0.5)
		if !ok || got.Level != 1 || got.Key != "q" {
			t.Fatalf("after %d jobs of shape b: %+v %v, want the queue's answer", i, got, ok)
		}
		if err := p.Observe(keys, 10000); err != nil {
			t.Fatal(err)
		}
	}
	got, ok, _ := p.Predict(keys, 0.5)
	if !ok || got.Level != 0 || got.Seconds < 8000 || got.Seconds > 12000 {
		t.Fatalf("after 3 jobs of shape b: %+v %v, want about 10000 s from its own key", got, ok)
	}
	if _, ok, _ := p.Predict([]string{"other/x", "other"}, 0.5); ok {
		t.Fatal("a queue never seen got a prediction")
	}
}

// TestDecayFollowsChange: after the runtime of a key changes, the median
// follows within a few half-lives.
func TestDecayFollowsChange(t *testing.T) {
	p := mustNew(t, Options{HalfLife: 10})
	k := []string{"k"}
	for range 200 {
		p.Observe(k, 100)
	}
	for range 40 {
		p.Observe(k, 5000)
	}
	got, _, _ := p.Predict(k, 0.5)
	if got.Seconds < 4000 {
		t.Fatalf("median %d s after 40 jobs of 5000 s with half-life 10: old runtimes still dominate", got.Seconds)
	}
	// Without decay (a huge half-life) the old runtimes would dominate.
	q := mustNew(t, Options{HalfLife: MaxHalfLife})
	for range 200 {
		q.Observe(k, 100)
	}
	for range 40 {
		q.Observe(k, 5000)
	}
	if got, _, _ := q.Predict(k, 0.5); got.Seconds > 200 {
		t.Fatalf("no-decay median %d s, want about 100", got.Seconds)
	}
}

// TestLRUBoundsKeys: never more than MaxKeys keys; the least recently used
// goes first, and a predicted key counts as used.
func TestLRUBoundsKeys(t *testing.T) {
	p := mustNew(t, Options{MaxKeys: 3, MinWeight: 1})
	for _, k := range []string{"a", "b", "c"} {
		p.Observe([]string{k}, 10)
	}
	p.Predict([]string{"a"}, 0.5) // a is now the most recent
	p.Observe([]string{"d"}, 10)  // evicts b
	if p.Len() != 3 {
		t.Fatalf("%d keys, want 3", p.Len())
	}
	for k, want := range map[string]bool{"a": true, "b": false, "c": true, "d": true} {
		if _, ok, _ := p.Predict([]string{k}, 0.5); ok != want {
			t.Errorf("key %s held = %v, want %v", k, ok, want)
		}
	}
}

func TestBadArguments(t *testing.T) {
	p := mustNew(t, Options{})
	long := strings.Repeat("x", MaxKeyBytes+1)
	for name, err := range map[string]error{
		"no keys":      p.Observe(nil, 10),
		"empty key":    p.Observe([]string{""}, 10),
		"long key":     p.Observe([]string{long}, 10),
		"many keys":    p.Observe(make([]string, MaxLevels+1), 10),
		"zero runtime": p.Observe([]string{"a"}, 0),
		"huge runtime": p.Observe([]string{"a"}, MaxSeconds+1),
	} {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
	for _, q := range []float64{0, 1, -1, math.NaN()} {
		if _, _, err := p.Predict([]string{"a"}, q); !errors.Is(err, ErrInvalid) {
			t.Errorf("quantile %v: err = %v, want ErrInvalid", q, err)
		}
	}
	for _, o := range []Options{{MaxKeys: -1}, {MaxKeys: MaxMaxKeys + 1}, {HalfLife: 0.5}, {HalfLife: math.Inf(1)}, {MinWeight: -1}, {HalfLife: 1, MinWeight: 3}} {
		if _, err := New(o); !errors.Is(err, ErrInvalid) {
			t.Errorf("options %+v: err = %v, want ErrInvalid", o, err)
		}
	}
}

// TestRoundTrip: a decoded predictor answers as the original (within the
// 4 digits weights are written with) and keeps its LRU order.
func TestRoundTrip(t *testing.T) {
	p := mustNew(t, Options{MaxKeys: 50, HalfLife: 20})
	rng := rand.New(rand.NewPCG(1, 2))
	var all [][]string
	for i := range 2000 {
		keys := []string{"q" + string(rune('a'+i%7)) + "/" + string(rune('a'+i%13)), "q" + string(rune('a'+i%7))}
		all = append(all, keys)
		p.Observe(keys, 1+rng.Int64N(100000))
	}
	data, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	q, err := Unmarshal(data)
	if err != nil {
		t.Fatal(err)
	}
	if q.Options() != p.Options() || q.Len() != p.Len() {
		t.Fatalf("options %+v len %d, want %+v len %d", q.Options(), q.Len(), p.Options(), p.Len())
	}
	for _, keys := range all[len(all)-50:] {
		a, _, _ := p.Predict(keys, 0.8)
		b, _, _ := q.Predict(keys, 0.8)
		if a.Key != b.Key || math.Abs(float64(a.Seconds-b.Seconds)) > 0.01*float64(a.Seconds)+1 {
			t.Fatalf("keys %v: %+v after the round trip, want %+v", keys, b, a)
		}
	}
	again, _ := q.Marshal()
	q2, _ := Unmarshal(again)
	again2, _ := q2.Marshal()
	if string(again) != string(again2) {
		t.Fatal("re-encoding is not stable")
	}
}

func TestUnmarshalRejects(t *testing.T) {
	ok := `{"version":1,"maxKeys":4,"halfLife":10,"minWeight":2,"keys":[{"key":"a","buckets":[[3,1],[5,0.5]]}]}`
	if _, err := Unmarshal([]byte(ok)); err != nil {
		t.Fatalf("valid encoding: %v", err)
	}
	for name, in := range map[string]string{
		"not json":       `{`,
		"trailing":       ok + `{}`,
		"unknown field":  strings.Replace(ok, `"version":1`, `"version":1,"x":1`, 1),
		"version":        strings.Replace(ok, `"version":1`, `"version":2`, 1),
		"no options":     `{"version":1,"keys":[]}`,
		"bad half-life":  strings.Replace(ok, `"halfLife":10`, `"halfLife":-1`, 1),
		"duplicate key":  strings.Replace(ok, `]]}]}`, `]]},{"key":"a","buckets":[[1,1]]}]}`, 1),
		"too many keys":  `{"version":1,"maxKeys":1,"halfLife":10,"minWeight":2,"keys":[{"key":"a","buckets":[[3,1]]},{"key":"b","buckets":[[3,1]]}]}`,
		"empty key":      strings.Replace(ok, `"key":"a"`, `"key":""`, 1),
		"bucket range":   strings.Replace(ok, `[5,0.5]`, `[500,0.5]`, 1),
		"bucket order":   strings.Replace(ok, `[[3,1],[5,0.5]]`, `[[5,1],[3,0.5]]`, 1),
		"bucket frac":    strings.Replace(ok, `[5,0.5]`, `[4.5,0.5]`, 1),
		"zero weight":    strings.Replace(ok, `[5,0.5]`, `[5,0]`, 1),
		"huge weight":    strings.Replace(ok, `[5,0.5]`, `[5,1e9]`, 1),
		"no buckets":     strings.Replace(ok, `[[3,1],[5,0.5]]`, `[]`, 1),
		"oversized":      `{"version":1,"keys":[` + strings.Repeat(" ", MaxEncodedBytes) + `]}`,
		"negative index": strings.Replace(ok, `[3,1]`, `[-1,1]`, 1),
	} {
		if _, err := Unmarshal([]byte(in)); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
}

func TestMarshalRefusesOverLimit(t *testing.T) {
	p := mustNew(t, Options{MaxKeys: MaxMaxKeys, MinWeight: 1})
	k := strings.Repeat("k", 100)
	for i := range 20000 {
		p.Observe([]string{k + string(rune(0x4e00+i))}, int64(1+i))
	}
	if _, err := p.Marshal(); err == nil || !strings.Contains(err.Error(), "lower the key limit") {
		t.Fatalf("err = %v, want the size refused", err)
	}
}

func FuzzUnmarshal(f *testing.F) {
	f.Add([]byte(`{"version":1,"maxKeys":4,"halfLife":10,"minWeight":2,"keys":[{"key":"a","buckets":[[3,1],[5,0.5]]}]}`))
	f.Add([]byte(`{"version":1,"maxKeys":1,"halfLife":1,"minWeight":1,"keys":[]}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Unmarshal(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not match ErrInvalid", err)
			}
			return
		}
		if p.Len() > p.Options().MaxKeys {
			t.Fatalf("%d keys over max %d", p.Len(), p.Options().MaxKeys)
		}
		enc, err := p.Marshal()
		if err != nil {
			t.Fatalf("re-marshal: %v", err)
		}
		q, err := Unmarshal(enc)
		if err != nil {
			t.Fatalf("decode of own encoding: %v", err)
		}
		enc2, _ := q.Marshal()
		if string(enc) != string(enc2) {
			t.Fatal("encoding not stable")
		}
		keys := slices.Collect(func(yield func(string) bool) {
			for el := p.lru.Front(); el != nil; el = el.Next() {
				if !yield(el.Value.(*entry).key) {
					return
				}
			}
		})
		for _, k := range keys {
			got, ok, err := p.Predict([]string{k}, 0.8)
			if err != nil || (ok && (got.Seconds < 1 || got.Seconds > MaxSeconds)) {
				t.Fatalf("predict %q: %+v %v %v", k, got, ok, err)
			}
			p.Observe([]string{k}, 60)
		}
	})
}

func TestWithOptions(t *testing.T) {
	p, err := New(Options{MaxKeys: 3, MinWeight: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b", "c"} {
		if err := p.Observe([]string{k}, 100); err != nil {
			t.Fatal(err)
		}
	}
	// b used last: with room for two keys, b and c stay, a goes.
	if _, ok, _ := p.Predict([]string{"b"}, 0.5); !ok {
		t.Fatal("b unknown")
	}
	q, err := p.WithOptions(Options{MaxKeys: 2, MinWeight: 2})
	if err != nil {
		t.Fatal(err)
	}
	if q.Len() != 2 || q.Options().MinWeight != 2 {
		t.Fatalf("copy has %d keys, options %+v; want 2 keys, min weight 2", q.Len(), q.Options())
	}
	if _, ok, _ := q.Predict([]string{"b"}, 0.5); ok {
		t.Fatal("b answers with one job under min weight 2")
	}
	if err := q.Observe([]string{"b"}, 100); err != nil {
		t.Fatal(err)
	}
	pr, ok, _ := q.Predict([]string{"a", "b"}, 0.5)
	if !ok || pr.Key != "b" || pr.Seconds < 90 || pr.Seconds > 110 {
		t.Fatalf("after a second job of b: %+v %v, want b's runtime ~100 s", pr, ok)
	}
	if err := q.Observe([]string{"d"}, 5); err != nil { // evicts the least recently used: c
		t.Fatal(err)
	}
	data, err := q.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), `"key":"c"`) || strings.Contains(string(data), `"key":"a"`) {
		t.Fatalf("evicted keys kept: %s", data)
	}
	if p.Len() != 3 {
		t.Fatalf("the original changed: %d keys", p.Len())
	}
	if _, err := p.WithOptions(Options{MaxKeys: -1}); err == nil {
		t.Fatal("bad options accepted")
	}
}

// TestWithOptionsShorterHalfLife: weights learned under a long half-life
// are scaled to a shorter one's limit, so that the copy encodes to data
// Unmarshal accepts, with the same quantiles.
func TestWithOptionsShorterHalfLife(t *testing.T) {
	p := mustNew(t, Options{HalfLife: 1000})
	for i := range 500 {
		if err := p.Observe([]string{"k"}, int64(100+i%2*900)); err != nil {
			t.Fatal(err)
		}
	}
	before, _, _ := p.Predict([]string{"k"}, 0.5)
	q, err := p.WithOptions(Options{HalfLife: 10})
	if err != nil {
		t.Fatal(err)
	}
	data, err := q.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	r, err := Unmarshal(data)
	if err != nil {
		t.Fatalf("the copy under a shorter half-life does not read back: %v", err)
	}
	after, _, _ := r.Predict([]string{"k"}, 0.5)
	if after.Seconds != before.Seconds || after.Weight > 16 {
		t.Fatalf("median %d s weight %v after, %d s weight %v before", after.Seconds, after.Weight, before.Seconds, before.Weight)
	}
}
