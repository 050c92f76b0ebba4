package procattr_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpud/gpud/pkg/procattr"
)

const (
	uid  = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
	uidU = "0f1e2d3c_4b5a_6978_8796_a5b4c3d2e1f0"
	cid  = "4c0b9b6f2d7a8e1c3f5a6b7c8d9e0f1a2b3c4d5e6f708192a3b4c5d6e7f80912"
)

// writeProc writes <root>/<pid>/cgroup.
func writeProc(t *testing.T, root, pid, content string) {
	t.Helper()
	dir := filepath.Join(root, pid)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLookup(t *testing.T) {
	want := procattr.Container{PodUID: uid, ContainerID: cid}
	tests := []struct {
		name   string
		cgroup string
		want   procattr.Container
		err    error
	}{
		{name: "v2 systemd containerd", cgroup: "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope\n", want: want},
		{name: "v2 systemd cri-o guaranteed", cgroup: "0::/kubepods.slice/kubepods-pod" + uidU + ".slice/crio-" + cid + ".scope\n", want: want},
		{name: "v2 cgroupfs containerd", cgroup: "0::/kubepods/besteffort/pod" + uid + "/" + cid + "\n", want: want},
		{name: "v2 cgroupfs cri-o", cgroup: "0::/kubepods/burstable/pod" + uid + "/crio-" + cid + "\n", want: want},
		{name: "v2 nested cgroup inside container", cgroup: "0::/kubepods/pod" + uid + "/" + cid + "/init.scope\n", want: want},
		{name: "v1 cgroupfs containerd", cgroup: strings.Join([]string{
			"12:pids:/kubepods/burstable/pod" + uid + "/" + cid,
			"11:memory:/kubepods/burstable/pod" + uid + "/" + cid,
			"10:devices:/kubepods/burstable/pod" + uid + "/" + cid,
			"4:cpu,cpuacct:/kubepods/burstable/pod" + uid + "/" + cid,
			"1:name=systemd:/kubepods/burstable/pod" + uid + "/" + cid,
			"0::/",
		}, "\n") + "\n", want: want},
		{name: "v1 systemd cri-o", cgroup: strings.Join([]string{
			"11:memory:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uidU + ".slice/crio-" + cid + ".scope",
			"1:name=systemd:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uidU + ".slice/crio-" + cid + ".scope",
		}, "\n") + "\n", want: want},
		{name: "cri-o conmon is not the container", cgroup: "0::/kubepods.slice/kubepods-pod" + uidU + ".slice/crio-conmon-" + cid + ".scope\n", err: procattr.ErrNotContainer},
		{name: "host process", cgroup: "0::/system.slice/sshd.service\n", err: procattr.ErrNotContainer},
		{name: "private cgroup namespace", cgroup: "0::/\n", err: procattr.ErrNotContainer},
		{name: "pod without container", cgroup: "0::/kubepods/burstable/pod" + uid + "\n", err: procattr.ErrNotContainer},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			writeProc(t, root, "4242", tc.cgroup)
			got, err := procattr.Resolver{ProcRoot: root}.Lookup(4242)
			if !errors.Is(err, tc.err) {
				t.Fatalf("Lookup() error = %v, want %v", err, tc.err)
			}
			if got != tc.want {
				t.Errorf("Lookup() = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestLookupExitedProcess(t *testing.T) {
	_, err := procattr.Resolver{ProcRoot: t.TempDir()}.Lookup(7)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Lookup() error = %v, want fs.ErrNotExist", err)
	}
}

func TestLookupMalformed(t *testing.T) {
	root := t.TempDir()
	writeProc(t, root, "9", "garbage\n")
	_, err := procattr.Resolver{ProcRoot: root}.Lookup(9)
	if err == nil || errors.Is(err, procattr.ErrNotContainer) {
		t.Fatalf("Lookup() error = %v, want a parse error", err)
	}
}

func TestPodLogs(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{
		"ml_train-0_" + uid,
		"kube-system_coredns-abc_11111111-2222-3333-4444-555555555555",
		"not-a-pod-dir",
		"a_b_not-a-uid",
	} {
		if err := os.MkdirAll(filepath.Join(root, d, "c"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "file_x_"+uid), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := procattr.PodLogs{Root: root}.Pods()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]procattr.PodRef{
		uid:                                    {Namespace: "ml", Name: "train-0", UID: uid},
		"11111111-2222-3333-4444-555555555555": {Namespace: "kube-system", Name: "coredns-abc", UID: "11111111-2222-3333-4444-555555555555"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Pods() = %+v, want %+v", got, want)
	}
	if _, err := (procattr.PodLogs{Root: filepath.Join(root, "missing")}).Pods(); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Pods() on a missing root: error = %v, want fs.ErrNotExist", err)
	}
}
