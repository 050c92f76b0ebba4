package sharingctl

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/gpud/gpud/internal/fileio"
	"github.com/gpud/gpud/pkg/adminapi"
	"github.com/gpud/gpud/pkg/sharingfile"
	"github.com/gpud/gpud/pkg/timeslice"
)

// API serves GET and PUT /v1/sharing on the admin socket.
type API struct{ Runtime *timeslice.Runtime }

// Routes adds the sharing routes to mux.
func (a API) Routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/sharing", func(w http.ResponseWriter, _ *http.Request) {
		adminapi.WriteJSON(w, http.StatusOK, a.Runtime.Sharing())
	})
	mux.HandleFunc("PUT /v1/sharing", a.put)
}

// put replaces the sharing config: 400 when the body is not a valid config
// for this node (naming the key), 409 when it would take away an allocated
// replica, 200 {"changed": bool} otherwise.
func (a API) put(w http.ResponseWriter, r *http.Request) {
	cfg, err := ParseBody(r.Body)
	if err != nil {
		adminapi.WriteError(w, http.StatusBadRequest, "invalid", err)
		return
	}
	changed, err := a.Runtime.Update(r.Context(), cfg)
	switch {
	case errors.Is(err, timeslice.ErrInvalid):
		adminapi.WriteError(w, http.StatusBadRequest, "invalid", err)
		return
	case err != nil:
		adminapi.WriteError(w, http.StatusConflict, "refused", err)
		return
	}
	adminapi.WriteJSON(w, http.StatusOK, map[string]bool{"changed": changed})
}

// ParseBody reads a PUT /v1/sharing body (JSON, or YAML; at most
// fileio.MaxBodyBytes) with the sharing file's strict parser.
func ParseBody(body io.Reader) (timeslice.Config, error) {
	data, err := io.ReadAll(io.LimitReader(body, fileio.MaxBodyBytes+1))
	if err != nil {
		return timeslice.Config{}, fmt.Errorf("read request body: %w", err)
	}
	if len(data) > fileio.MaxBodyBytes {
		return timeslice.Config{}, fmt.Errorf("%w: request body over %d bytes", timeslice.ErrInvalid, fileio.MaxBodyBytes)
	}
	return sharingfile.ParseConfig(data)
}
