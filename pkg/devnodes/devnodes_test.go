package devnodes

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

func paths(nodes []*cdispec.DeviceNode) (out []string) {
	for _, n := range nodes {
		out = append(out, n.Path+"<-"+n.HostPath)
	}
	return out
}

// A GPU node's specs name the driver's files in /dev, all of them, whether
// or not the runtime's host has them now (the driver creates some lazily).
func TestGPUNodeNamesHostDev(t *testing.T) {
	f := Files{}
	got := paths(append(f.Common(), f.MIG(2, 3, 0)...))
	want := []string{"/dev/nvidiactl<-", "/dev/nvidia-uvm<-", "/dev/nvidia-uvm-tools<-", "/dev/nvidia2<-",
		"/dev/nvidia-caps/nvidia-cap300<-", "/dev/nvidia-caps/nvidia-cap301<-"}
	if len(got) != len(want) {
		t.Fatalf("nodes %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("nodes %v, want %v", got, want)
		}
	}
}

// A simulated node without device files names none, so containerd 2
// (which stats every CDI host device) still starts the container.
func TestSimulatedNodeNamesOnlyExistingFiles(t *testing.T) {
	root := t.TempDir()
	f := Files{Root: root, OnlyExisting: true}
	if got := append(f.Common(), f.GPU(0)...); len(got) != 0 {
		t.Fatalf("nodes %v from an empty root, want none", paths(got))
	}
	if err := os.WriteFile(filepath.Join(root, "nvidia0"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	got := paths(f.GPU(0))
	if len(got) != 1 || got[0] != "/dev/nvidia0<-"+filepath.Join(root, "nvidia0") {
		t.Fatalf("nodes %v, want /dev/nvidia0 from %s", got, root)
	}
}

func TestCapMinors(t *testing.T) {
	// /proc/driver/nvidia-caps/mig-minors on an A100: gpu0/gi1/access 12,
	// gpu0/gi1/ci0/access 13; gpu1/gi0/access 138.
	for _, tc := range []struct{ gpu, gi, ci, wantGI, wantCI int }{{0, 1, 0, 12, 13}, {1, 0, 2, 138, 141}} {
		if gi, ci := CapMinors(tc.gpu, tc.gi, tc.ci); gi != tc.wantGI || ci != tc.wantCI {
			t.Errorf("CapMinors(%d, %d, %d) = %d, %d; want %d, %d", tc.gpu, tc.gi, tc.ci, gi, ci, tc.wantGI, tc.wantCI)
		}
	}
}

// Create makes character nodes of the driver's majors; opening one with no
// driver loaded gives ENXIO, as a container's allowed open does on a
// simulated node. A second Create keeps them; a wrong file is refused.
func TestCreate(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mknod needs root")
	}
	root := filepath.Join(t.TempDir(), "dev")
	if err := Create(root, []int{0, 7}); err != nil {
		if errors.Is(err, unix.EPERM) {
			t.Skipf("no CAP_MKNOD here: %v", err)
		}
		t.Fatal(err)
	}
	if err := Create(root, []int{0, 7}); err != nil {
		t.Fatalf("second Create: %v", err)
	}
	gi, _ := CapMinors(7, 14, 7)
	for p, want := range map[string]uint64{
		"nvidia7": unix.Mkdev(GPUMajor, 7), "nvidiactl": unix.Mkdev(GPUMajor, CtlMinor),
		"nvidia-uvm": unix.Mkdev(SimUVMMajor, 0),
		"nvidia-caps/nvidia-cap" + strconv.Itoa(gi): unix.Mkdev(SimCapsMajor, uint32(gi)),
	} {
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(root, p), &st); err != nil {
			t.Fatal(err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != want {
			t.Errorf("%s: mode %o rdev %d:%d, want a character device %d:%d", p, st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev), unix.Major(want), unix.Minor(want))
		}
	}
	if _, err := os.Open(filepath.Join(root, "nvidia0")); !errors.Is(err, unix.ENXIO) && !errors.Is(err, unix.EACCES) {
		// EACCES: the temp dir's filesystem is mounted nodev.
		t.Errorf("open nvidia0 = %v, want ENXIO (no driver behind major 195)", err)
	}
	if err := os.Remove(filepath.Join(root, "nvidia7")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "nvidia7"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Create(root, []int{7}); err == nil {
		t.Error("Create kept a regular file where nvidia7 goes")
	}
	if err := Create(root, []int{254}); err == nil {
		t.Error("Create took minor 254 (nvidia-modeset)")
	}
}

func TestFillEmpty(t *testing.T) {
	var e cdispec.ContainerEdits
	FillEmpty(&e, "GPU-1bca-44::2")
	if len(e.Env) != 1 || e.Env[0] != "GPUD_SIM_GPU_1BCA_44__2=GPU-1bca-44::2" {
		t.Fatalf("env %v", e.Env)
	}
	FillEmpty(&e, "other")
	if len(e.Env) != 1 {
		t.Fatalf("filled edits that were not empty: %v", e.Env)
	}
}
