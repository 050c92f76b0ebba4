package learn

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	errRatio     prometheus.Histogram
	keys         prometheus.Gauge
	observations prometheus.Counter
	failures     *prometheus.CounterVec
	lastSave     prometheus.Gauge
}

func newMetrics() *metrics {
	m := &metrics{
		errRatio: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "gpud_scheduler_runtime_prediction_error_ratio",
			Help:    "|predicted - actual| / actual runtime of the scheduler's succeeded pods that had a learned prediction when they were bound.",
			Buckets: []float64{0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 2, 5, 10},
		}),
		keys: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gpud_scheduler_runtime_predictor_keys",
			Help: "Keys (workload descriptions) the runtime predictor holds.",
		}),
		observations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpud_scheduler_runtime_observations_total",
			Help: "Runtimes of succeeded pods learned by the runtime predictor.",
		}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpud_scheduler_runtime_persist_failures_total",
			Help: "Reads (op=load: failed, or corrupt data replaced) and writes (op=save) of the learned runtimes' ConfigMap that failed.",
		}, []string{"op"}),
		lastSave: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gpud_scheduler_runtime_last_persist_timestamp_seconds",
			Help: "When the learned runtimes' ConfigMap was last written (unix seconds; 0: not by this process).",
		}),
	}
	m.failures.WithLabelValues("load")
	m.failures.WithLabelValues("save")
	return m
}

// Collectors are the learner's metrics, for the scheduler's registry.
func (l *Learner) Collectors() []prometheus.Collector {
	return []prometheus.Collector{l.m.errRatio, l.m.keys, l.m.observations, l.m.failures, l.m.lastSave}
}
