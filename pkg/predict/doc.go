// Package predict learns job runtimes from completed jobs, for a scheduler
// whose users give no runtime estimate.
//
// A [Predictor] keeps, per key, a decayed histogram of the runtimes of the
// jobs that finished under that key (log-spaced buckets, 20 % wide, so a
// quantile is off by at most about 10 % of itself). The caller describes a
// job by a short list of keys from the most specific (queue, owner and exact
// request) to the coarsest (queue alone, or the whole cluster); [Predictor.Observe]
// records a finished job under each of them and [Predictor.Predict] answers
// from the most specific key that has seen enough jobs. Older runtimes
// count less: each new observation of a key halves the weight of those
// HalfLife observations before it.
//
// Memory is bounded: at most MaxKeys keys, the least recently used evicted
// first. [Predictor.Marshal] and [Unmarshal] give a compact JSON form that
// fits a ConfigMap, so a scheduler can persist what it learned; Unmarshal
// validates every field and rejects anything else.
//
// The package is pure: no I/O, clock, goroutines or logging; it imports only
// the standard library. A Predictor is not safe for concurrent use.
package predict
