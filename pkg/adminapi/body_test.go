package adminapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gpud/gpud/internal/fileio"
)

// sharingBody and migBody have the shapes of the agent's request bodies
// (PUT /v1/sharing, POST /v1/mig/plan|apply).
type sharingBody struct {
	Default *struct {
		Replicas int `json:"replicas"`
	} `json:"default,omitempty"`
	Devices map[string]struct {
		Replicas int `json:"replicas,omitempty"`
		Shares   []struct {
			MemoryMiB      uint64 `json:"memoryMiB,omitempty"`
			ComputePercent int    `json:"computePercent,omitempty"`
		} `json:"shares,omitempty"`
	} `json:"devices,omitempty"`
}

type migBody struct {
	Layouts string `json:"layouts"`
	Config  string `json:"config"`
	Force   bool   `json:"force"`
}

// badBodies are request bodies the decoders must refuse, with the status
// DecodeJSON answers and what the message must say. They also seed
// FuzzDecodeJSON.
var badBodies = []struct {
	name   string
	body   string
	status int
	errHas []string
}{
	{name: "empty", body: "", status: 400, errHas: []string{"empty body"}},
	{name: "unknown field", body: `{"config": "a", "bogus": 1}`, status: 400, errHas: []string{`unknown field "bogus"`, "byte"}},
	{name: "trailing object", body: `{"config": "a"} {"config": "b"}`, status: 400, errHas: []string{"after the JSON value", "byte 16"}},
	{name: "trailing garbage", body: `{"config": "a"}xyz`, status: 400, errHas: []string{"invalid JSON", "byte"}},
	{name: "syntax", body: `{"config": }`, status: 400, errHas: []string{"invalid JSON at byte 12"}},
	{name: "truncated", body: `{"config": "a"`, status: 400, errHas: []string{"ends early"}},
	{name: "wrong type", body: `{"force": "yes"}`, status: 400, errHas: []string{"force", "got a JSON string", "true or false"}},
	{name: "not an object", body: `[1, 2]`, status: 400, errHas: []string{"got a JSON array", "an object"}},
	{name: "binary", body: "\x7fELF\x02\x01\x01\x00", status: 400, errHas: []string{"invalid JSON at byte 1"}},
	{name: "too large", body: `{"layouts": "` + strings.Repeat("a", fileio.MaxBodyBytes) + `"}`, status: 413, errHas: []string{"larger than 1048576 bytes"}},
}

func TestDecodeJSONRefuses(t *testing.T) {
	for _, tc := range badBodies {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			r := httptest.NewRequest(http.MethodPost, "/v1/mig/plan", strings.NewReader(tc.body))
			var v migBody
			err := DecodeJSON(w, r, &v)
			if !errors.Is(err, ErrBadBody) {
				t.Fatalf("DecodeJSON = %v, want ErrBadBody", err)
			}
			if w.Code != tc.status {
				t.Errorf("status %d, want %d", w.Code, tc.status)
			}
			var e Error
			if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Status != tc.status || e.Message == "" {
				t.Fatalf("response %q is not a JSON error: %v", w.Body.String(), err)
			}
			for _, s := range tc.errHas {
				if !strings.Contains(e.Message, s) {
					t.Errorf("message %q does not say %q", e.Message, s)
				}
			}
			if strings.ContainsAny(e.Message, "\x00\x7f") {
				t.Errorf("message echoes binary: %q", e.Message)
			}
		})
	}
}

func TestReadJSONAccepts(t *testing.T) {
	r := httptest.NewRequest(http.MethodPut, "/v1/sharing", strings.NewReader(`{"devices": {"0": {"replicas": 4}}}`+"\n\n"))
	var v sharingBody
	if err := ReadJSON(r, &v); err != nil || v.Devices["0"].Replicas != 4 {
		t.Fatalf("ReadJSON = %+v, %v", v, err)
	}
}
