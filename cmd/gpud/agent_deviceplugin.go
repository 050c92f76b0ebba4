package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpud/gpud/internal/printable"
	"github.com/gpud/gpud/pkg/deviceplugin"
	"github.com/gpud/gpud/pkg/devnodes"
)

// kubeletPluginDir is the kubelet's device-plugin directory. gpud never
// creates it: the kubelet does, and its absence means no kubelet here.
const kubeletPluginDir = "/var/lib/kubelet/device-plugins"

// devicePluginOptions are the device plugin's flags.
type devicePluginOptions struct {
	pluginDir    string
	cdiDir       string
	prefix       string
	migStrategy  string
	listStrategy string
	renameShared bool
}

func (o *devicePluginOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.pluginDir, "device-plugin-dir", kubeletPluginDir, "kubelet device-plugin dir holding kubelet.sock; the plugin sockets go there (created unless it is the kubelet's default); empty disables the device plugin")
	fs.StringVar(&o.cdiDir, "cdi-dir", "/var/run/cdi", "dir the CDI specs are written to (device plugin: the advertised GPUs; --kubelet-api dra: one per prepared claim); empty writes none (then --device-list-strategy envvar)")
	fs.StringVar(&o.prefix, "resource-prefix", "nvidia.com", "domain of the advertised resources (<prefix>/gpu, <prefix>/gpu.shared, <prefix>/mig-<profile>)")
	fs.StringVar(&o.migStrategy, "mig-strategy", deviceplugin.MIGNone, "how MIG slices are advertised: none, single or mixed")
	fs.StringVar(&o.listStrategy, "device-list-strategy", deviceplugin.ListBoth, "how Allocate names devices: cdi (CDI names), envvar (NVIDIA_VISIBLE_DEVICES) or both")
	fs.BoolVar(&o.renameShared, "rename-shared", true, "advertise replicas as <resource>.shared instead of <resource>")
}

// validate checks each flag on its own, naming it; the device plugin's
// Config.Validate then checks what is left (how they combine).
func (o *devicePluginOptions) validate() []error {
	var errs []error
	switch o.migStrategy {
	case deviceplugin.MIGNone, deviceplugin.MIGSingle, deviceplugin.MIGMixed:
	default:
		errs = append(errs, flagErr("mig-strategy", "%s: want none, single or mixed", printable.Quote(o.migStrategy)))
	}
	switch o.listStrategy {
	case deviceplugin.ListCDI, deviceplugin.ListBoth:
		if o.cdiDir == "" && o.pluginDir != "" {
			errs = append(errs, flagErr("device-list-strategy", "%q needs a CDI spec: set --cdi-dir or use envvar", o.listStrategy))
		}
	case deviceplugin.ListEnvvar:
	default:
		errs = append(errs, flagErr("device-list-strategy", "%s: want cdi, envvar or both", printable.Quote(o.listStrategy)))
	}
	if strings.Contains(o.prefix, "/") || !strings.Contains(o.prefix, ".") {
		errs = append(errs, flagErr("resource-prefix", "%s: want a domain such as nvidia.com", printable.Quote(o.prefix)))
	}
	if len(errs) > 0 || o.pluginDir == "" {
		return errs
	}
	cfg, err := devicePluginConfig(o)
	if err != nil {
		return []error{err}
	}
	if err := cfg.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("device plugin: %w", err))
	}
	return errs
}

// devicePluginConfig is the device plugin's Config, paths made absolute.
func devicePluginConfig(o *devicePluginOptions) (deviceplugin.Config, error) {
	cfg := deviceplugin.Config{
		CDIDir: o.cdiDir, ResourcePrefix: o.prefix, MIGStrategy: o.migStrategy,
		DeviceListStrategy: o.listStrategy, RenameShared: o.renameShared,
	}
	var err error
	if cfg.PluginDir, err = filepath.Abs(o.pluginDir); err != nil {
		return cfg, flagErr("device-plugin-dir", "%s: %w", o.pluginDir, err)
	}
	if cfg.CDIDir != "" {
		if cfg.CDIDir, err = filepath.Abs(cfg.CDIDir); err != nil {
			return cfg, flagErr("cdi-dir", "%s: %w", o.cdiDir, err)
		}
	}
	return cfg, nil
}

// newDevicePlugin builds the device plugin manager on its sources (the
// inventory store and the sharing runtime); nil when --device-plugin-dir
// is empty. mpsRoot is where the MPS daemons keep their pipe dirs, which
// replicas' containers mount; empty when none runs. files says where the
// device files are on the host; driverEdits are the driver's files the
// CDI spec carries (zero: none).
func newDevicePlugin(o *devicePluginOptions, src deviceplugin.Source, mpsRoot string, files devnodes.Files, driverEdits cdispec.ContainerEdits, log *slog.Logger) (*deviceplugin.Manager, error) {
	if o.pluginDir == "" {
		return nil, nil
	}
	cfg, err := devicePluginConfig(o)
	if err != nil {
		return nil, err
	}
	cfg.MPSRoot, cfg.DeviceFiles, cfg.DriverEdits = mpsRoot, files, driverEdits
	if cfg.PluginDir != kubeletPluginDir {
		if err := os.MkdirAll(cfg.PluginDir, 0o755); err != nil {
			return nil, fmt.Errorf("create --device-plugin-dir %s: %w", cfg.PluginDir, err)
		}
	}
	m, err := deviceplugin.New(cfg, src, log)
	if err != nil {
		return nil, fmt.Errorf("device plugin: %w", err)
	}
	return m, nil
}
