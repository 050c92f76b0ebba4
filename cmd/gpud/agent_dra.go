package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpud/gpud/internal/printable"
	"github.com/gpud/gpud/pkg/devnodes"
	"github.com/gpud/gpud/pkg/dra"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/mig"
	"github.com/gpud/gpud/pkg/mig/migdra"
	"github.com/gpud/gpud/pkg/simnode"
)

// The kubelet APIs the agent can serve; a node uses one.
const (
	kubeletAPIDevicePlugin = "device-plugin"
	kubeletAPIDRA          = "dra"
)

// The kubelet's directories for DRA plugins. gpud creates its own
// directory under the plugins dir; the registry dir is the kubelet's.
const (
	kubeletPluginsDir  = "/var/lib/kubelet/plugins"
	kubeletRegistryDir = "/var/lib/kubelet/plugins_registry"
	defaultSysfsRoot   = "/sys"
)

// draOptions are the flags of the kubelet API choice and the DRA driver.
// The node name (--node-name) and the CDI dir (--cdi-dir) are shared with
// the rest of the agent.
type draOptions struct {
	kubeletAPI  string
	kubeconfig  string
	pluginsDir  string
	registryDir string
	sysfsRoot   string
	// apiQPS and apiBurst are the API client's rate limit (client-go's
	// token bucket). The kubelet plugin helper reads each claim of a
	// prepare from the API, so at client-go's default of 5/s a pod with
	// 32 claims waited seconds; NVIDIA's DRA driver has the same flags.
	apiQPS   float64
	apiBurst int
}

// The DRA client's default rate: a node prepares at most
// dra.MaxClaimsPerCall claims per call, so one burst covers a large pod
// and the steady rate stays modest for the API server.
const (
	defaultKubeAPIQPS   = 50
	defaultKubeAPIBurst = 100
)

func (o *draOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.kubeletAPI, "kubelet-api", kubeletAPIDevicePlugin, "how GPUs reach pods: device-plugin (the kubelet's device plugin API) or dra (the DRA driver "+dra.DriverName+": ResourceSlices and claims); a node uses one")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "with --kubelet-api dra: kubeconfig of the identity that publishes ResourceSlices and reads ResourceClaims; empty uses the in-cluster config (the pod's service account)")
	fs.StringVar(&o.pluginsDir, "kubelet-plugins-dir", kubeletPluginsDir, "with --kubelet-api dra: the kubelet's plugins dir; the driver's socket and claim checkpoint go to <dir>/"+dra.DriverName+" (created)")
	fs.StringVar(&o.registryDir, "kubelet-registry-dir", kubeletRegistryDir, "with --kubelet-api dra: the kubelet's plugin registration dir (must exist: the kubelet creates it)")
	fs.Float64Var(&o.apiQPS, "kube-api-qps", defaultKubeAPIQPS, "with --kubelet-api dra: queries per second the driver's API client may make (reading the claims it prepares, publishing ResourceSlices); client-go's default is 5")
	fs.IntVar(&o.apiBurst, "kube-api-burst", defaultKubeAPIBurst, "with --kubelet-api dra: how many API queries may go at once above --kube-api-qps; client-go's default is 10")
	fs.StringVar(&o.sysfsRoot, "sysfs-root", defaultSysfsRoot, "with --kubelet-api dra: the host's sysfs, where each GPU's PCIe root complex is read for the resource.kubernetes.io/pcieRoot attribute (a simulated node has its own topology)")
}

// draEnabled reports whether --kubelet-api is dra.
func draEnabled(o *draOptions) bool { return o.kubeletAPI == kubeletAPIDRA }

