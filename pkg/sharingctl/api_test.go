package sharingctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/timeslice"
	gpuusage "github.com/gpud/gpud/pkg/usage"
)

func sharingInventory() gpu.Inventory {
	return gpu.Inventory{GPUs: []gpu.GPU{
		{Index: 0, UUID: "GPU-a", MemoryBytes: 40 << 30},
		{Index: 1, UUID: "GPU-b", MemoryBytes: 40 << 30},
	}}
}

// fakeAllocations is the kubelet's answer: as, or err.
type fakeAllocations struct {
	as  []gpuusage.Assignment
	err error
}

func (f fakeAllocations) Allocations(context.Context) ([]gpuusage.Assignment, error) {
	return f.as, f.err
}

func sharingMux(allocs timeslice.AllocationLister) *http.ServeMux {
	rt := timeslice.NewRuntime(timeslice.RuntimeConfig{Inventory: sharingInventory, Allocations: allocs})
	mux := http.NewServeMux()
	API{Runtime: rt}.Routes(mux)
	return mux
}

func put(mux *http.ServeMux, body string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("PUT", "/v1/sharing", strings.NewReader(body)))
	return rec
}

// TestSharingPutRefusesWhatThisNodeLacks: PUT /v1/sharing answers 400
// naming the key for devices this node does not have and shares that do
// not fit, never 200 {"changed":true}.
func TestSharingPutRefusesWhatThisNodeLacks(t *testing.T) {
	invented := func(n int) string {
		many := map[string]any{}
		for i := range n {
			many[fmt.Sprintf("GPU-%d", i)] = map[string]int{"replicas": 2}
		}
		b, _ := json.Marshal(map[string]any{"devices": many})
		return string(b)
	}
	tests := []struct {
		name, body string
		want       []string
	}{
		{name: "unknown index", body: `{"devices":{"99":{"replicas":2}}}`, want: []string{`"99"`}},
		{name: "negative index", body: `{"devices":{"-1":{"replicas":2}}}`, want: []string{`"-1"`}},
		{name: "unknown uuid", body: `{"devices":{"GPU-zzz":{"replicas":2}}}`, want: []string{`"GPU-zzz"`}},
		{name: "2000 invented keys", body: invented(2000), want: []string{"2000 device keys"}},
		{name: "100000 invented keys", body: invented(100000), want: []string{"request body over"}},
		{name: "memory sum overflows", body: `{"devices":{"GPU-a":{"shares":[{"memoryMiB":18446744073709551615},{"memoryMiB":2}]}}}`, want: []string{"GPU-a"}},
		{name: "shares larger than the GPU", body: `{"devices":{"0":{"shares":[{"memoryMiB":40000},{"memoryMiB":2000}]}}}`, want: []string{`"0"`, "MiB"}},
		{name: "absurd default", body: `{"default":{"shares":[{"memoryMiB":999999999}]}}`, want: []string{"default"}},
		{name: "unknown field", body: `{"devices":{"0":{"replica":2}}}`, want: []string{"replica"}},
		{name: "not a config", body: "\x00\x01\x02", want: []string{"invalid"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := put(sharingMux(nil), tc.body)
			if rec.Code != http.StatusBadRequest {
				t.Fatalf("PUT %.80q = %d %s, want 400", tc.body, rec.Code, rec.Body.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(rec.Body.String(), strings.ReplaceAll(w, `"`, `\"`)) && !strings.Contains(rec.Body.String(), w) {
					t.Errorf("answer %s lacks %s", rec.Body.String(), w)
				}
			}
		})
	}
}

func TestSharingPutChangesAndRefuses(t *testing.T) {
	mux := sharingMux(fakeAllocations{})
	changed := func(rec *httptest.ResponseRecorder) bool {
		t.Helper()
		var got map[string]bool
		if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &got) != nil {
			t.Fatalf("PUT = %d %s, want 200", rec.Code, rec.Body.String())
		}
		return got["changed"]
	}
	if !changed(put(mux, `{"devices":{"GPU-a":{"replicas":4}}}`)) {
		t.Fatal("a new config did not change anything")
	}
	// YAML bodies go through the same parser.
	if changed(put(mux, "devices:\n  GPU-a:\n    replicas: 4\n")) {
		t.Fatal("the same config as YAML changed something")
	}
	held := sharingMux(fakeAllocations{as: []gpuusage.Assignment{{Namespace: "ml", Pod: "p", DeviceIDs: []string{"GPU-a::3"}}}})
	if rec := put(held, `{"devices":{"GPU-a":{"replicas":4}}}`); rec.Code != http.StatusOK {
		t.Fatalf("setup = %d %s", rec.Code, rec.Body.String())
	}
	if rec := put(held, `{"devices":{"GPU-a":{"replicas":2}}}`); rec.Code != http.StatusConflict || !strings.Contains(rec.Body.String(), "ml/p") {
		t.Fatalf("taking away an allocated replica = %d %s, want 409 naming ml/p", rec.Code, rec.Body.String())
	}
	dead := sharingMux(fakeAllocations{err: errors.New("kubelet does not answer")})
	if rec := put(dead, `{"devices":{"GPU-a":{"replicas":4}}}`); rec.Code != http.StatusConflict || !strings.Contains(rec.Body.String(), "try again") {
		t.Fatalf("PUT while the kubelet does not answer = %d %s, want 409", rec.Code, rec.Body.String())
	}
}

// FuzzSharingPut feeds PUT /v1/sharing bodies: never a panic or a 500,
// and a 200 only for a config valid on this node.
func FuzzSharingPut(f *testing.F) {
	for _, s := range []string{
		`{"devices":{"99":{"replicas":2}}}`,
		`{"devices":{"-1":{"replicas":2}}}`,
		`{"devices":{"GPU-a":{"shares":[{"memoryMiB":18446744073709551615},{"memoryMiB":2}]}}}`,
		`{"default":{"replicas":999999999}}`,
		`{"default":{"shares":[{"memoryMiB":999999999}]}}`,
		`{"devices":{"0":{"replicas":4,"limitMemory":true}}}`,
		"devices:\n  GPU-b:\n    shares: [{memoryMiB: 1024, computePercent: 50}]\n",
		"\x00\xff",
		`[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		mux := sharingMux(nil)
		rec := put(mux, string(body))
		switch rec.Code {
		case http.StatusOK:
			get := httptest.NewRecorder()
			mux.ServeHTTP(get, httptest.NewRequest("GET", "/v1/sharing", nil))
			var cfg timeslice.Config
			if err := json.Unmarshal(get.Body.Bytes(), &cfg); err != nil {
				t.Fatalf("GET after PUT %q: %v", body, err)
			}
			if err := cfg.ValidateFor(sharingInventory()); err != nil {
				t.Fatalf("PUT %q accepted a config invalid on this node: %v", body, err)
			}
		case http.StatusBadRequest:
		default:
			t.Fatalf("PUT %q = %d %s", body, rec.Code, rec.Body.String())
		}
	})
}
