// Package kubeletstub is a fake kubelet for device plugin tests: a
// Registration server on <dir>/kubelet.sock that records what plugins
// register, and a Client that dials a plugin's socket and calls
// ListAndWatch, GetPreferredAllocation and Allocate as the kubelet does.
//
// Typical use:
//
//	k, err := kubeletstub.Start(dir)      // dir: the plugin dir, short path
//	defer k.Stop()
//	reg, err := k.WaitRegistered(ctx, "nvidia.com/gpu", 1)
//	c, err := kubeletstub.Dial(ctx, dir, reg.Endpoint)
//	defer c.Close()
//	w, err := c.Watch(ctx)
//	devs, err := w.WaitFor(ctx, kubeletstub.Count(8, pluginapi.Healthy))
//
// Restart plays a kubelet restart: it deletes every socket in dir, as the
// kubelet's device manager does on start, and serves a new kubelet.sock.
//
// Like the kubelet, the stub keeps a ListAndWatch stream open to each
// registered plugin, and refuses a second registration of a resource while
// the first one's stream is open ("device plugin already connected"),
// dropping the connected one too (Refused lists them).
package kubeletstub

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Kubelet is the fake kubelet. Its methods are safe for concurrent use.
type Kubelet struct {
	dir string

	mu      sync.Mutex
	srv     *grpc.Server
	regs    []*pluginapi.RegisterRequest
	refused []*pluginapi.RegisterRequest
	live    map[string]*liveConn // resource -> its open ListAndWatch
	changed chan struct{}        // closed and replaced on each registration
}

// Start serves the Registration API on dir/kubelet.sock. dir must exist
// and be short enough for a unix socket path (under 108 bytes in all).
func Start(dir string) (*Kubelet, error) {
	k := &Kubelet{dir: dir, changed: make(chan struct{}), live: map[string]*liveConn{}}
	if err := k.serve(); err != nil {
		return nil, err
	}
	return k, nil
}

// Socket is the path of kubelet.sock.
func (k *Kubelet) Socket() string { return filepath.Join(k.dir, "kubelet.sock") }