// validate checks the DRA flags; nodeName is --node-name as given (empty:
// resolved later) and cdiDir is --cdi-dir. In device-plugin mode only
// --kubelet-api itself is checked.
func (o *draOptions) validate(nodeName, cdiDir string) []error {
	switch o.kubeletAPI {
	case kubeletAPIDevicePlugin:
		return nil
	case kubeletAPIDRA:
	default:
		return []error{flagErr("kubelet-api", "%s: want device-plugin or dra", printable.Quote(o.kubeletAPI))}
	}
	var errs []error
	// --node-name is checked with the other NVML flags (nvmlFlags.validate).
	if cdiDir == "" {
		errs = append(errs, flagErr("cdi-dir", "empty: --kubelet-api dra delivers devices through CDI specs; set a dir (the container runtime's, usually /var/run/cdi)"))
	}
	if o.pluginsDir == "" {
		errs = append(errs, flagErr("kubelet-plugins-dir", "empty: want the kubelet's plugins dir (%s)", kubeletPluginsDir))
	}
	switch fi, err := os.Stat(o.registryDir); {
	case o.registryDir == "":
		errs = append(errs, flagErr("kubelet-registry-dir", "empty: want the kubelet's plugin registration dir (%s)", kubeletRegistryDir))
	case err != nil:
		errs = append(errs, flagErr("kubelet-registry-dir", "%w (the kubelet creates it: does a kubelet run on this node?)", err))
	case !fi.IsDir():
		errs = append(errs, flagErr("kubelet-registry-dir", "%s is not a directory", o.registryDir))
	}
	switch fi, err := os.Stat(o.sysfsRoot); {
	case o.sysfsRoot == "":
		errs = append(errs, flagErr("sysfs-root", "empty: want the host's sysfs (%s)", defaultSysfsRoot))
	case err != nil:
		errs = append(errs, flagErr("sysfs-root", "%w (the host's sysfs: mount it here when gpud runs in a container)", err))
	case !fi.IsDir():
		errs = append(errs, flagErr("sysfs-root", "%s is not a directory", o.sysfsRoot))
	}
	if o.apiQPS <= 0 || o.apiQPS > 10000 {
		errs = append(errs, flagErr("kube-api-qps", "%v: want more than 0 and at most 10000 (default %d)", o.apiQPS, defaultKubeAPIQPS))
	}
	if o.apiBurst < 1 || o.apiBurst > 100000 {
		errs = append(errs, flagErr("kube-api-burst", "%d: want 1 to 100000 (default %d)", o.apiBurst, defaultKubeAPIBurst))
	}
	if o.kubeconfig != "" {
		if _, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig); err != nil {
			errs = append(errs, flagErr("kubeconfig", "%w", err))
		}
	}
	return errs
}

// draRESTConfig is the API client configuration: the kubeconfig, or the
// in-cluster config when none is given.
func draRESTConfig(o *draOptions) (*rest.Config, error) { return kubeRESTConfig(o.kubeconfig) }

// draClient is the DRA driver's API client: restConfig with the
// driver's user agent and rate (--kube-api-qps, --kube-api-burst).
func draClient(o *draOptions) (kubernetes.Interface, error) {
	cfg, err := draRESTConfig(o)
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = "gpud/" + version + " (dra)"
	cfg.QPS, cfg.Burst = float32(o.apiQPS), o.apiBurst
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("dra: api client: %w", err)
	}
	return client, nil
}

// kubeRESTConfig is the client configuration of a --kubeconfig flag's
// file, or the in-cluster one when it is empty.
func kubeRESTConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, flagErr("kubeconfig", "%w", err)
		}
		return cfg, nil
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, flagErr("kubeconfig", "empty, and no in-cluster config (%w): outside a pod, pass a kubeconfig", err)
	}
	return cfg, nil
}

