package deviceplugin

import (
	"context"
	"log/slog"
	"sync"

	"google.golang.org/grpc"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// plugin serves one resource. Its device set is swapped on every change;
// ListAndWatch streams see each swap that changes what they advertise.
type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	resource string
	cfg      Config
	log      *slog.Logger

	mu      sync.Mutex
	set     *deviceSet
	changed chan struct{} // closed and replaced when set's advertisement changes

	kubeletUp chan struct{} // kubelet.sock (re)created: register again unless it is registeredWith
	// registeredWith is the kubelet the latest registration reached; only
	// the plugin's run goroutine touches it.
	registeredWith kubeletInstance
	socketGone     chan struct{} // the plugin socket may be gone: check it
}

var _ pluginapi.DevicePluginServer = (*plugin)(nil)

func newPlugin(resource string, cfg Config, log *slog.Logger) *plugin {
	return &plugin{
		resource:   resource,
		cfg:        cfg,
		log:        log.With("resource", resource),
		set:        &deviceSet{resource: resource, byID: map[string]*device{}},
		changed:    make(chan struct{}),
		kubeletUp:  make(chan struct{}, 1),
		socketGone: make(chan struct{}, 1),
	}
}

// notify does a non-blocking send on a one-slot channel.
func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// update swaps in a new device set and wakes ListAndWatch streams when the
// advertisement changed. It reports whether it did.
func (p *plugin) update(s *deviceSet) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	same := p.set.sameAdvertisement(s)
	p.set = s
	if same {
		return false
	}
	close(p.changed)
	p.changed = make(chan struct{})
	return true
}

func (p *plugin) snapshot() (*deviceSet, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.set, p.changed
}

// GetDevicePluginOptions returns the options the plugin implements.
func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return p.options(), nil
}

func (p *plugin) options() *pluginapi.DevicePluginOptions {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}
}

// ListAndWatch sends the full device list on connect and again after every
// change, until the kubelet hangs up or the server stops.
func (p *plugin) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	for {
		set, changed := p.snapshot()
		if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: set.list()}); err != nil {
			return err
		}
		p.log.Debug("device list sent", "devices", len(set.devices))
		select {
		case <-stream.Context().Done():
			return nil
		case <-changed:
		}
	}
}

// PreStartContainer is not required (see options); it does nothing.
func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}
