package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	"sigs.k8s.io/yaml"

	"github.com/gpud/gpud/pkg/deviceplugin"
	"github.com/gpud/gpud/pkg/discovery"
	"github.com/gpud/gpud/pkg/timeslice"
)

// kubeletPluginDir is the kubelet's device-plugin directory. gpud never
// creates it: the kubelet does, and its absence means no kubelet here.
const kubeletPluginDir = "/var/lib/kubelet/device-plugins"

// devicePluginComponent serves the kubelet device plugin API and watches
// GPU health through NVML events.
type devicePluginComponent struct {
	pluginDir      string
	cdiDir         string
	prefix         string
	migStrategy    string
	listStrategy   string
	sharingFile    string
	renameShared   bool
	ignoreXids     string
	recoveryPeriod time.Duration
}

func (c *devicePluginComponent) name() string { return "deviceplugin" }

func (c *devicePluginComponent) registerFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.pluginDir, "device-plugin-dir", kubeletPluginDir, "kubelet device-plugin dir holding kubelet.sock; the plugin sockets go there (created unless it is the kubelet's default); empty disables the device plugin")
	fs.StringVar(&c.cdiDir, "cdi-dir", "/var/run/cdi", "dir the CDI spec of the advertised GPUs is written to; empty writes none (then --device-list-strategy envvar)")
	fs.StringVar(&c.prefix, "resource-prefix", "nvidia.com", "domain of the advertised resources (<prefix>/gpu, <prefix>/gpu.shared, <prefix>/mig-<profile>)")
	fs.StringVar(&c.migStrategy, "mig-strategy", deviceplugin.MIGNone, "how MIG slices are advertised: none, single or mixed")
	fs.StringVar(&c.listStrategy, "device-list-strategy", deviceplugin.ListBoth, "how Allocate names devices: cdi (CDI names), envvar (NVIDIA_VISIBLE_DEVICES) or both")
	fs.StringVar(&c.sharingFile, "sharing-config", "", "YAML file of GPU sharing (default: {replicas: N}, devices: {<uuid|index>: {replicas: N}}); empty shares nothing")
	fs.BoolVar(&c.renameShared, "rename-shared", true, "advertise replicas as <resource>.shared instead of <resource>")
	fs.StringVar(&c.ignoreXids, "health-ignore-xids", joinXids(discovery.DefaultIgnoredXids), "comma-separated Xids that do not make a GPU unhealthy (application faults); empty ignores none")
	fs.DurationVar(&c.recoveryPeriod, "health-recovery-period", 5*time.Minute, "how long an unhealthy GPU must stay error-free before it is healthy again (a lost GPU never is)")
}

func (c *devicePluginComponent) run(ctx context.Context, a *agent) error {
	log := a.log.With("component", "deviceplugin")
	xids, err := parseXids(c.ignoreXids)
	if err != nil {
		return err
	}
	g, ctx := errgroup.WithContext(ctx)
	mon := discovery.NewHealthMonitor(a.lib, discovery.HealthConfig{IgnoredXids: xids, RecoveryPeriod: c.recoveryPeriod},
		a.SetHealth, a.log.With("component", "health"))
	g.Go(func() error { return mon.Run(ctx) })
	if c.pluginDir != "" {
		m, err := c.manager(a)
		if err != nil {
			return err
		}
		g.Go(func() error { return m.Run(ctx) })
		log.Info("device plugin starting", "dir", c.pluginDir, "cdi_dir", c.cdiDir, "mig_strategy", c.migStrategy)
	}
	return g.Wait()
}

func (c *devicePluginComponent) manager(a *agent) (*deviceplugin.Manager, error) {
	cfg := deviceplugin.Config{
		CDIDir: c.cdiDir, ResourcePrefix: c.prefix, MIGStrategy: c.migStrategy,
		DeviceListStrategy: c.listStrategy, RenameShared: c.renameShared,
	}
	var err error
	if cfg.PluginDir, err = filepath.Abs(c.pluginDir); err != nil {
		return nil, fmt.Errorf("--device-plugin-dir %s: %w", c.pluginDir, err)
	}
	if cfg.CDIDir != "" {
		if cfg.CDIDir, err = filepath.Abs(cfg.CDIDir); err != nil {
			return nil, fmt.Errorf("--cdi-dir %s: %w", c.cdiDir, err)
		}
	}
	if cfg.PluginDir != kubeletPluginDir {
		if err := os.MkdirAll(cfg.PluginDir, 0o755); err != nil {
			return nil, fmt.Errorf("create --device-plugin-dir %s: %w", cfg.PluginDir, err)
		}
	}
	// Sharing comes from the agent (a.Sharing), loaded from --sharing-config
	// at start and changed at run time through the admin API.
	m, err := deviceplugin.New(cfg, a, a.log.With("component", "deviceplugin"))
	if err != nil {
		return nil, fmt.Errorf("device plugin config: %w", err)
	}
	return m, nil
}

// loadSharing reads a timeslice.Config from YAML, rejecting unknown keys.
func loadSharing(path string) (timeslice.Config, error) {
	var cfg timeslice.Config
	data, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("--sharing-config: %w", err)
	}
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		return cfg, fmt.Errorf("--sharing-config %s: %w (want default: {replicas: N} and devices: {<uuid|index>: {replicas: N}})", path, err)
	}
	if err := cfg.Validate(nil); err != nil {
		return cfg, fmt.Errorf("--sharing-config %s: %w", path, err)
	}
	return cfg, nil
}

// parseXids parses --health-ignore-xids; empty means none ignored.
func parseXids(s string) ([]uint64, error) {
	out := []uint64{}
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		x, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("--health-ignore-xids: %q is not an Xid number: %w", f, err)
		}
		out = append(out, x)
	}
	return out, nil
}

func joinXids(xids []uint64) string {
	s := make([]string, len(xids))
	for i, x := range xids {
		s[i] = strconv.FormatUint(x, 10)
	}
	return strings.Join(s, ",")
}
