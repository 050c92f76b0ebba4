package dra

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/dynamic-resource-allocation/deviceattribute"
)

// fakeSysfs builds a sysfs tree under t.TempDir() with each bus ID (sysfs
// form) under a root port of the root complex its entry names, and
// linked from bus/pci/devices as Linux links it.
func fakeSysfs(t *testing.T, devices map[string]string) string {
	t.Helper()
	root := t.TempDir()
	bus := filepath.Join(root, "bus", "pci", "devices")
	if err := os.MkdirAll(bus, 0o755); err != nil {
		t.Fatal(err)
	}
	for id, rc := range devices {
		rel := filepath.Join("devices", rc, "0000:"+rc[len("pci0000:"):]+":01.0", id) // root port, GPU
		if err := os.MkdirAll(filepath.Join(root, rel), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..", "..", "..", rel), filepath.Join(bus, id)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestPCIeRootFromSysfs: the real path reads the root complex through
// deviceattribute from a sysfs root it is given (a fake tree here), from
// NVML's bus ID form.
func TestPCIeRootFromSysfs(t *testing.T) {
	root := fakeSysfs(t, map[string]string{"0000:18:00.0": "pci0000:15", "0000:2a:00.0": "pci0000:15", "0000:9a:00.0": "pci0000:97"})
	for busID, want := range map[string]string{"00000000:18:00.0": "pci0000:15", "00000000:2A:00.0": "pci0000:15", "0000:9a:00.0": "pci0000:97"} {
		got, err := PCIeRoot(root, busID)
		if err != nil || got != want {
			t.Errorf("PCIeRoot(%s) = %q, %v; want %s", busID, got, err, want)
		}
	}
	for _, tc := range []struct{ root, busID, want string }{
		{root, "00000000:5d:00.0", "0000:5d:00.0"},        // not in the tree
		{root, "bogus", `"bogus" is not a PCI bus ID`},    // not a bus ID
		{"", "00000000:18:00.0", "no sysfs root"},         // no root given
		{t.TempDir(), "00000000:18:00.0", "0000:18:00.0"}, // an empty tree
	} {
		if got, err := PCIeRoot(tc.root, tc.busID); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("PCIeRoot(%q, %s) = %q, %v; want an error with %q", tc.root, tc.busID, got, err, tc.want)
		}
	}
}

// TestSlicesPCIeRoot: with the simulated node's roots, every device of a
// GPU (whole and MIG) carries resource.kubernetes.io/pcieRoot; GPUs that
// share a root (dgx-a100: two per PCIe switch) have equal values, others
// differ (dgx-h100: a root per GPU). A GPU without a root has none.
func TestSlicesPCIeRoot(t *testing.T) {
	for _, tc := range []struct {
		profile string
		roots   int
	}{{"dgx-h100", 7}, {"dgx-a100", 4}} { // roots of GPUs 0-6
		t.Run(tc.profile, func(t *testing.T) {
			n, st, _ := buildSim(t, tc.profile)
			st.PCIeRoots = map[string]string{}
			for _, g := range st.Inventory.GPUs {
				r, err := n.PCIeRoot(g.Index)
				if err != nil {
					t.Fatal(err)
				}
				st.PCIeRoots[g.UUID] = r
			}
			missing := st.Inventory.GPUs[7].UUID
			delete(st.PCIeRoots, missing)
			pub, err := Build(tc.profile, st)
			if err != nil {
				t.Fatal(err)
			}
			checkResources(t, tc.profile, pub)
			byRoot := map[string][]int{}
			for name, d := range allDevices(pub, tc.profile) {
				ref := pub.Devices[name]
				a, ok := d.Attributes[deviceattribute.StandardDeviceAttributePCIeRoot]
				if ref.GPUUUID == missing {
					if ok {
						t.Errorf("%s: pcieRoot %v on a GPU without a root", name, a)
					}
					continue
				}
				if !ok || a.StringValue == nil || *a.StringValue != st.PCIeRoots[ref.GPUUUID] {
					t.Fatalf("%s: pcieRoot %v, want %s", name, a, st.PCIeRoots[ref.GPUUUID])
				}
				if ref.Type == TypeGPU {
					byRoot[*a.StringValue] = append(byRoot[*a.StringValue], ref.GPUIndex)
				}
			}
			if len(byRoot) != tc.roots {
				t.Errorf("roots of GPUs 0-6 %v: want %d", byRoot, tc.roots)
			}
			for r, gpus := range byRoot {
				for _, i := range gpus {
					want, _ := n.PCIeRoot(i)
					if want != r {
						t.Errorf("gpu %d under %s, want %s", i, r, want)
					}
				}
			}
		})
	}
}
