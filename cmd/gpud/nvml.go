package main

import (
	"errors"
	"flag"
	"fmt"
	"k8s.io/apimachinery/pkg/util/validation"
	"os"
	"path/filepath"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpud/gpud/internal/printable"
	"github.com/gpud/gpud/pkg/devnodes"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/simnode"
)

// nvmlFlags are the flags every command that reads GPUs shares.
type nvmlFlags struct {
	simulate  string
	stateFile string
	devRoot   string
	library   string
	nodeName  string
}

func (f *nvmlFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.simulate, "simulate", "", "use a simulated node instead of NVML: "+fmt.Sprint(simnode.BuiltinNames())+" or a node .yaml file")
	fs.StringVar(&f.stateFile, "sim-state-file", "", "with --simulate, keep the simulated MIG layout in this file across restarts")
	fs.StringVar(&f.devRoot, "sim-dev-root", "", "with --simulate: create the simulated GPUs' device files (nvidiactl, nvidia<minor>: character major 195, as the driver's) in this dir and name them in the CDI specs, so containers get device nodes a device filter decides on (opening an allowed one gives ENXIO, a refused one EPERM); needs root. Empty: the specs name only device files that exist")
	fs.StringVar(&f.library, "nvml-library", "", "path of libnvidia-ml.so.1 (default: the dynamic loader's search path)")
	fs.StringVar(&f.nodeName, "node-name", "", "node name to report, and in --kubelet-api dra the Node and ResourceSlice pool (default: $NODE_NAME, else the simulated profile's name, else the hostname)")
}

// deviceFiles says where the device files the CDI specs name are on the
// host: a GPU node's /dev; on a simulated node, the files --sim-dev-root
// holds (created here) or none, so the specs name only files that exist.
func deviceFiles(f nvmlFlags, sim *simnode.Node, inv gpu.Inventory) (devnodes.Files, error) {
	if sim == nil {
		if f.devRoot != "" {
			return devnodes.Files{}, flagErr("sim-dev-root", "needs --simulate: a GPU node's device files are the driver's")
		}
		return devnodes.Files{}, nil
	}
	files := devnodes.Files{OnlyExisting: true}
	if f.devRoot == "" {
		return files, nil
	}
	root, err := filepath.Abs(f.devRoot)
	if err != nil {
		return files, flagErr("sim-dev-root", "%s: %w", f.devRoot, err)
	}
	minors := make([]int, 0, len(inv.GPUs))
	for _, g := range inv.GPUs {
		minors = append(minors, g.Minor)
	}
	if err := devnodes.Create(root, minors); err != nil {
		return files, flagErr("sim-dev-root", "%w", err)
	}
	files.Root = root
	return files, nil
}

// errNoNVML is returned when the NVML library cannot be loaded.
var errNoNVML = errors.New("NVML (libnvidia-ml.so.1) is not available: no NVIDIA driver on this machine? Run with --simulate dgx-h100 to use a simulated node")

// openNVML returns the simulated node or the real library, initialized, and
// its shutdown. The simulated node is returned too, for hooks; nil for NVML.
func openNVML(f nvmlFlags) (nvml.Interface, *simnode.Node, func(), error) {
	if f.simulate != "" {
		p, err := simnode.LoadProfile(f.simulate)
		if err != nil {
			return nil, nil, nil, err
		}
		// The GPUs' UUIDs derive from the node's name, so two simulated
		// nodes of one profile share none, as real GPUs do.
		name, err := givenNodeName(f)
		if err != nil {
			return nil, nil, nil, err
		}
		var opts []simnode.Option
		if name != "" {
			opts = append(opts, simnode.WithNodeName(name))
		}
		if f.stateFile != "" {
			opts = append(opts, simnode.WithStateFile(f.stateFile))
		}
		n, err := simnode.New(p, opts...)
		if err != nil {
			return nil, nil, nil, err
		}
		return n, n, func() {}, nil
	}
	var opts []nvml.LibraryOption
	if f.library != "" {
		opts = append(opts, nvml.WithLibraryPath(f.library))
	}
	lib := nvml.New(opts...)
	ret := lib.Init()
	if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
		return nil, nil, nil, errNoNVML
	}
	if ret != nvml.SUCCESS {
		return nil, nil, nil, fmt.Errorf("NVML init failed: %w (is the NVIDIA driver loaded? Without a GPU, run with --simulate dgx-h100)", ret)
	}
	return lib, nil, func() { _ = lib.Shutdown() }, nil
}

// validate checks --node-name: a Kubernetes node name (a DNS-1123
// subdomain: lowercase, digits, '-' and '.', at most 253 characters), the
// name the agent reports on every stream, label and metric.
func (f nvmlFlags) validate() []error {
	if f.nodeName == "" {
		return nil
	}
	if err := checkNodeName(f.nodeName); err != nil {
		return []error{flagErr("node-name", "%w", err)}
	}
	return nil
}

// checkNodeName fails for a name that is not a Kubernetes node name.
func checkNodeName(name string) error {
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return fmt.Errorf("%s: not a Kubernetes node name: %s", printable.Quote(name), strings.Join(msgs, "; "))
	}
	return nil
}

// givenNodeName is the node name the flag or $NODE_NAME gives, "" when
// neither does. It fails for a name from $NODE_NAME that is not a
// Kubernetes node name (validate checks the flag's).
func givenNodeName(f nvmlFlags) (string, error) {
	if f.nodeName != "" {
		return f.nodeName, nil
	}
	if v := os.Getenv("NODE_NAME"); v != "" {
		if err := checkNodeName(v); err != nil {
			return "", fmt.Errorf("$NODE_NAME %w", err)
		}
		return v, nil
	}
	return "", nil
}

// resolveNodeName resolves the name to report: the flag, $NODE_NAME, the
// simulated profile's name, or the hostname (lowercased, as the kubelet
// names its node). It fails for a name from $NODE_NAME that is not a
// Kubernetes node name.
func resolveNodeName(f nvmlFlags, sim *simnode.Node) (string, error) {
	if name, err := givenNodeName(f); name != "" || err != nil {
		return name, err
	}
	if sim != nil {
		return sim.Name(), nil
	}
	h, _ := os.Hostname()
	return strings.ToLower(h), nil
}
