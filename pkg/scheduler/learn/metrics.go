package learn

import "github.com/prometheus/client_golang/prometheus"

// bookMetrics are the metrics every learner has, named
// gpud_scheduler_<subject>_...: its prediction error, its keys and
// observations, and its ConfigMap's reads and writes.
type bookMetrics struct {
	errRatio     prometheus.Histogram
	keys         prometheus.Gauge
	observations prometheus.Counter
	failures     *prometheus.CounterVec
	lastSave     prometheus.Gauge
}

// metricHelp is what a learner's metrics say of it: errRatio, keys and
// observations are their help texts, state names the learned state in
// the ConfigMap metrics' ("learned runtimes'").
type metricHelp struct {
	errRatio, keys, observations, state string
}

// newBookMetrics returns the metrics of the learner of subject ("runtime",
// "usage").
func newBookMetrics(subject string, h metricHelp) bookMetrics {
	prefix := "gpud_scheduler_" + subject + "_"
	m := bookMetrics{
		errRatio: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    prefix + "prediction_error_ratio",
			Help:    h.errRatio,
			Buckets: []float64{0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 2, 5, 10},
		}),
		keys: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: prefix + "predictor_keys",
			Help: h.keys,
		}),
		observations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: prefix + "observations_total",
			Help: h.observations,
		}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: prefix + "persist_failures_total",
			Help: "Reads (op=load: failed, or corrupt data replaced) and writes (op=save) of the " + h.state + " ConfigMap that failed.",
		}, []string{"op"}),
		lastSave: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: prefix + "last_persist_timestamp_seconds",
			Help: "When the " + h.state + " ConfigMap was last written (unix seconds; 0: not by this process).",
		}),
	}
	m.failures.WithLabelValues("load")
	m.failures.WithLabelValues("save")
	return m
}

// collectors are m's collectors, for a learner's Collectors.
func (m *bookMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.errRatio, m.keys, m.observations, m.failures, m.lastSave}
}

// newRuntimeMetrics returns the runtime learner's metrics.
func newRuntimeMetrics() *bookMetrics {
	m := newBookMetrics("runtime", metricHelp{
		errRatio:     "|predicted - actual| / actual runtime of the scheduler's succeeded pods that had a learned prediction when they were bound.",
		keys:         "Keys (workload descriptions) the runtime predictor holds.",
		observations: "Runtimes of succeeded pods learned by the runtime predictor.",
		state:        "learned runtimes'",
	})
	return &m
}

// Collectors are the learner's metrics, for the scheduler's registry.
func (l *Learner) Collectors() []prometheus.Collector { return l.m.collectors() }
