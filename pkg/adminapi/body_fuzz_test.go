package adminapi

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

// FuzzDecodeJSON feeds request bodies to the decoder the agent's handlers
// use, with the shapes of its request types: it never panics, every error
// wraps ErrBadBody and is answered as a JSON 400 or 413.
func FuzzDecodeJSON(f *testing.F) {
	for _, tc := range badBodies {
		if len(tc.body) < 4096 {
			f.Add([]byte(tc.body))
		}
	}
	f.Add([]byte(`{"layouts": "version: v1", "config": "a", "force": true}`))
	f.Add([]byte(`{"default": {"replicas": 2}, "devices": {"GPU-a": {"shares": [{"memoryMiB": 18446744073709551615}]}}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, v := range []any{&migBody{}, &sharingBody{}, &map[string]any{}} {
			w := httptest.NewRecorder()
			r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
			err := DecodeJSON(w, r, v)
			if err == nil {
				continue
			}
			if !errors.Is(err, ErrBadBody) {
				t.Fatalf("error %v does not wrap ErrBadBody", err)
			}
			if w.Code != http.StatusBadRequest && w.Code != http.StatusRequestEntityTooLarge {
				t.Fatalf("status %d for %v", w.Code, err)
			}
		}
	})
}
