package deviceplugin

import (
	"errors"
	"fmt"
	"github.com/gpud/gpud/pkg/devnodes"
	"path/filepath"
	"strings"
	"time"

	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpud/gpud/pkg/timeslice"
)

// MIG strategies, as NVIDIA's device plugin defines them.
const (
	// MIGNone advertises whole GPUs only, whatever their MIG mode.
	MIGNone = "none"
	// MIGSingle advertises the MIG slices of uniformly partitioned GPUs as
	// <prefix>/gpu.
	MIGSingle = "single"
	// MIGMixed advertises MIG slices as <prefix>/mig-<profile> and GPUs
	// without MIG as <prefix>/gpu.
	MIGMixed = "mixed"
)

// Device list strategies: how Allocate tells the runtime which devices a
// container gets.
const (
	// ListCDI answers with CDI device names only.
	ListCDI = "cdi"
	// ListEnvvar answers with NVIDIA_VISIBLE_DEVICES only.
	ListEnvvar = "envvar"
	// ListBoth answers with both.
	ListBoth = "both"
)

// CDIKind is the CDI kind of every device the plugin names.
const CDIKind = "nvidia.com/gpu"

// Config configures a Manager. The zero value of each optional field is
// documented on it; call Validate before use.
type Config struct {
	// PluginDir is the kubelet's device-plugin directory holding
	// kubelet.sock; the plugin sockets are created there. Required.
	PluginDir string
	// CDIDir is where the CDI spec is written. Empty: no CDI spec (then
	// DeviceListStrategy must be envvar).
	CDIDir string
	// ResourcePrefix is the resource domain; empty means "nvidia.com".
	ResourcePrefix string
	// MIGStrategy is none, single or mixed; empty means none.
	MIGStrategy string
	// DeviceListStrategy is cdi, envvar or both; empty means both.
	DeviceListStrategy string
	// Sharing lists the GPUs (and MIG devices) split into replicas.
	Sharing timeslice.Config
	// MPSRoot is the agent's --mps-root, set when MPS control daemons run:
	// containers given a replica mount its unit's pipe directory
	// (<MPSRoot>/<uuid>/pipe) at /tmp/nvidia-mps and get
	// CUDA_MPS_PIPE_DIRECTORY, so their CUDA_MPS_* limits reach a daemon.
	// Empty: the limits are environment only, which nothing enforces.
	MPSRoot string
	// DeviceFiles says where the device files the CDI spec names are on
	// the host; the zero value is a GPU node's /dev.
	DeviceFiles devnodes.Files
	// DriverEdits are the NVIDIA driver's user-space files (libraries,
	// binaries, the toolkit's hooks; pkg/driveredits), added at the top of
	// the CDI spec so a container given units through CDI gets them as
	// from nvidia-ctk's spec. The zero value adds nothing: the container
	// then needs a runtime that injects the driver (the nvidia
	// RuntimeClass).
	DriverEdits cdispec.ContainerEdits
	// RenameShared advertises replicas as <resource>.shared; false keeps
	// the plain resource name, as NVIDIA's plugin does without renaming.
	RenameShared bool
	// RegisterTimeout bounds one Register call; zero means 5s.
	RegisterTimeout time.Duration
	// MaxBackoff caps the wait between registration attempts while no
	// kubelet listens; zero means 10s.
	MaxBackoff time.Duration
	// PollInterval is how often sockets are checked besides fsnotify
	// (missed events, no inotify); zero means 2s.
	PollInterval time.Duration
}

// withDefaults fills the documented zero values.
func (c Config) withDefaults() Config {
	if c.ResourcePrefix == "" {
		c.ResourcePrefix = "nvidia.com"
	}
	if c.MIGStrategy == "" {
		c.MIGStrategy = MIGNone
	}
	if c.DeviceListStrategy == "" {
		c.DeviceListStrategy = ListBoth
	}
	if c.RegisterTimeout <= 0 {
		c.RegisterTimeout = 5 * time.Second
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = 10 * time.Second
	}
	if c.PollInterval <= 0 {
		c.PollInterval = 2 * time.Second
	}
	return c
}

// Validate reports every problem in the config at once.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.PluginDir == "" {
		errs = append(errs, errors.New("deviceplugin: plugin dir is empty: set --device-plugin-dir (the kubelet's is /var/lib/kubelet/device-plugins)"))
	} else if !filepath.IsAbs(c.PluginDir) {
		errs = append(errs, fmt.Errorf("deviceplugin: plugin dir %q must be absolute", c.PluginDir))
	}
	if c.CDIDir != "" && !filepath.IsAbs(c.CDIDir) {
		errs = append(errs, fmt.Errorf("deviceplugin: CDI dir %q must be absolute", c.CDIDir))
	}
	if c.MPSRoot != "" && !filepath.IsAbs(c.MPSRoot) {
		errs = append(errs, fmt.Errorf("deviceplugin: MPS root %q must be absolute (set --mps-root)", c.MPSRoot))
	}
	if strings.Contains(c.ResourcePrefix, "/") || !strings.Contains(c.ResourcePrefix, ".") {
		errs = append(errs, fmt.Errorf("deviceplugin: resource prefix %q: want a domain such as nvidia.com", c.ResourcePrefix))
	}
	switch c.MIGStrategy {
	case MIGNone, MIGSingle, MIGMixed:
	default:
		errs = append(errs, fmt.Errorf("deviceplugin: MIG strategy %q: want none, single or mixed", c.MIGStrategy))
	}
	switch c.DeviceListStrategy {
	case ListCDI, ListBoth:
		if c.CDIDir == "" {
			errs = append(errs, fmt.Errorf("deviceplugin: device list strategy %q needs a CDI dir: set --cdi-dir or use envvar", c.DeviceListStrategy))
		}
	case ListEnvvar:
	default:
		errs = append(errs, fmt.Errorf("deviceplugin: device list strategy %q: want cdi, envvar or both", c.DeviceListStrategy))
	}
	if err := c.Sharing.Validate(nil); err != nil {
		errs = append(errs, fmt.Errorf("deviceplugin: sharing config: %w", err))
	}
	return errors.Join(errs...)
}

// socketPath is the plugin socket of a resource: nvidia.com/gpu becomes
// gpud-nvidia.com-gpu.sock.
func (c Config) socketPath(resource string) string {
	return filepath.Join(c.PluginDir, "gpud-"+strings.ReplaceAll(resource, "/", "-")+".sock")
}

// kubeletSocket is the kubelet's registration socket.
func (c Config) kubeletSocket() string { return filepath.Join(c.PluginDir, "kubelet.sock") }
