// Package nodelabels computes GPU Feature Discovery's node labels from a
// node's GPU inventory and keeps them on the node's Node object.
//
// [Compute] is pure: inventory and options in, labels out. [Updater] owns
// exactly the labels it applies, through server-side apply with its own
// field manager: a label it applied and no longer computes is removed by
// the API server, a label anyone else set is never touched.
//
// Differences from GFD, on purpose:
//   - Mixed GPU models on one node: GFD builds one label set per model and
//     merges them in map order, so which model wins is undefined. gpud
//     labels the model of the lowest-index GPU (count: the GPUs of that
//     model), warns, and says how many models there are in
//     gpud.io/gpu-models.
//   - nvidia.com/gpu.clique needs NVLink fabric information (NVML's
//     GetGpuFabricInfo: cluster UUID and clique ID, on GB200-class
//     systems); the inventory has none, so the label is never set.
//   - nvidia.com/gpu.replicas, gpu.sharing-strategy, mps.capable,
//     gpu.mode and gpu.machine are not set: the sharing runtime and the
//     host's DMI data are not inputs here.
//   - Values are sanitized to valid label values (GFD's sanitizer, then cut
//     to 63 characters); a label that still does not validate is dropped
//     with a warning rather than failing the whole update.
package nodelabels

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gpud/gpud/pkg/gpu"
)

// The label keys. nvidia.com/ ones are GPU Feature Discovery's.
const (
	Present         = "nvidia.com/gpu.present"
	Product         = "nvidia.com/gpu.product"
	Count           = "nvidia.com/gpu.count"
	Memory          = "nvidia.com/gpu.memory"
	Family          = "nvidia.com/gpu.family"
	ComputeMajor    = "nvidia.com/gpu.compute.major"
	ComputeMinor    = "nvidia.com/gpu.compute.minor"
	DriverMajor     = "nvidia.com/cuda.driver.major"
	DriverMinor     = "nvidia.com/cuda.driver.minor"
	DriverRev       = "nvidia.com/cuda.driver.rev"
	RuntimeMajor    = "nvidia.com/cuda.runtime.major"
	RuntimeMinor    = "nvidia.com/cuda.runtime.minor"
	DriverVerMajor  = "nvidia.com/cuda.driver-version.major"
	DriverVerMinor  = "nvidia.com/cuda.driver-version.minor"
	DriverVerRev    = "nvidia.com/cuda.driver-version.revision"
	DriverVerFull   = "nvidia.com/cuda.driver-version.full"
	RuntimeVerMajor = "nvidia.com/cuda.runtime-version.major"
	RuntimeVerMinor = "nvidia.com/cuda.runtime-version.minor"
	RuntimeVerFull  = "nvidia.com/cuda.runtime-version.full"
	MIGCapable      = "nvidia.com/mig.capable"
	MIGStrategy     = "nvidia.com/mig.strategy"
	MIGConfigState  = "nvidia.com/mig.config.state"
	Clique          = "nvidia.com/gpu.clique"

	// gpud's own: what GFD does not say.
	NVLinkDomains    = "gpud.io/nvlink-domains"
	NVLinkDomainGPUs = "gpud.io/nvlink-domain-gpus"
	GPUNUMANodes     = "gpud.io/gpu-numa-nodes"
	GPUModels        = "gpud.io/gpu-models"
)

// MIG strategies, as the device plugin's --mig-strategy names them.
const (
	StrategyNone   = "none"
	StrategySingle = "single"
	StrategyMixed  = "mixed"
)

// MIG config states, as NVIDIA's mig-manager writes them.
const (
	StatePending = "pending"
	StateSuccess = "success"
	StateFailed  = "failed"
)

// Options are what the labels depend on besides the inventory.
type Options struct {
	// MIGStrategy is how the device plugin advertises MIG devices: none,
	// single or mixed; empty (the DRA driver, which has no strategy) labels
	// whole GPUs and sets no nvidia.com/mig.strategy, as GFD does for none.
	MIGStrategy string
	// MIGConfigState is the state of the configured MIG layout (pending,
	// success, failed); empty when no layout is configured, and then the
	// label is not set, as mig-manager sets it only for a node with a
	// desired config.
	MIGConfigState string
}

