package migctl

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpud/gpud/pkg/nodelabels"
)

// MIG apply sources (the source label of gpud_mig_apply_total): the
// agent's configured layout (--mig-config, at start and on change) or the
// admin API (`gpud mig apply` against the agent).
const (
	SourceConfig = "config"
	SourceAPI    = "api"
)

// MIG apply results (the result label): success, pending (applied except
// GPUs that wait for a reset to change MIG mode) or failure.
const (
	ResultSuccess = "success"
	ResultPending = "pending"
	ResultFailure = "failure"
)

// Metrics are the MIG controller's metrics on the agent's registry. A nil
// *Metrics records nothing.
type Metrics struct {
	applies *prometheus.CounterVec
	state   *prometheus.GaugeVec
}

// NewMetrics registers gpud_mig_apply_total and gpud_mig_config_state on
// reg. Every source and result starts at 0, so the first failure is an
// increase that alerts can see.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		applies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpud_mig_apply_total",
			Help: "MIG layout applies by source (config: the agent's --mig-config; api: the admin API) and result (success; pending: GPUs wait for a reset to change MIG mode; failure: not applied, or rolled back).",
		}, []string{"source", "result"}),
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpud_mig_config_state",
			Help: "1 for the state of the configured MIG layout (--mig-config), as GPU Feature Discovery's nvidia.com/mig.config.state label has it (pending, success, failed), 0 for the others; no series without a configured layout.",
		}, []string{"state"}),
	}
	for _, s := range []string{SourceConfig, SourceAPI} {
		for _, r := range []string{ResultSuccess, ResultPending, ResultFailure} {
			m.applies.WithLabelValues(s, r)
		}
	}
	for _, c := range []prometheus.Collector{m.applies, m.state} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("mig: register metrics: %w", err)
		}
	}
	return m, nil
}

// observeApply counts one apply from source: failed when err is set, else
// pending when GPUs wait for a reset, else a success.
func (m *Metrics) observeApply(source string, pending int, err error) {
	if m == nil {
		return
	}
	r := ResultSuccess
	switch {
	case err != nil:
		r = ResultFailure
	case pending > 0:
		r = ResultPending
	}
	m.applies.WithLabelValues(source, r).Inc()
}

// setState makes state the configured layout's one state at 1.
func (m *Metrics) setState(state string) {
	if m == nil {
		return
	}
	for _, s := range []string{nodelabels.StatePending, nodelabels.StateSuccess, nodelabels.StateFailed} {
		v := 0.0
		if s == state {
			v = 1
		}
		m.state.WithLabelValues(s).Set(v)
	}
}
