package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpud/gpud/internal/wait"
)

// errSocketGone ends one serving round when the plugin's socket was deleted
// (the kubelet does so when it restarts): serve again at once.
var errSocketGone = errors.New("plugin socket removed")

// run serves and registers the plugin until ctx ends, starting over when
// the socket is removed and backing off while serving fails. It never
// returns an error: a missing kubelet is waited for, not fatal.
func (p *plugin) run(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for {
		err := p.serveOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errSocketGone) {
			p.log.Info("plugin socket removed, serving again")
			backoff = 100 * time.Millisecond
			continue
		}
		p.log.Warn("device plugin server failed, retrying", "err", err, "retry_in", backoff)
		if !wait.Sleep(ctx, backoff) {
			return
		}
		backoff = min(2*backoff, p.cfg.MaxBackoff)
	}
}

// serveOnce listens on the plugin socket, registers with the kubelet
// (retrying with backoff), and serves until ctx ends, the server fails or
// the socket is removed.
func (p *plugin) serveOnce(ctx context.Context) error {
	sock := p.cfg.socketPath(p.resource)
	if err := os.Remove(sock); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("remove stale socket %s: %w", sock, err)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", sock, err)
	}
	ino, err := inode(sock)
	if err != nil {
		_ = ln.Close()
		return fmt.Errorf("stat %s: %w", sock, err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	defer srv.Stop()

	registered, failures := false, 0
	backoff := 100 * time.Millisecond
	retry := time.NewTimer(0)
	defer retry.Stop()
	poll := time.NewTicker(p.cfg.PollInterval)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errc:
			return fmt.Errorf("serve %s: %w", sock, err)
		case <-p.socketGone:
			if !socketIs(sock, ino) {
				return errSocketGone
			}
			continue
		case <-poll.C:
			if !socketIs(sock, ino) {
				return errSocketGone
			}
			continue
		case <-p.kubeletUp:
			if registered {
				if now, ok := currentKubelet(p.cfg.kubeletSocket()); ok && now == p.registeredWith {
					continue // the kubelet we registered with: it has us
				}
			}
			registered = false
			backoff = 100 * time.Millisecond
		case <-retry.C:
		}
		if registered {
			continue
		}
		if err := p.register(ctx); err != nil {
			failures++
			if failures == 1 { // once per outage; the retries go to debug
				p.log.Warn("registration with kubelet failed, retrying with backoff", "err", err)
			} else {
				p.log.Debug("registration with kubelet failed", "err", err, "attempt", failures, "retry_in", backoff)
			}
			retry.Reset(backoff)
			backoff = min(2*backoff, p.cfg.MaxBackoff)
			continue
		}
		registered, failures = true, 0
		// Read after the call: a kubelet that restarted since then deletes
		// our socket, and this round ends with errSocketGone and a new
		// registration, so a later "kubelet is back" for the instance seen
		// here is the one that has us.
		p.registeredWith, _ = currentKubelet(p.cfg.kubeletSocket())
		p.log.Info("registered with kubelet", "endpoint", filepath.Base(sock))
	}
}

// register calls the kubelet's Register once.
func (p *plugin) register(ctx context.Context) error {
	conn, err := grpc.NewClient("unix://"+p.cfg.kubeletSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("dial kubelet %s: %w", p.cfg.kubeletSocket(), err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, p.cfg.RegisterTimeout)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     filepath.Base(p.cfg.socketPath(p.resource)),
		ResourceName: p.resource,
		Options:      p.options(),
	})
	if err != nil {
		return fmt.Errorf("register %s with kubelet at %s: %w", p.resource, p.cfg.kubeletSocket(), err)
	}
	return nil
}

// inode returns a file's inode number.
func inode(path string) (uint64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, fmt.Errorf("stat %s: no inode", path)
	}
	return st.Ino, nil
}

// socketIs reports whether path is still the socket with inode ino.
func socketIs(path string, ino uint64) bool {
	got, err := inode(path)
	return err == nil && got == ino
}
