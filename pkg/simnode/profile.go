package simnode

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/goccy/go-yaml"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gpud/gpud/internal/fileio"
	"github.com/gpud/gpud/internal/strictyaml"
)

// Profile describes a simulated node: its GPUs and how they are wired. It is
// what a user writes in a node YAML file (see deploy/examples/simnode.yaml).
type Profile struct {
	// Name is the profile's name and the node's name unless WithNodeName
	// (--node-name) gives another; GPU UUIDs derive from the node name, this
	// name and the index.
	Name string `yaml:"name"`
	// Model is one of ModelNames().
	Model string `yaml:"model"`
	// Count is the number of GPUs, 1 to [MaxGPUs].
	Count int `yaml:"count"`
	// NUMANodes splits the GPUs evenly over this many NUMA nodes (default
	// 1); it must divide Count, at most [MaxNUMANodes].
	NUMANodes int `yaml:"numaNodes"`
	// CPUsPerNUMANode is the host CPUs per NUMA node (default 32), at most
	// [MaxCPUsPerNUMANode].
	CPUsPerNUMANode int `yaml:"cpusPerNUMANode"`
	// Interconnect is "nvswitch" (every pair NVLinked) or "pcie".
	Interconnect string `yaml:"interconnect"`
	// GPUsPerPCIeSwitch is how many GPUs share a PCIe switch (default 1).
	GPUsPerPCIeSwitch int `yaml:"gpusPerPCIeSwitch"`
	// DriverVersion and CUDADriverVersion are reported by NVML (default
	// 550.54.15 and 12040). The driver's branch (its major number) decides
	// what it has: per-cgroup memory limits need r615
	// ([MemoryLimitsMinDriver]).
	DriverVersion     string `yaml:"driverVersion"`
	CUDADriverVersion int    `yaml:"cudaDriverVersion"`
	// Seed drives the simulated telemetry (utilization, power, temperature).
	Seed int64 `yaml:"seed"`
}

// Bounds on a node profile: a simulated node is one real server.
const (
	MaxGPUs            = 16
	MaxNUMANodes       = 8
	MaxCPUsPerNUMANode = 512
)

// builtins are the node profiles `--simulate NAME` accepts.
var builtins = map[string]Profile{
	"dgx-a100":  {Name: "dgx-a100", Model: "A100-SXM4-40GB", Count: 8, NUMANodes: 2, CPUsPerNUMANode: 64, Interconnect: "nvswitch", GPUsPerPCIeSwitch: 2},
	"dgx-h100":  {Name: "dgx-h100", Model: "H100-SXM5-80GB", Count: 8, NUMANodes: 2, CPUsPerNUMANode: 56, Interconnect: "nvswitch", GPUsPerPCIeSwitch: 1},
	"dgx-h200":  {Name: "dgx-h200", Model: "H200-SXM5-141GB", Count: 8, NUMANodes: 2, CPUsPerNUMANode: 56, Interconnect: "nvswitch", GPUsPerPCIeSwitch: 1},
	"pcie-l40s": {Name: "pcie-l40s", Model: "L40S", Count: 4, NUMANodes: 2, CPUsPerNUMANode: 32, Interconnect: "pcie", GPUsPerPCIeSwitch: 2},
}

// BuiltinNames lists the built-in node profiles, sorted.
func BuiltinNames() []string {
	return slices.Sorted(maps.Keys(builtins))
}

// LoadProfile resolves `--simulate NAME|FILE.yaml`: a built-in name, or a
// path to a YAML node profile (read up to [fileio.MaxConfigBytes]).
func LoadProfile(nameOrPath string) (Profile, error) {
	if p, ok := builtins[nameOrPath]; ok {
		return p.withDefaults(), nil
	}
	if !strings.HasSuffix(nameOrPath, ".yaml") && !strings.HasSuffix(nameOrPath, ".yml") {
		return Profile{}, fmt.Errorf("simnode: unknown node %q: use one of %s, or a .yaml profile file", nameOrPath, strings.Join(BuiltinNames(), ", "))
	}
	data, err := fileio.ReadFile(nameOrPath, fileio.MaxConfigBytes)
	if err != nil {
		return Profile{}, fmt.Errorf("simnode: read profile: %w", err)
	}
	p, err := ParseProfile(data)
	if err != nil {
		return Profile{}, fmt.Errorf("%s: %w", nameOrPath, err) // ErrBadProfile names the package
	}
	return p, nil
}

