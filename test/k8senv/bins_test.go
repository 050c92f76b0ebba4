package k8senv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestKubeVersion(t *testing.T) {
	if v := KubeVersion(); !strings.HasPrefix(v, "v1.") {
		t.Fatalf("KubeVersion() = %q, want v1.x.y", v)
	}
}

// TestBinDir: the same rule as hack/k8s-bins.sh.
func TestBinDir(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("HOME", filepath.Join(tmp, "home"))
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("GPUD_K8S_BINS", "")
	check := func(want string) {
		t.Helper()
		got, err := BinDir("v1.2.3")
		if err != nil || got != want {
			t.Fatalf("BinDir = %q, %v; want %q", got, err, want)
		}
	}
	check(filepath.Join(tmp, "home", ".cache", "gpud", "k8s-bins", "v1.2.3"))
	t.Setenv("XDG_CACHE_HOME", filepath.Join(tmp, "xdg"))
	check(filepath.Join(tmp, "xdg", "gpud", "k8s-bins", "v1.2.3"))
	root := filepath.Join(tmp, "bins")
	t.Setenv("GPUD_K8S_BINS", root)
	check(filepath.Join(root, "v1.2.3"))
	// The directory the script printed, used as it is.
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "kube-apiserver"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	check(root)
}

func TestMergeFlags(t *testing.T) {
	got := mergeFlags([]string{"--a=1", "--authorization-mode=RBAC", "--b"},
		[]string{"--authorization-mode=Node,RBAC", "--c=3", "--b"})
	want := []string{"--a=1", "--authorization-mode=Node,RBAC", "--b", "--c=3"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("mergeFlags = %q, want %q", got, want)
	}
}
