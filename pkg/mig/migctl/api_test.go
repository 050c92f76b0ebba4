package migctl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gpud/gpud/pkg/mig"
	"github.com/gpud/gpud/pkg/simnode"
)

// apiRig is the MIG admin routes on a simulated node.
func apiRig(t testing.TB) *http.ServeMux {
	n := simnode.NewBuiltin("dgx-a100")
	mux := http.NewServeMux()
	API{Service: newService(t, n, "", false, nil)}.Routes(mux)
	return mux
}

func TestErrorStatus(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		status int
		code   string
	}{
		{"busy", fmt.Errorf("%w: destroy MIG-x", mig.ErrBusy), http.StatusConflict, "busy"},
		{"busy unknown", fmt.Errorf("%w: read the kubelet's allocations: %w", mig.ErrBusyUnknown, io.EOF), http.StatusServiceUnavailable, "busy_unknown"},
		{"no fit", mig.ErrNoFit, http.StatusConflict, "no_fit"},
		{"bad layout", mig.ErrBadLayout, http.StatusBadRequest, "bad_layout"},
		{"unknown profile", mig.ErrUnknownProfile, http.StatusBadRequest, "bad_layout"},
		{"rolled back, journal kept", errors.Join(mig.ErrRolledBack, mig.ErrJournalKept), http.StatusInternalServerError, "rolled_back"},
		{"journal kept", mig.ErrJournalKept, http.StatusInternalServerError, "journal_kept"},
		{"interrupted", mig.ErrInterrupted, http.StatusConflict, "interrupted"},
		{"other", io.EOF, http.StatusInternalServerError, "failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if status, code := errorStatus(tc.err); status != tc.status || code != tc.code {
				t.Errorf("errorStatus(%v) = %d %s, want %d %s", tc.err, status, code, tc.status, tc.code)
			}
		})
	}
}

// TestAPIState: GET /v1/mig/state answers the GPUs' MIG state.
func TestAPIState(t *testing.T) {
	mux := apiRig(t)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/mig/state", nil))
	var st mig.State
	if err := json.Unmarshal(rec.Body.Bytes(), &st); rec.Code != http.StatusOK || err != nil || len(st.GPUs) != 8 {
		t.Fatalf("GET /v1/mig/state = %d %s (decode: %v), want 200 and 8 GPUs", rec.Code, rec.Body.String(), err)
	}
}

// FuzzPlanRequest feeds POST /v1/mig/plan bodies: the agent never panics
// or fails with a 500 on a bad request, and every error is JSON without
// raw control bytes.
func FuzzPlanRequest(f *testing.F) {
	seeds := []string{
		`{"layouts":"version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"1g.5gb\": 1000000000}\n","config":"a"}`,
		`{"layouts":"version: v1\nmig-configs:\n  a:\n    - devices: [0]\n      mig-enabled: true\n      mig-devices: {\"1g.5gb\": 2.5}\n","config":"a"}`,
		`{"layouts":"` + strings.ReplaceAll(testLayouts, "\n", `\n`) + `","config":"two-3g"}`,
		`{"layouts":"","config":""}`,
		`{"layouts":"\u0000\u0001","config":"a","bogus":1}`,
		`not json`,
		`{"layouts": 5}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	mux := apiRig(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/mig/plan", bytes.NewReader(body)))
		if rec.Code == http.StatusInternalServerError {
			t.Fatalf("500 for %q: %s", body, rec.Body.String())
		}
		if rec.Code != http.StatusOK {
			var e struct {
				Error string `json:"error"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error == "" {
				t.Fatalf("error answer %q is not JSON with an error", rec.Body.String())
			}
		}
	})
}
