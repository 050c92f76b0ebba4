package dra

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/deviceattribute"

	"github.com/gpud/gpud/pkg/gpu"
)

// TaintKey is the key of the taint an unhealthy device carries; the value
// is the health monitor's reason.
const TaintKey = "gpu.gpud.io/unhealthy"

// maxAttrString is the API's limit on a string or version attribute.
const maxAttrString = resourceapi.DeviceAttributeMaxValueLength

func str(s string) resourceapi.DeviceAttribute {
	if len(s) > maxAttrString {
		s = s[:maxAttrString]
	}
	return resourceapi.DeviceAttribute{StringValue: &s}
}

func integer(i int) resourceapi.DeviceAttribute {
	v := int64(i)
	return resourceapi.DeviceAttribute{IntValue: &v}
}

func boolean(b bool) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{BoolValue: &b} }

func version(v string) resourceapi.DeviceAttribute {
	return resourceapi.DeviceAttribute{VersionValue: &v}
}

func cloneAttrs(m map[resourceapi.QualifiedName]resourceapi.DeviceAttribute) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	out := make(map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, len(m)+8)
	maps.Copy(out, m)
	return out
}

// commonAttrs are the attributes a GPU and its MIG devices share.
func commonAttrs(n gpu.Node, g *gpu.GPU, pcieRoot string) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	a := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"productName": str(g.Name),
		"numaNode":    integer(g.NUMANode),
	}
	if g.Brand != "" {
		a["brand"] = str(g.Brand)
	}
	if g.Architecture != "" {
		a["architecture"] = str(g.Architecture)
	}
	for name, v := range map[resourceapi.QualifiedName]string{
		"cudaComputeCapability": g.ComputeCapability,
		"driverVersion":         n.DriverVersion,
		"cudaDriverVersion":     n.CUDADriverVersion,
	} {
		if sv, ok := semver(v); ok {
			a[name] = version(sv)
		}
	}
	if id, ok := pciBusID(g.PCIBusID); ok {
		a["pcieBusID"] = str(id)
		a[deviceattribute.StandardDeviceAttributePCIBusID] = str(id)
	}
	if pcieRoot != "" {
		a[deviceattribute.StandardDeviceAttributePCIeRoot] = str(pcieRoot)
	}
	return a
}

// semver turns NVML's dotted numbers ("8.0", "550.54.15", "12.4") into
// semantic versions ("8.0.0"), dropping leading zeros; ok is false for
// anything else.
func semver(v string) (string, bool) {
	parts := strings.Split(strings.TrimSpace(v), ".")
	if v == "" || len(parts) > 3 {
		return "", false
	}
	nums := make([]string, 3)
	for i := range nums {
		nums[i] = "0"
		if i < len(parts) {
			n, err := strconv.ParseUint(parts[i], 10, 32)
			if err != nil {
				return "", false
			}
			nums[i] = strconv.FormatUint(n, 10)
		}
	}
	return strings.Join(nums, "."), true
}

// pciBusID turns NVML's bus ID ("00000000:18:00.0") into the sysfs form
// ("0000:18:00.0") that resource.kubernetes.io/pciBusID uses.
func pciBusID(id string) (string, bool) {
	id = strings.ToLower(strings.TrimSpace(id))
	dom, rest, ok := strings.Cut(id, ":")
	if !ok || len(dom) < 4 || len(rest) != len("18:00.0") {
		return "", false
	}
	dom = dom[len(dom)-4:]
	out := dom + ":" + rest
	for i, r := range out {
		switch i {
		case 4, 7:
			if r != ':' {
				return "", false
			}
		case 10:
			if r != '.' {
				return "", false
			}
		default:
			if !strings.ContainsRune("0123456789abcdef", r) {
				return "", false
			}
		}
	}
	return out, true
}

// nvlinkDomains names each GPU's NVLink domain: GPUs joined by NVLink
// links, directly or through others (one NVSwitch fabric), share one; a GPU
// without NVLink has its own. Names are "<node>-nvl<k>", k numbering the
// domains by their lowest GPU index, hashed when longer than an attribute
// may be.
func nvlinkDomains(node string, inv gpu.Inventory) map[string]string {
	parent := map[string]string{}
	find := func(u string) string {
		for parent[u] != u {
			parent[u] = parent[parent[u]]
			u = parent[u]
		}
		return u
	}
	index := map[string]int{}
	for _, g := range inv.GPUs {
		parent[g.UUID] = g.UUID
		index[g.UUID] = g.Index
	}
	for _, l := range inv.Links {
		_, okA := parent[l.A]
		_, okB := parent[l.B]
		if l.Level != gpu.LinkNVLink || !okA || !okB {
			continue
		}
		a, b := find(l.A), find(l.B)
		if a != b {
			parent[a] = b
		}
	}
	lowest := map[string]int{}
	for u, i := range index {
		r := find(u)
		if cur, ok := lowest[r]; !ok || i < cur {
			lowest[r] = i
		}
	}
	roots := make([]string, 0, len(lowest))
	for r := range lowest {
		roots = append(roots, r)
	}
	sort.Slice(roots, func(i, j int) bool { return lowest[roots[i]] < lowest[roots[j]] })
	prefix := node
	if len(prefix)+len("-nvl99") > maxAttrString {
		sum := sha256.Sum256([]byte(node))
		prefix = node[:32] + "-" + hex.EncodeToString(sum[:8])
	}
	name := map[string]string{}
	for k, r := range roots {
		name[r] = fmt.Sprintf("%s-nvl%d", prefix, k)
	}
	out := make(map[string]string, len(index))
	for u := range index {
		out[u] = name[find(u)]
	}
	return out
}

// health normalizes an empty health to Healthy.
func health(h gpu.Health) gpu.Health {
	if h == "" {
		return gpu.Healthy
	}
	return h
}

// taints is a device's taint for its health: none when healthy, NoExecute
// for a lost GPU or an uncorrectable ECC error, NoSchedule for the rest.
func taints(h gpu.Health, reason string) []resourceapi.DeviceTaint {
	effect := TaintEffect(h, reason)
	if effect == "" {
		return nil
	}
	return []resourceapi.DeviceTaint{{Key: TaintKey, Value: taintValue(h, reason), Effect: effect}}
}

// TaintEffect is the taint effect for a health state: "" when healthy,
// NoExecute for a lost GPU or an uncorrectable (double-bit) ECC error,
// NoSchedule for other errors, which may heal.
func TaintEffect(h gpu.Health, reason string) resourceapi.DeviceTaintEffect {
	switch {
	case h == "" || h == gpu.Healthy:
		return ""
	case gpu.Fatal(h, reason):
		return resourceapi.DeviceTaintEffectNoExecute
	}
	return resourceapi.DeviceTaintEffectNoSchedule
}

// taintValue turns a reason into a label value: letters, digits, '-', '_'
// and '.', at most 63 characters, starting and ending alphanumeric.
func taintValue(h gpu.Health, reason string) string {
	if reason == "" {
		reason = string(h)
	}
	var b strings.Builder
	dash := false
	for _, r := range reason {
		ok := (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') || r == '.' || r == '_'
		switch {
		case ok:
			b.WriteRune(r)
			dash = false
		case !dash:
			b.WriteByte('-')
			dash = true
		}
	}
	v := b.String()
	if len(v) > 63 {
		v = v[:63]
	}
	v = strings.TrimFunc(v, func(r rune) bool { return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') })
	if v == "" {
		return string(health(h))
	}
	return v
}