// draDeps are the node sources the DRA driver reads.
type draDeps struct {
	node      string
	inventory dra.InventorySource // the discovery store
	migState  func() (mig.State, error)
	slices    *mig.Slices
	// sim is the simulated node (--simulate), whose topology gives the
	// PCIe roots; nil reads them from --sysfs-root.
	sim *simnode.Node
	// sharing is the sharing config at run time; its exclusive GPUs take
	// no fractions, and a change republishes. Nil: none.
	sharing dra.Sharing
	cdiDir  string
	// mpsRoot is where the MPS daemons keep their pipe dirs; empty when
	// none runs (fractions then get their limits as environment only).
	mpsRoot string
	// files says where the device files a claim's CDI spec names are on
	// the host.
	files devnodes.Files
	// driverEdits are the driver's files every claim's CDI spec carries
	// (zero: none).
	driverEdits cdispec.ContainerEdits
	log         *slog.Logger
	// client is the API client; nil builds one from --kubeconfig or the
	// in-cluster config (tests pass a fake).
	client kubernetes.Interface
	// publishCheck is how often the driver checks that the API server
	// holds its ResourceSlices, for /readyz (zero: dra's default, 10s;
	// tests shorten it).
	publishCheck time.Duration
	// memoryLimitModes is each GPU's memory limit mode by UUID, for the
	// memoryLimitMode attribute; nil: no attribute.
	memoryLimitModes func() map[string]string
}

// newDRADriver builds the DRA driver on its sources and an API client.
// The driver follows the inventory store itself: it takes the store's
// next-change channel before each read, so no change is lost.
func newDRADriver(o *draOptions, deps draDeps) (*dra.Driver, error) {
	if msgs := validation.IsDNS1123Subdomain(deps.node); len(msgs) > 0 {
		return nil, flagErr("node-name", "%s (from $NODE_NAME, the simulated profile or the hostname) is not a Kubernetes node name: %s; set --node-name",
			printable.Quote(deps.node), strings.Join(msgs, "; "))
	}
	client := deps.client
	if client == nil {
		var err error
		if client, err = draClient(o); err != nil {
			return nil, err
		}
	}
	pluginsDir, err := filepath.Abs(o.pluginsDir)
	if err != nil {
		return nil, flagErr("kubelet-plugins-dir", "%s: %w", o.pluginsDir, err)
	}
	registryDir, err := filepath.Abs(o.registryDir)
	if err != nil {
		return nil, flagErr("kubelet-registry-dir", "%s: %w", o.registryDir, err)
	}
	cdiDir, err := filepath.Abs(deps.cdiDir)
	if err != nil {
		return nil, flagErr("cdi-dir", "%s: %w", deps.cdiDir, err)
	}
	var pcieRoot func(gpu.GPU) (string, error)
	if sim := deps.sim; sim != nil {
		pcieRoot = func(g gpu.GPU) (string, error) { return sim.PCIeRoot(g.Index) }
	} else {
		sysfs, err := filepath.Abs(o.sysfsRoot)
		if err != nil {
			return nil, flagErr("sysfs-root", "%s: %w", o.sysfsRoot, err)
		}
		pcieRoot = func(g gpu.GPU) (string, error) { return dra.PCIeRoot(sysfs, g.PCIBusID) }
	}
	st := dra.NewNodeStateSource(dra.NodeStateConfig{
		MIGCatalogs: migdra.Catalogs(deps.migState), PCIeRoot: pcieRoot, Sharing: deps.sharing, Log: deps.log,
		MemoryLimitModes: deps.memoryLimitModes,
	})
	var changed func() <-chan struct{}
	if deps.sharing != nil {
		changed = deps.sharing.SharingChanged
	}
	drv, err := dra.New(dra.Options{
		NodeName:     deps.node,
		KubeClient:   client,
		PluginDir:    filepath.Join(pluginsDir, dra.DriverName),
		RegistryDir:  registryDir,
		CDIDir:       cdiDir,
		MPSRoot:      deps.mpsRoot,
		DeviceFiles:  deps.files,
		DriverEdits:  deps.driverEdits,
		Inventory:    deps.inventory,
		NodeState:    st.NodeState,
		Changed:      changed,
		MIG:          migdra.Manager{Slices: deps.slices},
		PublishCheck: deps.publishCheck,
		Logger:       deps.log,
	})
	if err != nil {
		return nil, err // names the dra package
	}
	return drv, nil
}
