// Package learn learns the runtimes of gpud scheduler's pods, so that
// backfill and reservations know when a running pod ends even when its user
// gave no gpud.io/runtime-estimate.
//
// A [Learner] hears every pod update (its [Learner.Handler] on the
// scheduler's pod informer). While it runs ([Learner.Run], only on the
// leader), each of the scheduler's pods that succeeds teaches pkg/predict
// its runtime under three keys, most specific first:
//
//	ns=<namespace>|q=<queue>|owner=<kind>/<name prefix>|gpu=<request>|cpu=…|mem=…|img=…
//	ns=<namespace>|q=<queue>|owner=<kind>/<name prefix>|gpu=<request>
//	ns=<namespace>|q=<queue>
//
// [Learner.Estimate] answers with a conservative quantile (p90 by default)
// of the most specific key that has seen enough pods (5 by default), or 0.
// Only succeeded pods teach: a failed pod's runtime (a crash, an eviction,
// a deadline) says little about how long the work takes, and a too-short
// estimate is the costly mistake for backfill.
//
// What was learned lives in a ConfigMap, written at most every persist
// interval and once more when Run ends, and read when Run starts, so a new
// leader starts where the old one stopped. Corrupt or oversized data is
// logged, counted and replaced: the learner starts empty and never fails
// because of it.
package learn
