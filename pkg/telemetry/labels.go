package telemetry

import (
	"strconv"

	dto "github.com/prometheus/client_model/go"

	"github.com/gpud/gpud/pkg/gpu"
)

// variant is the label set of a device series: dcgm-exporter adds
// GPU_I_PROFILE and GPU_I_ID on MIG devices and namespace, pod and
// container on devices a container holds.
type variant uint8

const (
	vGPU variant = iota
	vMIG
	vGPUPod
	vMIGPod
	numVariants
)

var (
	baseLabels = []string{"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"}
	migLabels  = []string{"GPU_I_PROFILE", "GPU_I_ID"}
	podLabels  = []string{"namespace", "pod", "container"}
	// idLabels are gpud's per-device labels: GPU_I_ID is empty on GPUs.
	// They are the join keys with the DCGM series; the rest of a device's
	// identity is on gpud_device_info.
	idLabels = []string{"gpu", "UUID", "GPU_I_ID", "Hostname"}
)

func (v variant) labels() []string {
	out := append([]string(nil), baseLabels...)
	if v == vMIG || v == vMIGPod {
		out = append(out, migLabels...)
	}
	if v == vGPUPod || v == vMIGPod {
		out = append(out, podLabels...)
	}
	return out
}

// labelsFor computes the device's label values once per sweep. UUID is the
// physical GPU's, as in dcgm-exporter. A device held by exactly one
// container gets its pod labels; a shared one gets none, so sums over
// devices stay right (per-container use is in gpud_process_*).
func (d *DeviceSnapshot) labelsFor(hostname string) {
	idx := strconv.Itoa(d.GPUIndex)
	d.lbl = append(make([]string, 0, 11), idx, d.GPUUUID, d.PCIBusID, deviceName(d.Minor), d.Model, hostname)
	d.variant = vGPU
	giid := ""
	if d.MIG {
		giid = strconv.Itoa(d.GIID)
		d.lbl = append(d.lbl, d.GIProfile, giid)
		d.variant = vMIG
	}
	if len(d.Holders) == 1 {
		h := d.Holders[0]
		d.lbl = append(d.lbl, h.Namespace, h.Pod, h.Container)
		d.variant += vGPUPod
	}
	d.idLbl = []string{idx, d.GPUUUID, giid, hostname}

	v := d.variant
	d.lp.dcgm = labelPairs(variantNames[v], d.lbl...)
	d.lp.id = labelPairs(idLabels, d.idLbl...)
	d.lp.info = labelPairs(infoLabels, idx, d.GPUUUID, giid, hostname, deviceName(d.Minor), d.PCIBusID, d.Model)
	for i, st := range healthStates {
		d.lp.health[i] = labelPairs(healthLabels, idx, d.GPUUUID, giid, hostname, string(st))
	}
	if d.MIG {
		d.lp.migInfo = labelPairs(migInfoLabels, idx, d.GPUUUID, giid, hostname,
			d.UUID, d.GIProfile, strconv.Itoa(d.CIID), strconv.Itoa(d.PlacementStart), strconv.Itoa(d.PlacementSize))
	}
	d.lp.holders = make([][]*dto.LabelPair, len(d.Holders))
	for i, h := range d.Holders {
		d.lp.holders[i] = labelPairs(holderLabels, idx, d.GPUUUID, giid, hostname, h.Namespace, h.Pod, h.Container)
	}
}

// devicePairs are a device's label pairs, built once per sweep.
type devicePairs struct {
	dcgm, id, info, migInfo []*dto.LabelPair
	health                  [3][]*dto.LabelPair
	holders                 [][]*dto.LabelPair
}

var (
	healthStates  = [3]gpu.Health{gpu.Healthy, gpu.Unhealthy, gpu.Lost}
	infoLabels    = withID("device", "pci_bus_id", "model_name")
	healthLabels  = withID("state")
	migInfoLabels = withID("mig_uuid", "GPU_I_PROFILE", "GPU_CI_ID", "placement_start", "placement_size")
	holderLabels  = withID("namespace", "pod", "container")
	procLabels    = withID("pid", "namespace", "pod", "container", "pod_uid", "container_id")
	variantNames  = [numVariants][]string{vGPU.labels(), vMIG.labels(), vGPUPod.labels(), vMIGPod.labels()}
)

func withID(extra ...string) []string { return append(append([]string(nil), idLabels...), extra...) }

// prepare builds a process's label pairs.
func (p *ProcessSnapshot) prepare(hostname string) {
	giid := ""
	if p.GIID >= 0 {
		giid = strconv.Itoa(p.GIID)
	}
	p.lp = labelPairs(procLabels, strconv.Itoa(p.GPUIndex), p.GPUUUID, giid, hostname,
		pidLabel(p.PID), p.Namespace, p.Pod, p.Container, p.PodUID, p.ContainerID)
}
