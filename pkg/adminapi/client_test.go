package adminapi

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// rawAgent accepts connections on path and runs f on each, for agents that
// misbehave below HTTP.
func rawAgent(t *testing.T, path string, f func(c net.Conn)) {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f(c)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
	})
}

func TestClientAgentClosesMidRequest(t *testing.T) {
	path := filepath.Join(shortDir(t), "admin.sock")
	rawAgent(t, path, func(c net.Conn) {
		// Read the request, then die without answering.
		_, _ = http.ReadRequest(bufio.NewReader(c))
		_ = c.Close()
	})
	err := NewClient(path, 10*time.Second).Call(t.Context(), "POST", "/v1/mig/apply", map[string]string{"config": "a"}, nil)
	var closed *AgentClosedError
	if !errors.As(err, &closed) || !errors.Is(err, ErrAgentClosed) || errors.Is(err, ErrNoAgent) {
		t.Fatalf("Call = %v, want *AgentClosedError (not ErrNoAgent)", err)
	}
	if !errors.Is(err, io.EOF) {
		t.Errorf("error %v lost the transport cause", err)
	}
	for _, s := range []string{path, "closed the connection before answering", "agent's log", "may or may not have been applied"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
}

func TestClientNoAgent(t *testing.T) {
	dir := shortDir(t)
	missing := filepath.Join(dir, "missing.sock")
	if err := NewClient(missing, time.Second).Call(t.Context(), "GET", "/x", nil, nil); !errors.Is(err, ErrNoAgent) || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing socket: %v, want ErrNoAgent naming it", err)
	}
	stale := filepath.Join(dir, "stale.sock")
	staleSocket(t, stale)
	if err := NewClient(stale, time.Second).Call(t.Context(), "GET", "/x", nil, nil); !errors.Is(err, ErrNoAgent) {
		t.Errorf("stale socket: %v, want ErrNoAgent", err)
	}
}

func TestClientQuotesBinaryAnswers(t *testing.T) {
	binary := append([]byte("\x7fELF\x02\x01\x01\x00\x1b[31m"), make([]byte, 5000)...)
	tests := []struct {
		name   string
		answer func(w http.ResponseWriter)
		out    any
	}{
		{name: "binary error body", answer: func(w http.ResponseWriter) { w.WriteHeader(http.StatusInternalServerError); _, _ = w.Write(binary) }},
		{name: "binary JSON error message", answer: func(w http.ResponseWriter) {
			WriteError(w, http.StatusBadRequest, "bad_layout", errors.New(string(binary)))
		}},
		{name: "binary success body", answer: func(w http.ResponseWriter) { _, _ = w.Write(binary) }, out: &map[string]any{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(shortDir(t), "admin.sock")
			mux := http.NewServeMux()
			mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { tc.answer(w) })
			serve(t, path, mux)
			err := NewClient(path, 10*time.Second).Call(t.Context(), "GET", "/x", nil, tc.out)
			if err == nil {
				t.Fatal("Call succeeded")
			}
			msg := err.Error()
			if strings.ContainsAny(msg, "\x00\x1b\x7f") || len(msg) > 600 {
				t.Fatalf("error echoes the binary answer (%d bytes): %q", len(msg), msg)
			}
			if !strings.Contains(msg, `\x7fELF`) {
				t.Errorf("error %q does not quote the start of the answer", msg)
			}
		})
	}
}

func TestExcerpt(t *testing.T) {
	if got := Excerpt([]byte("  short \n")); got != `"short"` {
		t.Errorf("Excerpt(short) = %s", got)
	}
	long := Excerpt([]byte(strings.Repeat("a", 1000)))
	if !strings.HasSuffix(long, "... (1000 bytes)") || len(long) > 230 {
		t.Errorf("Excerpt(1000 bytes) = %s", long)
	}
}
