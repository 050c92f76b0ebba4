package topology

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/gpud/gpud/pkg/gpu"
)

// legend is nvidia-smi's explanation of the matrix cells.
const legend = `
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
`

// Format writes the matrix as `nvidia-smi topo -m` prints it: one row and
// column per GPU, then CPU and NUMA affinity, then the legend.
func Format(w io.Writer, inv gpu.Inventory) error {
	m := New(inv)
	tw := tabwriter.NewWriter(w, 0, 8, 1, '\t', 0)
	header := []string{""}
	for _, g := range inv.GPUs {
		header = append(header, "GPU"+strconv.Itoa(g.Index))
	}
	header = append(header, "CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for i, a := range inv.GPUs {
		row := []string{"GPU" + strconv.Itoa(a.Index)}
		for j, b := range inv.GPUs {
			switch {
			case i == j:
				row = append(row, " X ")
			default:
				if l, ok := m.Link(a.UUID, b.UUID); ok && l.Level != gpu.LinkUnknown {
					row = append(row, l.Label())
				} else {
					row = append(row, "N/A")
				}
			}
		}
		numa := "N/A"
		if a.NUMANode >= 0 {
			numa = strconv.Itoa(a.NUMANode)
		}
		row = append(row, cpuRanges(a.CPUAffinity), numa, "N/A")
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("topology: write matrix: %w", err)
	}
	_, err := io.WriteString(w, legend)
	return err
}

// cpuRanges prints CPUs as nvidia-smi does: 0-55,112-167.
func cpuRanges(cpus []int) string {
	if len(cpus) == 0 {
		return "N/A"
	}
	var parts []string
	start, prev := cpus[0], cpus[0]
	flush := func() {
		if start == prev {
			parts = append(parts, strconv.Itoa(start))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", start, prev))
		}
	}
	for _, c := range cpus[1:] {
		if c == prev+1 {
			prev = c
			continue
		}
		flush()
		start, prev = c, c
	}
	flush()
	return strings.Join(parts, ",")
}
