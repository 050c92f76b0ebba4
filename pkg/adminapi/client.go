package adminapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"
)

// Client calls the admin API of the agent on one socket.
type Client struct {
	path    string
	timeout time.Duration
	hc      *http.Client
}

// maxResponseBytes bounds what the client reads of an answer.
const maxResponseBytes = 16 << 20

// NewClient returns a client for the socket at path. Calls time out after
// timeout (0: 2 minutes, a MIG apply on 8 GPUs can take a while).
func NewClient(path string, timeout time.Duration) *Client {
	if timeout == 0 {
		timeout = 2 * time.Minute
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, "unix", path)
			if err != nil {
				return nil, &dialError{err: err}
			}
			return c, nil
		},
		// One connection per call: a kept-alive connection the agent
		// closed meanwhile would look like an agent that hung up.
		DisableKeepAlives: true,
	}
	return &Client{path: path, timeout: timeout, hc: &http.Client{Transport: tr, Timeout: timeout}}
}

// dialError marks a failure to connect, as opposed to one mid-request.
type dialError struct{ err error }

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// Call sends in (nil: no body) as JSON and decodes the response into out
// (nil: ignore it). Failures:
//   - no agent listens (no socket file, or nothing accepts on it): an error
//     wrapping ErrNoAgent, the only case where acting without the agent is
//     safe;
//   - the agent dropped the connection before answering: *AgentClosedError
//     (wraps ErrAgentClosed and the transport error);
//   - a non-2xx answer: *Error (503 "shutting_down" while the agent stops);
//   - anything else (permission denied, timeout, a bad answer): an error
//     naming the socket.
func (c *Client) Call(ctx context.Context, method, route string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("adminapi: encode request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://gpud"+route, body)
	if err != nil {
		return fmt.Errorf("adminapi: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return c.transportError(ctx, method, route, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return c.transportError(ctx, method, route, err)
	}
	if resp.StatusCode/100 != 2 {
		e := &Error{Status: resp.StatusCode}
		switch {
		case json.Unmarshal(data, e) != nil || e.Message == "":
			e.Message = fmt.Sprintf("agent answered %s: %s", resp.Status, Excerpt(data))
		case !printable(e.Message):
			e.Message = Excerpt([]byte(e.Message))
		}
		return e
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("adminapi: the agent at %s answered %s %s with something that is not the expected JSON (%v): %s",
			c.path, method, route, err, Excerpt(data))
	}
	return nil
}

// transportError classifies a failed round trip.
func (c *Client) transportError(ctx context.Context, method, route string, err error) error {
	var de *dialError
	switch {
	case errors.As(err, &de) && (errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)):
		return fmt.Errorf("%w on %s", ErrNoAgent, c.path)
	case errors.As(err, &de):
		return fmt.Errorf("adminapi: cannot connect to the agent at %s: %w", c.path, de.err)
	case ctx.Err() != nil:
		return fmt.Errorf("adminapi: %s %s via %s: %w", method, route, c.path, ctx.Err())
	case isTimeout(err):
		return fmt.Errorf("adminapi: the agent at %s did not answer %s %s within %s: check the agent's log; the change may or may not have been applied: %w",
			c.path, method, route, c.timeout, err)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return &AgentClosedError{Socket: c.path, Err: err}
	}
	return fmt.Errorf("adminapi: %s %s via %s: %w", method, route, c.path, err)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// maxExcerpt is how long a quoted excerpt of an answer may be.
const maxExcerpt = 200

// Excerpt quotes data for an error message in at most about 200
// characters: control and binary bytes are escaped, and a longer input is
// cut, ending with "... (N bytes)".
func Excerpt(data []byte) string {
	data = bytes.TrimSpace(data)
	q := strconv.Quote(string(data))
	if len(q) <= maxExcerpt {
		return q
	}
	n := min(len(data), maxExcerpt)
	for n > 0 && len(strconv.Quote(string(data[:n]))) > maxExcerpt {
		n = n * 3 / 4
	}
	return strconv.Quote(string(data[:n])) + fmt.Sprintf("... (%d bytes)", len(data))
}

// printable reports whether s is text a terminal shows as is.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r != '\n' && r != '\t' && !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}
