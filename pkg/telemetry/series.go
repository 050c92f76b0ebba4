package telemetry

import (
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// series is one exported sample. Its label pairs are built once per sweep
// (with the snapshot, off the scrape path) and shared read-only by every
// scrape of that snapshot; a scrape allocates its series in one slab, so
// a scrape costs a handful of allocations per series, most of them
// client_golang's own.
type series struct {
	desc    *prometheus.Desc
	labels  []*dto.LabelPair
	counter bool
	v       float64
	g       dto.Gauge
	c       dto.Counter
}

var _ prometheus.Metric = (*series)(nil)

// Desc implements prometheus.Metric.
func (s *series) Desc() *prometheus.Desc { return s.desc }

// Write implements prometheus.Metric; out shares the series' labels and
// value, which nobody mutates.
func (s *series) Write(out *dto.Metric) error {
	out.Label = s.labels
	if s.counter {
		s.c.Value = &s.v
		out.Counter = &s.c
		return nil
	}
	s.g.Value = &s.v
	out.Gauge = &s.g
	return nil
}

// slab hands out series from one allocation per scrape.
type slab struct {
	buf []series
	ch  chan<- prometheus.Metric
}

// send exports one series. The slab grows by reallocating, which leaves
// the series already sent where they are (they stay referenced).
func (b *slab) send(desc *prometheus.Desc, typ prometheus.ValueType, v float64, labels []*dto.LabelPair) {
	if len(b.buf) == cap(b.buf) {
		b.buf = make([]series, 0, max(64, 2*cap(b.buf)))
	}
	b.buf = append(b.buf, series{desc: desc, labels: labels, counter: typ == prometheus.CounterValue, v: v})
	b.ch <- &b.buf[len(b.buf)-1]
}

// labelPairs builds label pairs sorted by name, as client_golang expects.
func labelPairs(names []string, values ...string) []*dto.LabelPair {
	out := make([]*dto.LabelPair, len(names))
	pairs := make([]dto.LabelPair, len(names))
	for i := range names {
		pairs[i].Name, pairs[i].Value = &names[i], &values[i]
		out[i] = &pairs[i]
	}
	slices.SortFunc(out, func(a, b *dto.LabelPair) int { return strings.Compare(a.GetName(), b.GetName()) })
	return out
}
