package kubeletstub

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Client is the kubelet's side of one plugin: the generated
// DevicePluginClient plus helpers. Close it when done.
type Client struct {
	pluginapi.DevicePluginClient
	conn *grpc.ClientConn
}

// Dial connects to the plugin socket endpoint in dir (the name a plugin
// registers). The connection is made lazily; calls fail if nobody listens.
func Dial(_ context.Context, dir, endpoint string) (*Client, error) {
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("kubeletstub: dial %s: %w", endpoint, err)
	}
	return &Client{DevicePluginClient: pluginapi.NewDevicePluginClient(conn), conn: conn}, nil
}

// Close closes the connection, ending any Watch.
func (c *Client) Close() error { return c.conn.Close() }

// Preferred asks for a preferred allocation for one container.
func (c *Client) Preferred(ctx context.Context, available, mustInclude []string, size int) ([]string, error) {
	resp, err := c.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{
		ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
			AvailableDeviceIDs: available, MustIncludeDeviceIDs: mustInclude, AllocationSize: int32(size),
		}},
	})
	if err != nil {
		return nil, err
	}
	if len(resp.ContainerResponses) != 1 {
		return nil, fmt.Errorf("kubeletstub: %d container responses, want 1", len(resp.ContainerResponses))
	}
	return resp.ContainerResponses[0].DeviceIDs, nil
}

// AllocateIDs allocates device IDs, one list per container.
func (c *Client) AllocateIDs(ctx context.Context, containers ...[]string) (*pluginapi.AllocateResponse, error) {
	req := &pluginapi.AllocateRequest{}
	for _, ids := range containers {
		req.ContainerRequests = append(req.ContainerRequests, &pluginapi.ContainerAllocateRequest{DevicesIds: ids})
	}
	return c.Allocate(ctx, req)
}

// Watch is one ListAndWatch stream, read in the background: it keeps every
// list received.
type Watch struct {
	mu      sync.Mutex
	lists   [][]*pluginapi.Device
	err     error
	changed chan struct{}
}

// Watch starts ListAndWatch; the stream ends with ctx or Close.
func (c *Client) Watch(ctx context.Context) (*Watch, error) {
	stream, err := c.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		return nil, fmt.Errorf("kubeletstub: ListAndWatch: %w", err)
	}
	w := &Watch{changed: make(chan struct{})}
	go func() {
		for {
			resp, err := stream.Recv()
			w.mu.Lock()
			if err != nil {
				w.err = fmt.Errorf("%w: %w", ErrStreamClosed, err)
			} else {
				w.lists = append(w.lists, resp.Devices)
			}
			close(w.changed)
			w.changed = make(chan struct{})
			w.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return w, nil
}

// Lists returns every list received so far, oldest first.
func (w *Watch) Lists() [][]*pluginapi.Device {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([][]*pluginapi.Device(nil), w.lists...)
}

// WaitFor waits for a received list that satisfies ok (checking the latest
// list first) and returns it. It fails when ctx ends or the stream closes.
func (w *Watch) WaitFor(ctx context.Context, ok func([]*pluginapi.Device) bool) ([]*pluginapi.Device, error) {
	for {
		w.mu.Lock()
		var last []*pluginapi.Device
		have := len(w.lists) > 0
		if have {
			last = w.lists[len(w.lists)-1]
		}
		err, changed := w.err, w.changed
		w.mu.Unlock()
		if have && ok(last) {
			return last, nil
		}
		if err != nil {
			return last, err
		}
		select {
		case <-ctx.Done():
			return last, fmt.Errorf("kubeletstub: no list matched (last had %d devices): %w", len(last), ctx.Err())
		case <-changed:
		}
	}
}

// Count matches a list of exactly n devices whose health is health.
func Count(n int, health string) func([]*pluginapi.Device) bool {
	return func(devs []*pluginapi.Device) bool {
		if len(devs) != n {
			return false
		}
		for _, d := range devs {
			if d.Health != health {
				return false
			}
		}
		return true
	}
}

// HealthOf returns the health of device id in a list, "" when absent.
func HealthOf(devs []*pluginapi.Device, id string) string {
	for _, d := range devs {
		if d.ID == id {
			return d.Health
		}
	}
	return ""
}

// IDs returns the device IDs of a list, in list order.
func IDs(devs []*pluginapi.Device) []string {
	out := make([]string, len(devs))
	for i, d := range devs {
		out[i] = d.ID
	}
	return out
}