func (k *Kubelet) serve() error {
	sock := k.Socket()
	_ = os.Remove(sock)
	// A real kubelet takes far longer than one kernel clock tick to start.
	// gpud tells kubelet starts apart by kubelet.sock's (device, inode,
	// change time), and a stop and start within one tick can reuse the
	// inode with the same coarse ctime: wait out the tick as a kubelet would.
	time.Sleep(20 * time.Millisecond)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("kubeletstub: listen on %s: %w", sock, err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(srv, &registration{k: k})
	go func() { _ = srv.Serve(ln) }()
	k.mu.Lock()
	k.srv = srv
	k.mu.Unlock()
	return nil
}

// Stop stops serving and removes kubelet.sock; the recorded registrations
// stay readable.
func (k *Kubelet) Stop() {
	k.mu.Lock()
	srv := k.srv
	k.srv = nil
	for res, lc := range k.live { // a stopped kubelet's connections end
		lc.cancel()
		delete(k.live, res)
	}
	k.mu.Unlock()
	if srv != nil {
		srv.Stop()
	}
	_ = os.Remove(k.Socket())
}

// Restart plays a kubelet restart: stop, delete every socket in the dir
// (the plugins' too), then serve a new kubelet.sock.
func (k *Kubelet) Restart() error {
	k.Stop()
	entries, err := os.ReadDir(k.dir)
	if err != nil {
		return fmt.Errorf("kubeletstub: read %s: %w", k.dir, err)
	}
	for _, e := range entries {
		if e.Type()&os.ModeSocket != 0 {
			_ = os.Remove(filepath.Join(k.dir, e.Name()))
		}
	}
	return k.serve()
}

// Registrations returns every accepted registration of resource ("" for
// all), oldest first.
func (k *Kubelet) Registrations(resource string) []*pluginapi.RegisterRequest {
	k.mu.Lock()
	defer k.mu.Unlock()
	return ofResource(k.regs, resource)
}

// ofResource returns the requests for resource ("" for all), in order.
func ofResource(reqs []*pluginapi.RegisterRequest, resource string) []*pluginapi.RegisterRequest {
	var out []*pluginapi.RegisterRequest
	for _, r := range reqs {
		if resource == "" || r.ResourceName == resource {
			out = append(out, r)
		}
	}
	return out
}

// WaitRegistered waits until resource has registered at least n times in
// all and returns the latest registration.
func (k *Kubelet) WaitRegistered(ctx context.Context, resource string, n int) (*pluginapi.RegisterRequest, error) {
	for {
		k.mu.Lock()
		changed := k.changed
		k.mu.Unlock()
		if regs := k.Registrations(resource); len(regs) >= n {
			return regs[len(regs)-1], nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("kubeletstub: %s registered %d times, want %d: %w", resource, len(k.Registrations(resource)), n, ctx.Err())
		case <-changed:
		}
	}
}

// registration checks requests as the kubelet does: the API version, a
// domain-qualified resource name, and an endpoint socket in the dir that
// answers GetDevicePluginOptions.
type registration struct {
	pluginapi.UnimplementedRegistrationServer
	k *Kubelet
}

func (r *registration) Register(ctx context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	if req.Version != pluginapi.Version {
		return nil, status.Errorf(codes.InvalidArgument, "unsupported version %q, want %q", req.Version, pluginapi.Version)
	}
	if i := strings.Index(req.ResourceName, "/"); i <= 0 || i == len(req.ResourceName)-1 {
		return nil, status.Errorf(codes.InvalidArgument, "resource name %q is not domain/name", req.ResourceName)
	}
	if req.Endpoint == "" || strings.Contains(req.Endpoint, "/") {
		return nil, status.Errorf(codes.InvalidArgument, "endpoint %q: want a socket name in the plugin dir", req.Endpoint)
	}
	c, err := Dial(ctx, r.k.dir, req.Endpoint)
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "dial plugin: %v", err)
	}
	defer c.Close()
	opts, err := c.GetDevicePluginOptions(ctx, &pluginapi.Empty{})
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "plugin options: %v", err)
	}
	if req.Options == nil || req.Options.GetPreferredAllocationAvailable != opts.GetPreferredAllocationAvailable ||
		req.Options.PreStartRequired != opts.PreStartRequired {
		return nil, status.Errorf(codes.InvalidArgument, "registered options %v differ from the plugin's %v", req.Options, opts)
	}
	r.k.mu.Lock()
	defer r.k.mu.Unlock()
	if lc, ok := r.k.live[req.ResourceName]; ok {
		lc.cancel()
		delete(r.k.live, req.ResourceName)
		r.k.refused = append(r.k.refused, req)
		close(r.k.changed)
		r.k.changed = make(chan struct{})
		return nil, status.Errorf(codes.AlreadyExists, "device plugin already connected: %s", req.ResourceName)
	}
	if err := r.k.connectLocked(req); err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "list and watch: %v", err)
	}
	r.k.regs = append(r.k.regs, req)
	close(r.k.changed)
	r.k.changed = make(chan struct{})
	return &pluginapi.Empty{}, nil
}

// connectLocked opens the kubelet's ListAndWatch stream to a registered
// plugin; the resource counts as connected until the stream ends.
func (k *Kubelet) connectLocked(req *pluginapi.RegisterRequest) error {
	c, err := Dial(context.Background(), k.dir, req.Endpoint)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := c.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		cancel()
		_ = c.Close()
		return err
	}
	lc := &liveConn{cancel: cancel}
	k.live[req.ResourceName] = lc
	go func() {
		defer c.Close()
		for {
			if _, err := stream.Recv(); err != nil {
				break
			}
		}
		cancel()
		k.mu.Lock()
		defer k.mu.Unlock()
		if k.live[req.ResourceName] == lc { // not replaced since
			delete(k.live, req.ResourceName)
		}
	}()
	return nil
}

// liveConn is the kubelet's open ListAndWatch stream to one plugin.
type liveConn struct{ cancel context.CancelFunc }

// Refused returns the registrations of resource ("" for all) the stub
// refused because the resource was already connected, oldest first.
func (k *Kubelet) Refused(resource string) []*pluginapi.RegisterRequest {
	k.mu.Lock()
	defer k.mu.Unlock()
	return ofResource(k.refused, resource)
}

// ErrStreamClosed is returned by Watch methods once ListAndWatch ended.
var ErrStreamClosed = errors.New("kubeletstub: ListAndWatch stream closed")