// Result is a computed label set and what was odd about the node.
type Result struct {
	Labels   map[string]string
	Warnings []string
}

// Compute returns the labels for inv. A node without GPUs gets none (GFD
// writes no labels then), so an updater removes all it set.
func Compute(inv gpu.Inventory, o Options) Result {
	r := Result{Labels: map[string]string{}}
	if len(inv.GPUs) == 0 {
		return r
	}
	gpus := slices.Clone(inv.GPUs)
	sort.SliceStable(gpus, func(i, j int) bool { return gpus[i].Index < gpus[j].Index })
	first := gpus[0]
	models := map[string]int{}
	for _, g := range gpus {
		models[g.Name]++
	}
	if len(models) > 1 {
		names := make([]string, 0, len(models))
		for n := range models {
			names = append(names, n)
		}
		sort.Strings(names)
		r.warnf("GPU models %q on one node: labels describe %q (the lowest-index GPU's)", names, first.Name)
	}
	l := r.Labels
	l[Present] = "true"
	l[GPUModels] = strconv.Itoa(len(models))
	fullGPULabels(l, first, models[first.Name])
	r.versionLabels(inv.Node)
	capable := false
	for _, g := range gpus {
		capable = capable || g.MIGCapable
	}
	l[MIGCapable] = strconv.FormatBool(capable)
	switch o.MIGStrategy {
	case "", StrategyNone:
	case StrategySingle:
		l[MIGStrategy] = o.MIGStrategy
		r.migSingle(gpus, first)
	case StrategyMixed:
		l[MIGStrategy] = o.MIGStrategy
		r.migMixed(gpus)
	default:
		r.warnf("MIG strategy %q unknown: no MIG labels", o.MIGStrategy)
	}
	if o.MIGConfigState != "" {
		l[MIGConfigState] = o.MIGConfigState
	}
	domains, largest := nvlinkDomains(inv)
	l[NVLinkDomains] = strconv.Itoa(domains)
	if domains > 0 {
		l[NVLinkDomainGPUs] = strconv.Itoa(largest)
	}
	if numa := numaNodes(gpus); numa != "" {
		l[GPUNUMANodes] = numa
	}
	r.validate()
	return r
}

func (r *Result) warnf(format string, args ...any) {
	r.Warnings = append(r.Warnings, fmt.Sprintf(format, args...))
}

// fullGPULabels are GFD's labels of a whole GPU model on nvidia.com/gpu.
func fullGPULabels(l map[string]string, g gpu.GPU, count int) {
	l[Product] = SanitizeValue(g.Name)
	l[Count] = strconv.Itoa(count)
	if mib := g.MemoryBytes >> 20; mib > 0 {
		l[Memory] = strconv.FormatUint(mib, 10)
	}
	major, minor, ok := computeCapability(g.ComputeCapability)
	if !ok || major == 0 {
		return
	}
	l[Family] = archFamily(major, minor)
	l[ComputeMajor] = strconv.Itoa(major)
	l[ComputeMinor] = strconv.Itoa(minor)
}

// versionLabels are GFD's driver and CUDA labels: cuda.driver.* is the
// kernel driver's version (550.54.15: major 550, minor 54, rev 15) and
// cuda.runtime.* the CUDA version the driver supports (12.4), with the
// newer cuda.driver-version.* and cuda.runtime-version.* spellings.
func (r *Result) versionLabels(n gpu.Node) {
	l := r.Labels
	if n.DriverVersion != "" {
		parts := strings.Split(n.DriverVersion, ".")
		if len(parts) < 2 || len(parts) > 3 {
			r.warnf("driver version %q is not X.Y[.Z]: no driver labels", n.DriverVersion)
		} else {
			rev := ""
			if len(parts) == 3 {
				rev = parts[2]
			}
			l[DriverMajor], l[DriverMinor], l[DriverRev] = parts[0], parts[1], rev
			l[DriverVerMajor], l[DriverVerMinor], l[DriverVerRev] = parts[0], parts[1], rev
			l[DriverVerFull] = n.DriverVersion
		}
	}
	if n.CUDADriverVersion != "" {
		major, minor, ok := computeCapability(n.CUDADriverVersion)
		if !ok {
			r.warnf("CUDA driver version %q is not X.Y: no CUDA runtime labels", n.CUDADriverVersion)
			return
		}
		l[RuntimeMajor], l[RuntimeMinor] = strconv.Itoa(major), strconv.Itoa(minor)
		l[RuntimeVerMajor], l[RuntimeVerMinor] = strconv.Itoa(major), strconv.Itoa(minor)
		l[RuntimeVerFull] = fmt.Sprintf("%d.%d", major, minor)
	}
}

