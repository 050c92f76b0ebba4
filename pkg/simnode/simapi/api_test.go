package simapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/pkg/adminapi"
	"github.com/gpud/gpud/pkg/simnode"
)

func post(t testing.TB, n *simnode.Node, body string) *httptest.ResponseRecorder {
	t.Helper()
	mux := http.NewServeMux()
	API{Node: n}.Routes(mux)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, XidRoute, strings.NewReader(body)))
	return rec
}

// xidEvents registers for Xid events on GPU index of n.
func xidEvents(t *testing.T, n *simnode.Node, index int) nvml.EventSet {
	t.Helper()
	set, ret := n.EventSetCreate()
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	dev, ret := n.DeviceGetHandleByIndex(index)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if ret := dev.RegisterEvents(nvml.EventTypeXidCriticalError, set); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	return set
}

// TestXidReachesTheDriverSide: an Xid posted for a GPU (by index or UUID)
// is delivered to NVML event sets as the driver's; Xid 79 also leaves the
// GPU lost.
func TestXidReachesTheDriverSide(t *testing.T) {
	for _, tc := range []struct {
		name     string
		gpu      func(n *simnode.Node) string
		xid      uint64
		wantLost bool
	}{
		{name: "xid 48 by index", gpu: func(*simnode.Node) string { return "2" }, xid: 48},
		{name: "xid 79 by uuid", gpu: func(n *simnode.Node) string { return n.Device(2).UUID() }, xid: 79, wantLost: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := simnode.NewBuiltin("dgx-h100")
			t.Cleanup(n.Close)
			set := xidEvents(t, n, 2)
			body, _ := json.Marshal(XidRequest{GPU: tc.gpu(n), Xid: tc.xid})
			rec := post(t, n, string(body))
			if rec.Code != http.StatusOK {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			var got XidResponse
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			want := XidResponse{UUID: n.Device(2).UUID(), Index: 2, Xid: tc.xid, Lost: tc.wantLost}
			if got != want {
				t.Errorf("response %+v, want %+v", got, want)
			}
			ev, ret := set.Wait(1000)
			if ret != nvml.SUCCESS || ev.EventType != nvml.EventTypeXidCriticalError || ev.EventData != tc.xid {
				t.Errorf("event %+v (%v), want Xid %d", ev, ret, tc.xid)
			}
			dev, _ := n.DeviceGetHandleByIndex(2)
			_, ret = dev.GetMemoryInfo()
			if lost := ret == nvml.ERROR_GPU_IS_LOST; lost != tc.wantLost {
				t.Errorf("GetMemoryInfo after Xid %d: %v, want lost %v", tc.xid, ret, tc.wantLost)
			}
			other, _ := n.DeviceGetHandleByIndex(3)
			if _, ret := other.GetMemoryInfo(); ret != nvml.SUCCESS {
				t.Errorf("GPU 3 after an Xid on GPU 2: %v", ret)
			}
		})
	}
}

// TestXidRefusals: a bad request changes nothing and says what is wrong.
func TestXidRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, body, code, msg string
		status                int
	}{
		{"no gpu", `{"xid":79}`, "invalid", "gpu is required", 400},
		{"xid 0", `{"gpu":"1","xid":0}`, "invalid", "xid 0: want 1 to 999", 400},
		{"xid too large", `{"gpu":"1","xid":1000}`, "invalid", "xid 1000", 400},
		{"negative xid", `{"gpu":"1","xid":-1}`, "bad_request", "xid", 400},
		{"unknown field", `{"gpu":"1","xid":79,"node":"x"}`, "bad_request", "unknown field", 400},
		{"index out of range", `{"gpu":"8","xid":79}`, "not_found", "index 8 (node has 8 GPUs)", 404},
		{"negative index", `{"gpu":"-1","xid":79}`, "not_found", "index -1", 404},
		{"unknown uuid", `{"gpu":"GPU-nope","xid":79}`, "not_found", `"GPU-nope"`, 404},
		{"gpu too long", `{"gpu":"` + strings.Repeat("a", 65) + `","xid":79}`, "invalid", "65 bytes", 400},
		{"not json", `xid 79`, "bad_request", "invalid JSON", 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := simnode.NewBuiltin("dgx-h100")
			t.Cleanup(n.Close)
			set := xidEvents(t, n, 1)
			rec := post(t, n, tc.body)
			var e adminapi.Error
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
				t.Fatalf("status %d, body %s: %v", rec.Code, rec.Body, err)
			}
			if rec.Code != tc.status || e.Code != tc.code || !strings.Contains(e.Message, tc.msg) {
				t.Errorf("status %d code %q message %q, want %d %q containing %q", rec.Code, e.Code, e.Message, tc.status, tc.code, tc.msg)
			}
			if ev, ret := set.Wait(10); ret == nvml.SUCCESS {
				t.Errorf("refused request delivered %+v", ev)
			}
			dev, _ := n.DeviceGetHandleByIndex(1)
			if _, ret := dev.GetMemoryInfo(); ret != nvml.SUCCESS {
				t.Errorf("GPU 1 after a refused request: %v", ret)
			}
		})
	}
}

// FuzzXidBody: any body gets 200, 400, 404 or 413 with a JSON answer,
// never a panic.
func FuzzXidBody(f *testing.F) {
	for _, s := range []string{`{"gpu":"3","xid":48}`, `{"gpu":"GPU-x","xid":79}`, `{"gpu":"99","xid":1}`, `{}`, `[`, `{"gpu":" 7 ","xid":999}`} {
		f.Add(s)
	}
	n := simnode.NewBuiltin("dgx-a100")
	f.Cleanup(n.Close)
	f.Fuzz(func(t *testing.T, body string) {
		rec := post(t, n, body)
		switch rec.Code {
		case 200, 400, 404, 413:
		default:
			t.Fatalf("status %d for %q", rec.Code, body)
		}
		var v map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
			t.Fatalf("answer %q to %q is not JSON: %v", rec.Body, body, err)
		}
	})
}
