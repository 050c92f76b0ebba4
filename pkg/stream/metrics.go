package stream

import "github.com/prometheus/client_golang/prometheus"

// clientMetrics are the agent's gpud_stream_* metrics.
type clientMetrics struct {
	samplesDropped, eventsMerged, reconnects prometheus.Counter
	connected                                prometheus.Gauge
	sent                                     *prometheus.CounterVec
}

func newClientMetrics() *clientMetrics {
	return &clientMetrics{
		samplesDropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "gpud_stream_samples_dropped_total",
			Help: "Telemetry samples dropped (oldest first) because the scheduler was slow or unreachable."}),
		eventsMerged: prometheus.NewCounter(prometheus.CounterOpts{Name: "gpud_stream_events_merged_total",
			Help: "Events merged into a newer one of the same kind and device because the event queue was full (none is dropped)."}),
		reconnects: prometheus.NewCounter(prometheus.CounterOpts{Name: "gpud_stream_reconnects_total",
			Help: "Telemetry stream connections that failed or ended and were retried."}),
		connected: prometheus.NewGauge(prometheus.GaugeOpts{Name: "gpud_stream_connected",
			Help: "1 while the telemetry stream to the scheduler is open."}),
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpud_stream_messages_sent_total",
			Help: "Telemetry stream messages sent, by kind (hello, samples, event)."}, []string{"kind"}),
	}
}

var queuedDesc = prometheus.NewDesc("gpud_stream_queued", "Telemetry stream messages waiting to be sent, by kind (samples, events).", []string{"kind"}, nil)

// queueCollector reports the queue's length at scrape time.
type queueCollector struct{ q *queue }

func (c queueCollector) Describe(ch chan<- *prometheus.Desc) { ch <- queuedDesc }
func (c queueCollector) Collect(ch chan<- prometheus.Metric) {
	s, e := c.q.lens()
	ch <- prometheus.MustNewConstMetric(queuedDesc, prometheus.GaugeValue, float64(s), "samples")
	ch <- prometheus.MustNewConstMetric(queuedDesc, prometheus.GaugeValue, float64(e), "events")
}

func (m *clientMetrics) collectors(q *queue) []prometheus.Collector {
	return []prometheus.Collector{m.samplesDropped, m.eventsMerged, m.reconnects, m.connected, m.sent, queueCollector{q}}
}

// serverMetrics are the scheduler's gpud_scheduler_telemetry_* metrics.
type serverMetrics struct {
	s       *Server
	refused *prometheus.CounterVec
	events  *prometheus.CounterVec
}

var (
	streamsDesc = prometheus.NewDesc("gpud_scheduler_telemetry_streams", "Agents with an open telemetry stream to this scheduler replica.", nil, nil)
	ageDesc     = prometheus.NewDesc("gpud_scheduler_telemetry_age_seconds", "Age of the newest telemetry sample or event per node with an open stream.", []string{"node"}, nil)
)

func newServerMetrics(s *Server) *serverMetrics {
	return &serverMetrics{s: s,
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpud_scheduler_telemetry_refused_total",
			Help: "Telemetry connections and streams refused or ended by the scheduler, by reason: in the TLS handshake (tls-no-client-certificate, tls-unknown-ca, tls-certificate-expired, tls-certificate-invalid, tls-handshake), node identity (token-missing, token-invalid, token-wrong-service-account, token-node-mismatch, token-review-failed), and not-leader, no-client-certificate, invalid, no-hello, too-many-streams."}, []string{"reason"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpud_scheduler_telemetry_events_total",
			Help: "Telemetry events received, by kind."}, []string{"kind"}),
	}
}

// Collectors are the server's metrics, for the scheduler's registry,
// with the Authenticator's when it has any (a Collectors method).
func (s *Server) Collectors() []prometheus.Collector {
	cs := []prometheus.Collector{serverCollector{s}, s.m.refused, s.m.events}
	if a, ok := s.cfg.Authenticate.(interface{ Collectors() []prometheus.Collector }); ok {
		cs = append(cs, a.Collectors()...)
	}
	return cs
}

type serverCollector struct{ s *Server }

func (c serverCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- streamsDesc
	ch <- ageDesc
}

func (c serverCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(streamsDesc, prometheus.GaugeValue, float64(c.s.Streams()))
	for node, age := range c.s.ages(c.s.cfg.Now()) {
		ch <- prometheus.MustNewConstMetric(ageDesc, prometheus.GaugeValue, max(age.Seconds(), 0), node)
	}
}