// migSingle is GFD's single strategy: when every GPU has MIG on with one
// profile, nvidia.com/gpu.* describe the MIG devices (product
// <model>-MIG-<profile>, their count and memory); a node where some GPUs
// have MIG on and the layout is not uniform gets GFD's INVALID labels; no
// GPU with MIG on is the none strategy.
func (r *Result) migSingle(gpus []gpu.GPU, first gpu.GPU) {
	var enabled, disabled, empty int
	profiles := map[string][]gpu.MIGDevice{}
	for _, g := range gpus {
		switch {
		case !g.MIGEnabled:
			disabled++
			continue
		case len(g.MIGDevices) == 0:
			empty++
		}
		enabled++
		for _, m := range g.MIGDevices {
			profiles[m.Profile] = append(profiles[m.Profile], m)
		}
	}
	if enabled == 0 {
		return
	}
	l := r.Labels
	reason := ""
	switch {
	case empty > 0:
		reason = "a GPU has MIG enabled but no MIG devices"
	case disabled > 0:
		reason = "GPUs with MIG enabled and disabled"
	case len(profiles) != 1:
		reason = "more than one MIG profile"
	}
	if reason != "" {
		r.warnf("mig strategy single: %s: product %s-MIG-INVALID", reason, first.Name)
		l[Product] = SanitizeValue(first.Name + "-MIG-INVALID")
		l[Count], l[Memory] = "0", "0"
		return
	}
	for profile, devs := range profiles {
		migLabels(l, "nvidia.com/gpu", first.Name, profile, devs)
	}
}

// migMixed is GFD's mixed strategy: nvidia.com/mig-<profile>.* per MIG
// profile present on the node.
func (r *Result) migMixed(gpus []gpu.GPU) {
	profiles := map[string][]gpu.MIGDevice{}
	parent := map[string]string{}
	for _, g := range gpus {
		if !g.MIGEnabled {
			continue
		}
		for _, m := range g.MIGDevices {
			profiles[m.Profile] = append(profiles[m.Profile], m)
			if _, ok := parent[m.Profile]; !ok {
				parent[m.Profile] = g.Name
			}
		}
	}
	for profile, devs := range profiles {
		migLabels(r.Labels, "nvidia.com/mig-"+SanitizeKeyName(profile), parent[profile], profile, devs)
	}
}

// migLabels are GFD's labels of one MIG profile on resource: product,
// count and the device's attributes (memory in MiB, multiprocessors, GPU
// and compute instance slices).
func migLabels(l map[string]string, resource, model, profile string, devs []gpu.MIGDevice) {
	m := devs[0]
	l[resource+".product"] = SanitizeValue(model + "-MIG-" + profile)
	l[resource+".count"] = strconv.Itoa(len(devs))
	l[resource+".memory"] = strconv.FormatUint(m.MemoryBytes>>20, 10)
	if m.SMCount > 0 {
		l[resource+".multiprocessors"] = strconv.Itoa(m.SMCount)
	}
	if gi, ci, ok := profileSlices(profile); ok {
		l[resource+".slices.gi"] = strconv.Itoa(gi)
		l[resource+".slices.ci"] = strconv.Itoa(ci)
	}
}

var profileRE = regexp.MustCompile(`^(?:(\d+)c\.)?(\d+)g\.\d+gb`)

// profileSlices parses a MIG profile name: 3g.40gb is 3 GPU slices and 3
// compute slices; 1c.3g.40gb is 3 and 1.
func profileSlices(p string) (gi, ci int, ok bool) {
	m := profileRE.FindStringSubmatch(p)
	if m == nil {
		return 0, 0, false
	}
	gi, _ = strconv.Atoi(m[2])
	ci = gi
	if m[1] != "" {
		ci, _ = strconv.Atoi(m[1])
	}
	return gi, ci, true
}

