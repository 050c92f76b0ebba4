// Package podresources is a small client of the kubelet PodResources API v1
// (k8s.io/kubelet/pkg/apis/podresources/v1): it lists which containers hold
// which devices, so telemetry and the memory watchdog can put namespace, pod
// and container names on a GPU, a MIG slice or a time-sliced replica, and
// so the MIG service and the sharing runtime never take a device from a pod
// ([Client.Allocations]); [Client.ListResources] adds the devices of DRA
// claims, for device isolation in DRA mode. The agent opens one Client and
// shares it.
//
// It owns no hardware and reads no files but the kubelet socket it is given.
package podresources

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpud/gpud/pkg/usage"
)

// DefaultSocket is where the kubelet serves the PodResources API.
const DefaultSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// maxRecvBytes matches the kubelet's own client limit (16 MiB).
const maxRecvBytes = 16 << 20

// ErrNoKubelet is wrapped (with ErrUnavailable) by [Client.List] when the
// socket does not exist: no kubelet runs here, or its pod-resources dir is
// not mounted.
var ErrNoKubelet = errors.New("no kubelet PodResources socket") // always wrapped by ErrUnavailable, which names the package

// ErrUnavailable is returned (wrapped) by [Client.List] when the kubelet
// socket does not exist or does not answer; callers degrade to metrics
// without pod labels.
var ErrUnavailable = errors.New("podresources: kubelet PodResources API unavailable")

// Assignment is one container's devices of one resource (see
// [usage.Assignment]).
type Assignment = usage.Assignment

// Client lists device assignments over the kubelet's unix socket. The zero
// value is not usable; create one with [New]. A Client is safe for
// concurrent use; Close releases its connection. It reconnects on its own
// when the kubelet restarts.
type Client struct {
	socket string

	mu   sync.Mutex
	conn *grpc.ClientConn
}

// New returns a client of the PodResources API at socket (a filesystem path;
// empty means [DefaultSocket]). It does not connect until the first List.
func New(socket string) *Client {
	if socket == "" {
		socket = DefaultSocket
	}
	return &Client{socket: socket}
}

// Socket returns the path the client talks to.
func (c *Client) Socket() string { return c.socket }

func (c *Client) client() (podresourcesv1.PodResourcesListerClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		conn, err := grpc.NewClient("unix://"+c.socket,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxRecvBytes)))
		if err != nil {
			return nil, fmt.Errorf("%w: dial %s: %w", ErrUnavailable, c.socket, err)
		}
		c.conn = conn
	}
	return podresourcesv1.NewPodResourcesListerClient(c.conn), nil
}

// List returns every device assignment of every running container, in the
// kubelet's order. Containers without devices are left out. A missing
// socket or an unreachable kubelet gives an error wrapping ErrUnavailable;
// ctx bounds the call.
func (c *Client) List(ctx context.Context) ([]Assignment, error) {
	resp, err := c.list(ctx)
	if err != nil {
		return nil, err
	}
	return Flatten(resp), nil
}

func (c *Client) list(ctx context.Context) (*podresourcesv1.ListPodResourcesResponse, error) {
	if _, err := os.Stat(c.socket); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			err = fmt.Errorf("%w: %w", ErrNoKubelet, err)
		}
		return nil, fmt.Errorf("%w: %w (is the kubelet running, and is its pod-resources dir mounted?)", ErrUnavailable, err)
	}
	cl, err := c.client()
	if err != nil {
		return nil, err
	}
	resp, err := cl.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("%w: list on %s: %w", ErrUnavailable, c.socket, err)
	}
	return resp, nil
}

// Allocations is the one rule every caller that must not take a device
// from a pod uses (the MIG service, the sharing runtime): the kubelet's
// assignments; none when the socket does not exist (no kubelet here, so
// nothing can be allocated); an error wrapping ErrUnavailable when the
// socket exists but the kubelet does not answer, since then nobody can
// tell which devices are allocated.
func (c *Client) Allocations(ctx context.Context) ([]Assignment, error) {
	as, err := c.List(ctx)
	if errors.Is(err, ErrNoKubelet) {
		return nil, nil
	}
	return as, err
}

// Flatten turns a List response into assignments, one per container and
// resource with at least one device.
func Flatten(resp *podresourcesv1.ListPodResourcesResponse) []Assignment {
	var out []Assignment
	for _, p := range resp.GetPodResources() {
		for _, ctr := range p.GetContainers() {
			for _, d := range ctr.GetDevices() {
				if len(d.GetDeviceIds()) == 0 {
					continue
				}
				out = append(out, Assignment{
					Namespace:    p.GetNamespace(),
					Pod:          p.GetName(),
					Container:    ctr.GetName(),
					ResourceName: d.GetResourceName(),
					DeviceIDs:    append([]string(nil), d.GetDeviceIds()...),
				})
			}
		}
	}
	return out
}

// Close closes the connection; the Client must not be used afterwards.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		return nil
	}
	err := c.conn.Close()
	c.conn = nil
	if err != nil {
		return fmt.Errorf("podresources: close %s: %w", c.socket, err)
	}
	return nil
}
