package migctl

import (
	"errors"
	"net/http"

	"github.com/gpud/gpud/pkg/adminapi"
	"github.com/gpud/gpud/pkg/mig"
)

// Request is the body of POST /v1/mig/plan and /v1/mig/apply.
type Request struct {
	// Layouts is the layout file's content; Config names the layout.
	Layouts string `json:"layouts"`
	Config  string `json:"config"`
	Force   bool   `json:"force"`
}

// API serves the MIG routes of the admin API: GET /v1/mig/state (a
// [mig.State]), POST /v1/mig/plan and /v1/mig/apply (a [Request], answered
// with a [mig.Result]). Errors are [adminapi.WriteError] answers whose
// code names the refusal (busy, no_fit, bad_layout, interrupted, ...).
type API struct {
	// Service plans and applies. Required.
	Service *mig.Service
	// Metrics count the applies; nil records nothing.
	Metrics *Metrics
}

// Routes adds the MIG routes to mux.
func (a API) Routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/mig/state", func(w http.ResponseWriter, _ *http.Request) {
		st, err := a.Service.State()
		if err != nil {
			adminapi.WriteError(w, http.StatusInternalServerError, "nvml", err)
			return
		}
		adminapi.WriteJSON(w, http.StatusOK, st)
	})
	mux.HandleFunc("POST /v1/mig/plan", a.handle(false))
	mux.HandleFunc("POST /v1/mig/apply", a.handle(true))
}

func (a API) handle(apply bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req Request
		if err := adminapi.ReadJSON(r, &req); err != nil {
			adminapi.WriteError(w, http.StatusBadRequest, "bad_request", err)
			return
		}
		f, err := mig.ParseLayoutFile([]byte(req.Layouts))
		if err != nil {
			adminapi.WriteError(w, http.StatusBadRequest, "bad_layout", err)
			return
		}
		run := a.Service.Plan
		if apply {
			run = a.Service.Apply
		}
		res, err := run(r.Context(), f, req.Config, req.Force)
		if apply {
			a.Metrics.observeApply(SourceAPI, len(res.Pending), err)
		}
		if err != nil {
			status, code := errorStatus(err)
			adminapi.WriteError(w, status, code, err)
			return
		}
		adminapi.WriteJSON(w, http.StatusOK, res)
	}
}

// errorStatus maps a plan or apply error to its HTTP status and the
// answer's code.
func errorStatus(err error) (int, string) {
	switch {
	case errors.Is(err, mig.ErrBusy):
		return http.StatusConflict, "busy"
	case errors.Is(err, mig.ErrBusyUnknown):
		return http.StatusServiceUnavailable, "busy_unknown"
	case errors.Is(err, mig.ErrNoFit):
		return http.StatusConflict, "no_fit"
	case errors.Is(err, mig.ErrBadLayout), errors.Is(err, mig.ErrUnknownProfile):
		return http.StatusBadRequest, "bad_layout"
	case errors.Is(err, mig.ErrRolledBack):
		return http.StatusInternalServerError, "rolled_back"
	case errors.Is(err, mig.ErrJournalKept):
		return http.StatusInternalServerError, "journal_kept"
	case errors.Is(err, mig.ErrInterrupted):
		return http.StatusConflict, "interrupted"
	}
	return http.StatusInternalServerError, "failed"
}
