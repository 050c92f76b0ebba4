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
	"syscall"
	"time"
)

// ErrNoAgent is returned when no agent listens on the socket.
var ErrNoAgent = errors.New("adminapi: no agent is listening")

// Client calls the admin API of the agent on one socket.
type Client struct {
	path string
	hc   *http.Client
}

// NewClient returns a client for the socket at path. Calls time out after
// timeout (0: 2 minutes, a MIG apply on 8 GPUs can take a while).
func NewClient(path string, timeout time.Duration) *Client {
	if timeout == 0 {
		timeout = 2 * time.Minute
	}
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}
	return &Client{path: path, hc: &http.Client{Transport: tr, Timeout: timeout}}
}

// Call sends in (nil: no body) as JSON and decodes the response into out
// (nil: ignore it). A non-2xx answer is returned as *Error; a socket with no
// agent behind it as ErrNoAgent.
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
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return fmt.Errorf("%w on %s", ErrNoAgent, c.path)
		}
		return fmt.Errorf("adminapi: %s %s via %s: %w", method, route, c.path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("adminapi: read response: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		e := &Error{Status: resp.StatusCode}
		if json.Unmarshal(data, e) != nil || e.Message == "" {
			e.Message = fmt.Sprintf("agent answered %s: %s", resp.Status, bytes.TrimSpace(data))
		}
		return e
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("adminapi: decode response of %s %s: %w", method, route, err)
	}
	return nil
}