// computeCapability parses "9.0" (or a CUDA version "12.4").
func computeCapability(s string) (major, minor int, ok bool) {
	a, b, found := strings.Cut(s, ".")
	if !found {
		return 0, 0, false
	}
	var err1, err2 error
	major, err1 = strconv.Atoi(a)
	minor, err2 = strconv.Atoi(b)
	return major, minor, err1 == nil && err2 == nil && major >= 0 && minor >= 0
}

// archFamily is GFD's family name for a compute capability.
func archFamily(major, minor int) string {
	switch major {
	case 1:
		return "tesla"
	case 2:
		return "fermi"
	case 3:
		return "kepler"
	case 5:
		return "maxwell"
	case 6:
		return "pascal"
	case 7:
		if minor < 5 {
			return "volta"
		}
		return "turing"
	case 8:
		if minor < 9 {
			return "ampere"
		}
		return "ada-lovelace"
	case 9:
		return "hopper"
	case 10, 12:
		return "blackwell"
	}
	return "undefined"
}

// nvlinkDomains counts the groups of GPUs joined by NVLink (directly or
// through others: one NVSwitch fabric) and the size of the largest; a GPU
// without NVLink is in none.
func nvlinkDomains(inv gpu.Inventory) (count, largest int) {
	parent := map[string]string{}
	for _, g := range inv.GPUs {
		parent[g.UUID] = g.UUID
	}
	var find func(string) string
	find = func(u string) string {
		if parent[u] != u {
			parent[u] = find(parent[u])
		}
		return parent[u]
	}
	linked := map[string]bool{}
	for _, ln := range inv.Links {
		_, okA := parent[ln.A]
		_, okB := parent[ln.B]
		if ln.Level != gpu.LinkNVLink || ln.NVLinks == 0 || !okA || !okB || ln.A == ln.B {
			continue
		}
		linked[ln.A], linked[ln.B] = true, true
		if a, b := find(ln.A), find(ln.B); a != b {
			parent[a] = b
		}
	}
	size := map[string]int{}
	for u := range linked {
		size[find(u)]++
	}
	for _, n := range size {
		largest = max(largest, n)
	}
	return len(size), largest
}

// numaNodes lists the NUMA nodes with GPUs, ascending, dot-separated.
func numaNodes(gpus []gpu.GPU) string {
	var nodes []int
	for _, g := range gpus {
		if g.NUMANode >= 0 && !slices.Contains(nodes, g.NUMANode) {
			nodes = append(nodes, g.NUMANode)
		}
	}
	slices.Sort(nodes)
	parts := make([]string, len(nodes))
	for i, n := range nodes {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ".")
}

// validate drops any label whose key or value is not valid (after
// sanitizing, only an unexpected input gets here) with a warning.
func (r *Result) validate() {
	for k, v := range r.Labels {
		msgs := validation.IsQualifiedName(k)
		msgs = append(msgs, validation.IsValidLabelValue(v)...)
		if len(msgs) > 0 {
			r.warnf("label %s=%q dropped: %s", k, v, strings.Join(msgs, "; "))
			delete(r.Labels, k)
		}
	}
	sort.Strings(r.Warnings)
}

var unsafeValueChars = regexp.MustCompile(`[^A-Za-z0-9\-_. ]`)

// SanitizeValue makes s a valid label value as GFD does (drop characters
// other than letters, digits, '-', '_', '.' and spaces; runs of spaces
// become one '-'), then cuts it to 63 characters and trims what may not
// start or end a value.
func SanitizeValue(s string) string {
	s = strings.Join(strings.Fields(unsafeValueChars.ReplaceAllString(s, "")), "-")
	if len(s) > validation.LabelValueMaxLength {
		s = s[:validation.LabelValueMaxLength]
	}
	return strings.TrimFunc(s, func(r rune) bool { return !isAlnum(r) })
}

var unsafeKeyChars = regexp.MustCompile(`[^A-Za-z0-9\-_.]`)

// SanitizeKeyName makes a MIG profile usable in a label key's name part:
// 1g.10gb+me becomes 1g.10gb.me.
func SanitizeKeyName(s string) string {
	return unsafeKeyChars.ReplaceAllString(s, ".")
}

func isAlnum(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
}