// ParseProfile decodes a YAML node profile strictly: unknown fields,
// numbers that are not whole and bad values are errors naming the field and
// its line; they wrap ErrBadProfile.
func ParseProfile(data []byte) (Profile, error) {
	var p Profile
	if err := strictyaml.Unmarshal(data, &p); err != nil {
		return Profile{}, fmt.Errorf("%w: %w", ErrBadProfile, err)
	}
	if err := p.validate(data); err != nil {
		return Profile{}, fmt.Errorf("%w: %w", ErrBadProfile, err)
	}
	return p.withDefaults(), nil
}

func (p Profile) withDefaults() Profile {
	if p.NUMANodes == 0 {
		p.NUMANodes = 1
	}
	if p.CPUsPerNUMANode == 0 {
		p.CPUsPerNUMANode = 32
	}
	if p.GPUsPerPCIeSwitch == 0 {
		p.GPUsPerPCIeSwitch = 1
	}
	if p.Interconnect == "" {
		p.Interconnect = "pcie"
		if models[p.Model].nvlinks > 0 {
			p.Interconnect = "nvswitch"
		}
	}
	if p.DriverVersion == "" {
		p.DriverVersion = "550.54.15"
	}
	if p.CUDADriverVersion == 0 {
		p.CUDADriverVersion = 12040
	}
	return p
}

// validate checks values; data (when non-nil) is the YAML source, used to
// name the line of a bad field.
func (p Profile) validate(data []byte) error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("field %q%s: %s", field, lineOf(data, field), fmt.Sprintf(format, args...)))
	}
	if p.Name == "" {
		bad("name", "is required")
	} else if msgs := validation.IsDNS1123Subdomain(p.Name); len(msgs) > 0 {
		// The name is the node's name unless --node-name says otherwise.
		bad("name", "%q is not a Kubernetes node name: %s", p.Name, strings.Join(msgs, "; "))
	}
	m, ok := models[p.Model]
	if !ok {
		bad("model", "unknown GPU model %q, want one of %s", p.Model, strings.Join(ModelNames(), ", "))
	}
	countOK := p.Count >= 1 && p.Count <= MaxGPUs
	if !countOK {
		bad("count", "%d GPUs, want 1 to %d", p.Count, MaxGPUs)
	}
	switch {
	case p.NUMANodes < 0 || p.NUMANodes > MaxNUMANodes:
		bad("numaNodes", "%d, want 1 to %d", p.NUMANodes, MaxNUMANodes)
	case countOK && p.NUMANodes > 0 && p.Count%p.NUMANodes != 0:
		bad("numaNodes", "%d does not divide count %d: the GPUs are split evenly over the NUMA nodes, so use a divisor of %d", p.NUMANodes, p.Count, p.Count)
	}
	if p.CPUsPerNUMANode < 0 || p.CPUsPerNUMANode > MaxCPUsPerNUMANode {
		bad("cpusPerNUMANode", "%d, want 1 to %d", p.CPUsPerNUMANode, MaxCPUsPerNUMANode)
	}
	if p.GPUsPerPCIeSwitch < 0 || p.GPUsPerPCIeSwitch > MaxGPUs {
		bad("gpusPerPCIeSwitch", "%d, want 1 to %d", p.GPUsPerPCIeSwitch, MaxGPUs)
	}
	if p.DriverVersion != "" {
		if _, err := driverBranch(p.DriverVersion); err != nil {
			bad("driverVersion", "%v", err)
		}
	}
	if p.CUDADriverVersion < 0 {
		bad("cudaDriverVersion", "%d, want a version like 12040", p.CUDADriverVersion)
	}
	switch p.Interconnect {
	case "", "pcie":
	case "nvswitch":
		if ok && m.nvlinks == 0 {
			bad("interconnect", "nvswitch needs a model with NVLink; %s has none", p.Model)
		}
	default:
		bad("interconnect", "%q, want nvswitch or pcie", p.Interconnect)
	}
	return errors.Join(errs...)
}

// lineOf returns " (line N)" for a top-level field in the YAML source.
func lineOf(data []byte, field string) string {
	if data == nil {
		return ""
	}
	path, err := yaml.PathString("$." + field)
	if err != nil {
		return ""
	}
	file, err := strictyaml.Parse(data)
	if err != nil {
		return ""
	}
	node, err := path.FilterFile(file)
	if err != nil || node == nil || node.GetToken() == nil {
		return ""
	}
	return fmt.Sprintf(" (line %d)", node.GetToken().Position.Line)
}
